"""Decision records as JSON (webhook replies, logs, ``nodefence plan``) and as a short text."""

from __future__ import annotations

from typing import Any, cast

from typing_extensions import TypedDict

from nodefence.engine import action_kinds
from nodefence.engine.action_kinds import ActionJson, OutcomeName
from nodefence.engine.model import Action, Decision, Verdict
from nodefence.engine.wording import instant


class ReasonJson(TypedDict):
    guard: str
    passed: bool
    message: str


class ResultJson(TypedDict):
    """What one write did."""

    action: str
    target: str
    outcome: OutcomeName
    detail: str


class DecisionJson(TypedDict):
    """One decision record: the verdict, every guard that passed or blocked (worded for a
    person), the actions decided and what each write did. ``summary`` is the headline: the first
    blocking reason, else the verdict's words."""

    verdict: Verdict
    node: str | None
    alertname: str
    fingerprint: str
    status: str
    rule: str | None
    dry_run: bool
    decided_at: str | None
    summary: str
    reasons: list[ReasonJson]
    actions: list[ActionJson]
    results: list[ResultJson]


def action_to_dict(action: Action) -> dict[str, Any]:
    return action_kinds.to_json(action)


def decision_to_dict(decision: Decision) -> DecisionJson:
    return {
        "verdict": decision.verdict,
        "node": decision.node,
        "alertname": decision.alertname,
        "fingerprint": decision.fingerprint,
        "status": decision.status,
        "rule": decision.rule,
        "dry_run": decision.dry_run,
        "decided_at": instant(decision.now) if decision.now is not None else None,
        "summary": decision.summary,
        "reasons": [
            {"guard": r.guard, "passed": r.passed, "message": r.message} for r in decision.reasons
        ],
        "actions": [action_kinds.kind_of(a).to_json(a) for a in decision.actions],
        "results": [cast(ResultJson, dict(r)) for r in decision.results],
    }


def describe_action(action: Action) -> str:
    return action_kinds.describe(action)


def describe(decision: Decision) -> str:
    """A few lines for a terminal: headline, then each guard marked ok or blocked, then actions."""
    return "\n".join(describe_lines(decision))


def describe_lines(decision: Decision) -> list[str]:
    """``describe``'s lines, each one line of the program's own (a newline inside one comes
    from a value, and a command shows it escaped: ``engine.printable``)."""
    mode = " (dry run)" if decision.dry_run else ""
    about = decision.alertname or decision.status or "decision"
    head = f"{decision.verdict.value}{mode} {decision.node or '-'} [{about}]: {decision.summary}"
    lines = [head]
    lines.extend(
        f"  {'ok ' if r.passed else 'NO '} {r.guard}: {r.message}" for r in decision.reasons
    )
    lines.extend(f"  -> {describe_action(a)}" for a in decision.actions)
    return lines
