"""``POST /slack/interactions``: a button press, verified, then acted on in the background.

Slack wants an answer within three seconds, while a fence re-reads the cluster, takes the lock
and writes; so the handler verifies the Slack signature, answers 200 and hands the press to a
task the application tracks and awaits at shutdown. What a task cannot finish (the purge of
many pods) is finished by the reconcile pass, as for any alert.

A press acts only if, in this order: Slack signed the request within five minutes; the button
value carries nodefence's signature and has not expired; it was pressed on the matching button,
in the channel nodefence asked in; the person is an approver; then the engine judges, on live
facts, whether the answer still applies (``engine.answer``: the node is not fenced already, is
still the same object, still NotReady, in the same outage the question described, and no
rejection holds for it). The alert is then decided again with the answer, every guard of the
engine judged again, and what is left to record (a rejection, a question withdrawn) is decided
and committed by the shell's loop like any other change.

One answer wins: an answer that applies is written into the fence record before it is acted
on, on the record's version like every other write, and refused when another answer got
there first (two people pressing at once, on this replica or another). The person whose answer
lost is told which answer stood and whose it was; against an approval being acted on, the
reply waits (reading, never writing) until that approval fenced the node or was withdrawn, so
that it says what really happened.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs

import structlog
from aiohttp import web
from pydantic import SecretStr
from slack_sdk.signature import SignatureVerifier

from nodefence.engine import answer, guard_kinds
from nodefence.engine.answer import Answer, decide_answer, decide_answered
from nodefence.engine.model import (
    AlertEvent,
    AlertStatus,
    Approval,
    ApprovalDecision,
    Decision,
    Facts,
)
from nodefence.engine.wording import instant
from nodefence.errors import ClusterUnavailableError
from nodefence.http.handlers import read_bounded
from nodefence.http.problems import Problem
from nodefence.kube.client import Deadline, Json
from nodefence.kube.facts import Snapshot
from nodefence.shell.fencer import Fencer
from nodefence.shell.loop import SETTLE_POLL_SECONDS
from nodefence.slack import messages, tokens
from nodefence.slack.approvals import SlackApprovals
from nodefence.slack.client import ApprovalChannelUnavailableError, SlackClient

log = structlog.get_logger(__name__)

_ACTIONS = {
    messages.APPROVE_ACTION_ID: tokens.Action.APPROVE,
    messages.REJECT_ACTION_ID: tokens.Action.REJECT,
}


@dataclass(frozen=True)
class Click:
    user: str
    channel: str
    action_id: str
    value: str
    response_url: str


class BackgroundTasks:
    """Work started by a request and finished after its answer; awaited at shutdown."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self, grace_seconds: float | None = None) -> None:
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=grace_seconds)

    def __len__(self) -> int:
        return len(self._tasks)


def parse_click(body: bytes) -> Click | None:
    """The press in a ``block_actions`` payload; None for other interaction types."""
    try:
        form = parse_qs(body.decode("utf-8"), strict_parsing=False)
        payload = json.loads(form["payload"][0])
        if payload.get("type") != "block_actions":
            return None
        action = payload["actions"][0]
        return Click(
            user=str(payload["user"]["id"]),
            channel=str((payload.get("channel") or {}).get("id") or ""),
            action_id=str(action["action_id"]),
            value=str(action.get("value") or ""),
            response_url=str(payload["response_url"]),
        )
    except (UnicodeDecodeError, KeyError, IndexError, TypeError, AttributeError, ValueError):
        raise Problem(
            400,
            kind="invalid-slack-payload",
            detail="The body is not a Slack block_actions interaction payload.",
        ) from None


