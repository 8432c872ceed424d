"""Block Kit messages: the question to the on-call, its outcome, and fence notices.

The question carries what a person needs to judge a fence without opening a terminal: how long
the node has been NotReady, how stale its kubelet Lease is, which pods hang Terminating and the
StatefulSets they belong to (the workloads a wrong fence would corrupt), and every guard's
verdict in the engine's own words.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from nodefence.engine import escalation
from nodefence.engine.action_kinds import Result
from nodefence.engine.model import Decision, Facts
from nodefence.engine.wording import duration, instant

Json = dict[str, Any]
APPROVE_ACTION_ID = "nodefence-approve"
REJECT_ACTION_ID = "nodefence-reject"
# Slack's limit for a section's text is 3000 characters; lists are cut well before that.
MAX_LISTED = 10
MAX_SECTION = 2900


def escape(text: str) -> str:
    """mrkdwn treats ``&``, ``<`` and ``>`` as markup; node and pod names must stay literal."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _section(text: str) -> Json:
    if len(text) > MAX_SECTION:
        text = text[: MAX_SECTION - 1] + "…"
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def _context(text: str) -> Json:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": text}]}


def _listed(items: list[str]) -> str:
    shown = ", ".join(f"`{escape(item)}`" for item in items[:MAX_LISTED])
    more = len(items) - MAX_LISTED
    return shown + (f" and {more} more" if more > 0 else "")


def fact_lines(facts: Facts, now: datetime) -> list[str]:
    node = facts.node
    lines: list[str] = []
    if node is not None and node.ready is not None:
        since = node.ready.last_transition
        age = f" for {duration(now - since)} (since {instant(since)})" if since else ""
        lines.append(f"*Ready:* {escape(node.ready.status)}{age}")
    if facts.lease is None:
        lines.append("*Kubelet Lease:* none found")
    elif facts.lease.renew_time is None:
        lines.append("*Kubelet Lease:* never renewed")
    else:
        renewed = facts.lease.renew_time
        lines.append(
            f"*Kubelet Lease:* last renewed {duration(now - renewed)} ago ({instant(renewed)})"
        )
    stuck = sorted(f"{p.namespace}/{p.name}" for p in facts.pods if p.terminating)
    lines.append(
        f"*Pods stuck Terminating:* {len(stuck)}" + (f": {_listed(stuck)}" if stuck else "")
    )
    sets = sorted(
        {
            f"{p.namespace}/{p.owner_name}"
            for p in facts.pods
            if p.terminating and p.owner_kind == "StatefulSet" and p.owner_name
        }
    )
    if sets:
        lines.append(f"*StatefulSets affected:* {_listed(sets)}")
    return lines


def reason_lines(decision: Decision) -> list[str]:
    return [
        f"{':white_check_mark:' if r.passed else ':x:'} `{escape(r.guard)}` {escape(r.message)}"
        for r in decision.reasons
    ]


def request_message(
    decision: Decision,
    facts: Facts,
    now: datetime,
    *,
    approve_value: str,
    reject_value: str,
    expires: datetime,
) -> tuple[str, list[Json]]:
    node = escape(decision.node or "")
    text = f"nodefence asks to fence node {node} ({decision.alertname})"
    confirm = {
        "title": {"type": "plain_text", "text": "Fence this node?"},
        "text": {
            "type": "mrkdwn",
            "text": (
                f"Node *{node}* gets the out-of-service taint and its stuck pods are "
                "force-deleted. Only approve if the machine is really powered off or isolated: "
                "a node that still runs its pods would have their volumes attached twice."
            ),
        },
        "confirm": {"type": "plain_text", "text": "Fence"},
        "deny": {"type": "plain_text", "text": "Cancel"},
        "style": "danger",
    }
    blocks: list[Json] = [
        {"type": "header", "text": {"type": "plain_text", "text": f"Fence node {decision.node}?"}},
        _section(
            f"*{escape(decision.alertname)}* fires for node *{node}*; every automatic guard "
            f"passed and rule `{escape(decision.rule or '')}` asks a person before the "
            "out-of-service taint is applied."
        ),
    ]
    note = escalation.is_escalation(decision.reasons)
    if note is not None:
        text = f"nodefence could not prove node {node}'s machine is off and asks a person"
        title = f"Fence node {decision.node} without power-off proof?"
        blocks[0] = {"type": "header", "text": {"type": "plain_text", "text": title}}
        blocks[1] = _section(
            f":warning: *No power-off proof for node {node}.* *{escape(decision.alertname)}* "
            f"fires and every other guard passed, but fencing (rule "
            f"`{escape(decision.rule or '')}`) could not show the machine is off:\n"
            f"```{escape(note.message.partition(escalation.NO_PROOF + ': ')[2])}```\n"
            "*Approve only after checking yourself that the machine is powered off or "
            "isolated* (console, datacenter, cloud API): your approval is recorded as the "
            "proof. Reject if in doubt; nothing more is done for this outage."
        )
    blocks += [
        _section("\n".join(fact_lines(facts, now))),
        _section("*Guards*\n" + "\n".join(reason_lines(decision))),
        {
            "type": "actions",
            "block_id": "nodefence-approval",
            "elements": [
                {
                    "type": "button",
                    "action_id": APPROVE_ACTION_ID,
                    "text": {"type": "plain_text", "text": "Approve fence"},
                    "style": "danger",
                    "value": approve_value,
                    "confirm": confirm,
                },
                {
                    "type": "button",
                    "action_id": REJECT_ACTION_ID,
                    "text": {"type": "plain_text", "text": "Reject"},
                    "value": reject_value,
                },
            ],
        },
        _context(
            f"Alert fingerprint `{escape(decision.fingerprint)}` · the buttons expire at "
            f"{instant(expires)}; every guard is checked again when the button is pressed."
        ),
    ]
    return text, blocks


def outcome_message(
    headline: str, decision: Decision | None, footer: str
) -> tuple[str, list[Json]]:
    """The request message after it was answered: no buttons left to press."""
    blocks: list[Json] = [_section(headline)]
    if decision is not None and decision.reasons:
        blocks.append(
            _section("*Guards at the time of the answer*\n" + "\n".join(reason_lines(decision)))
        )
    blocks.append(_context(footer))
    return headline, blocks


def expired_message(node: str) -> tuple[str, list[Json]]:
    headline = (
        f"The request to fence node *{escape(node)}* expired without an answer; "
        "a new request was posted."
    )
    return headline, [_section(headline)]


def ephemeral(text: str) -> Json:
    return {"response_type": "ephemeral", "replace_original": False, "text": text}


def notice_message(result: Result, decision: Decision) -> tuple[str, list[Json]]:
    """The notice of a done write: its words are the result's own (``Result.notice``); a result
    that has none is not one to notify, and asking for it is an error."""
    if not result.notice:
        raise ValueError(f"nodefence posts no notice of {result.name!r}")
    headline = result.notice.format(node=escape(decision.node or ""))
    blocks = [_section(headline), _section("\n".join(reason_lines(decision)))]
    return headline, blocks