class Interactions:
    def __init__(
        self,
        *,
        fencer: Fencer,
        approvals: SlackApprovals,
        slack: SlackClient,
        signing_secret: SecretStr,
        approval_key: SecretStr,
        channel: str,
        approvers: list[str],
        approver_groups: list[str],
        deadline_seconds: float,
        max_body_bytes: int,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.fencer = fencer
        self.approvals = approvals
        self.slack = slack
        self.verifier = SignatureVerifier(signing_secret.get_secret_value())
        self.approval_key = approval_key
        self.channel = channel
        self.approvers = frozenset(approvers)
        self.approver_groups = list(approver_groups)
        self.deadline_seconds = deadline_seconds
        self.max_body_bytes = max_body_bytes
        self.clock = clock
        self.tasks = BackgroundTasks()

    def signature_valid(self, body: bytes, headers: Mapping[str, str]) -> bool:
        try:
            return self.verifier.is_valid_request(body, dict(headers))
        except (ValueError, UnicodeDecodeError):
            return False

    async def handle(self, request: web.Request) -> web.Response:
        body = await read_bounded(request, self.max_body_bytes)
        if not self.signature_valid(body, request.headers):
            log.warning("slack_signature_invalid", remote=request.remote)
            raise Problem(
                401,
                kind="invalid-slack-signature",
                detail="The request does not carry a valid Slack signature from the last "
                "five minutes.",
            )
        click = parse_click(body)
        if click is not None:
            self.tasks.spawn(self.process(click))
        return web.Response(status=200)

    async def process(self, click: Click) -> None:
        try:
            await self._process(click)
        except Exception:
            log.exception("slack_interaction_failed", user=click.user)

    async def authorised(self, user: str) -> bool:
        if user in self.approvers:
            return True
        for group in self.approver_groups:
            try:
                if user in await self.slack.group_members(group):
                    return True
            except ApprovalChannelUnavailableError as exc:
                log.warning("approver_group_unreadable", group=group, error=str(exc))
        return False

    async def _tell(self, click: Click, text: str) -> None:
        await self._respond(click, messages.ephemeral(text))

    async def _replace(self, click: Click, headline: str, decision: Decision | None) -> None:
        footer = f"Answered by <@{click.user}> at {instant(self.clock())}."
        text, blocks = messages.outcome_message(headline, decision, footer)
        await self._respond(click, {"replace_original": True, "text": text, "blocks": blocks})

    async def _respond(self, click: Click, body: Json) -> None:
        try:
            await self.slack.respond(click.response_url, body)
        except ApprovalChannelUnavailableError as exc:
            log.warning("slack_response_failed", error=str(exc))

    async def _process(self, click: Click) -> None:
        now = self.clock()
        try:
            token = tokens.verify(click.value, self.approval_key, now=now.timestamp())
        except tokens.TokenError as exc:
            log.warning("slack_token_refused", user=click.user, reason=str(exc))
            await self._tell(click, f"This button cannot be used: {exc}. Nothing was done.")
            return
        if _ACTIONS.get(click.action_id) is not token.action:
            log.warning("slack_token_refused", user=click.user, reason="action mismatch")
            await self._tell(click, "This button cannot be used here. Nothing was done.")
            return
        if click.channel != token.channel or click.channel != self.channel:
            log.warning("slack_token_refused", user=click.user, reason="channel mismatch")
            await self._tell(
                click,
                "This button was not pressed in the channel nodefence asked in. Nothing was done.",
            )
            return
        if not await self.authorised(click.user):
            log.warning("slack_approver_refused", user=click.user, node=token.node)
            await self._tell(
                click,
                f"You are not an approver for nodefence, so node {token.node} is left as it "
                "is. Ask an on-call approver.",
            )
            return
        decision = ApprovalDecision.APPROVE
        if token.action is tokens.Action.REJECT:
            decision = ApprovalDecision.REJECT
        approval = Approval(click.user, now, decision, token.uid, token.fingerprint)
        log.info("slack_answer", user=click.user, node=token.node, answer=decision.value)
        try:
            await self._answer(click, token, approval)
        except ClusterUnavailableError as exc:
            log.warning("slack_answer_unavailable", node=token.node, error=str(exc))
            await self._tell(
                click,
                f"The Kubernetes API could not be reached, so nothing was done to node "
                f"{token.node}. Press the button again in a moment.",
            )

    async def _answer(self, click: Click, token: tokens.ButtonToken, approval: Approval) -> None:
        """The engine decides whether the answer still applies (``engine.answer``) and the
        shell's loop commits what it decides (a rejection recorded, a question withdrawn);
        an answer that applies is acted on through the alert's own decision, on every guard."""
        deadline = Deadline(self.deadline_seconds)
        node = token.node
        who = f"<@{click.user}>"
        # A question asked while this answer is acted on (the power step found a new failure)
        # is not the one answered: it is never withdrawn with it.
        asked = Answer(
            node,
            approval,
            token.since,
            datetime.fromtimestamp(token.expires, UTC),
            asked_before=self.approvals.now(),
            acting=timedelta(seconds=self.deadline_seconds),
        )
        policy = self.fencer.policy

        def judged(snapshot: Snapshot) -> Decision:
            return decide_answer(snapshot.facts, asked, policy, snapshot.now)

        first = await self.fencer.loop.run(node, judged, deadline)
        facts = first.snapshot.facts
        # The engine judged the answer's age on the API server's clock, as everything else.
        dated = answer.dated(asked, facts, first.snapshot.now)
        if _refused_by(first.decision) == guard_kinds.ANSWER_NOT_APPROVED:
            request = facts.record.approval(node)
            standing = request.approval if request is not None else ""
            decision, facts = await self._acted_on(node, asked, deadline)
            await self._replace(click, _outanswered(decision, dated, facts, who, standing), None)
            return
        if not answer.applies(first.decision):
            await self._replace(click, _refusal(first.decision, dated, facts, who), None)
            return
        decision = await self.fencer.handle_event(
            self._event(token), deadline, approval=dated.approval
        )

        def settled(snapshot: Snapshot) -> Decision:
            return decide_answered(snapshot.facts, dated, decision, policy, snapshot.now)

        after = await self.fencer.loop.run(node, settled, deadline)
        if dated.rejects:
            headline = (
                f":no_entry_sign: Fencing node *{node}* was rejected by {who}; nodefence does "
                "not fence it during this outage."
            )
        elif answer.applies(after.decision):
            headline = (
                f":lock: Node *{node}* is fenced (out-of-service taint applied), approved by "
                f"{who}; its stuck pods are being purged."
            )
            self._settled(node)
        else:
            facts = after.snapshot.facts
            fenced = answer.fenced_by_us(facts.node, token.uid, facts.record)
            headline = (
                f"Node *{node}* is already fenced ({fenced}); the approval by {who} changed "
                "nothing."
                if fenced is not None
                else f"Node *{node}* was not fenced although {who} approved: "
                f"{decision.summary}. If the alert keeps firing and every guard passes, "
                "nodefence asks again."
            )
        await self._replace(click, headline, decision)

    async def _acted_on(
        self, node: str, asked: Answer, deadline: Deadline
    ) -> tuple[Decision, Facts]:
        """Another person's approval is being acted on: the record is read again (nothing is
        written: this answer lost) until that approval fenced the node or was withdrawn, or
        this request's time is up; the answer judged on the last read, to tell what happened."""
        while True:
            snapshot = await self.fencer.loop.reader.read(node, deadline)
            decision = decide_answer(snapshot.facts, asked, self.fencer.policy, snapshot.now)
            if _refused_by(decision) != guard_kinds.ANSWER_NOT_APPROVED:
                return decision, snapshot.facts
            if deadline.remaining <= SETTLE_POLL_SECONDS:
                return decision, snapshot.facts
            await asyncio.sleep(SETTLE_POLL_SECONDS)

    def _settled(self, node: str) -> None:
        if self.approvals.metrics is not None:
            self.approvals.metrics.approval_settled(node)

    def _event(self, token: tokens.ButtonToken) -> AlertEvent:
        """The alert as the question was asked about it. The labels the answering rule matched
        on are restored, so the rule that asked is the rule that decides now."""
        labels = {"alertname": token.alertname}
        if self.fencer.node_labels:
            labels[self.fencer.node_labels[0]] = token.node
        rule = self.fencer.policy.rule_named(token.rule)
        if rule is not None:
            labels.update(rule.match.alert_labels)
        return AlertEvent(
            alertname=token.alertname,
            status=AlertStatus.FIRING,
            node=token.node,
            fingerprint=token.fingerprint,
            labels=labels,
        )


def _refused_by(decision: Decision) -> str | None:
    """The guard that refused the answer, or None when it applies."""
    return next((r.guard for r in decision.reasons if not r.passed), None)


def _kind(asked: Answer) -> str:
    return "rejection" if asked.rejects else "approval"


def _outanswered(decision: Decision, asked: Answer, facts: Facts, who: str, standing: str) -> str:
    """The new headline for an answer that lost to another person's approval (``standing``,
    as the record held it), once that approval was acted on (``decision``: this answer judged
    on the record read last)."""
    node = asked.node
    refused = _refused_by(decision)
    if refused == guard_kinds.ANSWER_NOT_APPROVED:
        return (
            f"Fencing node *{node}* was {standing} first, and nodefence is acting on that "
            f"approval; the {_kind(asked)} by {who} changes nothing."
        )
    if refused is not None and refused != guard_kinds.ANSWER_NOT_REJECTED:
        return _refusal(decision, asked, facts, who)
    return (
        f"Fencing node *{node}* was {standing} first; node *{node}* was not fenced on it, and "
        f"the {_kind(asked)} by {who} changed nothing. If the alert keeps firing and every "
        "guard passes, nodefence asks again."
    )


def _refusal(decision: Decision, asked: Answer, facts: Facts, who: str) -> str:
    """The message's new headline for an answer that no longer applies, by the guard that
    refused it."""
    node = asked.node
    refused = next(r for r in decision.reasons if not r.passed)
    if refused.guard == guard_kinds.ANSWER_NOT_FENCED:
        fenced = answer.fenced_by_us(facts.node, asked.approval.node_uid, facts.record)
        tail = (
            f"the rejection by {who} came after the approval and changed nothing; nodefence "
            "removes its taint once the node is verifiably healthy again"
            if asked.rejects
            else f"the approval by {who} changed nothing"
        )
        return f"Node *{node}* is already fenced ({fenced}); {tail}."
    if refused.guard == guard_kinds.ANSWER_NOT_REJECTED:
        request = facts.record.approval(node)
        rejected = request.rejection if request is not None else ""
        return (
            f":no_entry_sign: Fencing node *{node}* was {rejected} for this outage; the "
            f"{_kind(asked)} by {who} changes nothing. A new outage of the node is asked again."
        )
    stale = {
        guard_kinds.ANSWER_NODE_EXISTS: f"Node *{node}* no longer exists.",
        guard_kinds.ANSWER_SAME_NODE: (
            f"Node *{node}* was deleted and re-created since the question was asked."
        ),
        guard_kinds.ANSWER_STILL_NOT_READY: (
            f"Node *{node}* is Ready again; the answer is not needed any more."
        ),
        guard_kinds.ANSWER_SAME_OUTAGE: (
            f"Node *{node}* recovered and failed again since the question was "
            "asked; this answer does not apply to the new outage (nodefence asks again)."
        ),
    }
    return f"{stale[refused.guard]} Nothing was fenced."


__all__ = ["BackgroundTasks", "Click", "Interactions", "parse_click"]
