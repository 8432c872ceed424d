"""What ``nodefence status`` adds for the operator: the pause switch (who, when, why) and the
nodes that are NotReady yet not fenced, each with the guard that holds it back.

"Held back" is what ``nodefence explain`` says for the node: the decision a firing node alert
would get now, made by the fencer in dry-run on live facts, so status and explain never
disagree. A node nothing holds back is shown too: a firing alert would fence it, so if it is
not fenced, the alert is not reaching nodefence (or has not fired yet).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from nodefence.commands import explain, pause
from nodefence.engine.guard_kinds import words
from nodefence.engine.model import Decision
from nodefence.engine.readiness import is_ready
from nodefence.engine.record import FenceRecord
from nodefence.engine.wording import instant
from nodefence.kube.client import Deadline, Json
from nodefence.kube.convert import ready_condition
from nodefence.shell.fencer import Fencer

# Beyond this many NotReady nodes (a storm, or a cluster being torn down) each is only named:
# judging every one costs a few reads apiece, under the process's API rate limit, for a storm
# the storm guard refuses anyway; ``nodefence explain NODE`` judges any one of them.
MAX_EXPLAINED = 20


def _not_ready(node: Json) -> bool:
    return not is_ready(ready_condition(node))


def _since(node: Json) -> str | None:
    cond = ready_condition(node)
    return instant(cond.last_transition) if cond and cond.last_transition else None


def _fallback_at(node: Json, after_seconds: int) -> str | None:
    """When the fallback judges the node if no alert arrives: NotReady since plus
    ``cluster.fallback_after_seconds`` (None when it is off or the time is unknown)."""
    cond = ready_condition(node)
    if after_seconds <= 0 or cond is None or cond.last_transition is None:
        return None
    return instant(cond.last_transition + timedelta(seconds=after_seconds))


def _held(decision: Decision, node: Json, fallback_after: int) -> dict[str, Any]:
    blocking = [r for r in decision.reasons if not r.passed]
    earliest = decision.not_before
    return {
        "node": node["metadata"]["name"],
        "notReadySince": _since(node),
        "outcome": explain.outcome(decision, held=False),
        "heldBackBy": blocking[0].guard if blocking else None,
        "heldBecause": words(blocking[0].guard) if blocking else None,
        "reason": blocking[0].message
        if blocking
        else "nothing holds it back: a firing alert would fence it now (is the alert reaching "
        "nodefence?)",
        "allBlocking": [r.guard for r in blocking],
        # When the fence can happen at the earliest, if everything holding it back is a wait.
        "earliestFence": instant(earliest) if earliest is not None else None,
        # If no alert reaches nodefence: when its reconcile pass judges the node itself.
        "fallbackAt": _fallback_at(node, fallback_after),
    }


async def not_fenced(fencer: Fencer, record: FenceRecord, nodes: list[Json]) -> dict[str, Any]:
    """The NotReady nodes the record holds no entry for, each judged as ``explain`` would;
    ``fencer`` must run a dry-run policy, so judging them writes nothing."""
    if not fencer.policy.dry_run:
        raise ValueError("nodes are judged for status only by a dry-run fencer")
    held = set(record.holders)
    candidates = sorted(
        (n for n in nodes if _not_ready(n) and n["metadata"]["name"] not in held),
        key=lambda n: str(n["metadata"]["name"]),
    )
    judged, skipped = candidates[:MAX_EXPLAINED], candidates[MAX_EXPLAINED:]
    policy = fencer.policy
    alertname = (
        explain.DEFAULT_ALERT
        if explain.DEFAULT_ALERT in policy.alerts.names
        else policy.alerts.names[0]
    )
    events = [
        explain.synthesized_alert(policy, n["metadata"]["name"], alertname, {}, "status").event
        for n in judged
    ]
    decisions = await fencer.handle_events(events) if events else []
    return {
        "notReadyNotFenced": [
            _held(d, n, policy.cluster.fallback_after_seconds)
            for d, n in zip(decisions, judged, strict=True)
        ],
        "notReadyNotJudged": [n["metadata"]["name"] for n in skipped],
    }


async def operator_view(
    fencer: Fencer, record: FenceRecord, nodes: list[Json], deadline: Deadline
) -> dict[str, Any]:
    """The keys ``status`` adds: ``pause`` and the NotReady nodes held back."""
    configmap, _at = await pause.read_switch(fencer.kube, fencer.reader.namespace, deadline)
    state = pause.pause_state(configmap or {}, fencer.reader.namespace)
    return {"pause": state.as_dict(), **await not_fenced(fencer, record, nodes)}


def pause_line(status: dict[str, Any]) -> str:
    line = pause.describe(status["pause"])
    return "Pause switch: " + (
        line.replace("paused", "PAUSED", 1) if status["pause"]["paused"] else line
    )


def held_back_lines(status: dict[str, Any]) -> list[str]:
    held = status["notReadyNotFenced"]
    lines = [f"NotReady, not fenced: {len(held) + len(status['notReadyNotJudged']) or 'none'}"]
    for h in held:
        since = f" since {h['notReadySince']}" if h["notReadySince"] else ""
        because = h["heldBecause"] or "nothing holds it back"
        earliest = f"; earliest fence {h['earliestFence']}" if h["earliestFence"] else ""
        lines.append(f"  {h['node']}  NotReady{since}  held back: {because}{earliest}")
        lines.append(f"      {h['reason']}")
        if h.get("fallbackAt"):
            lines.append(
                f"      if no alert arrives, the fallback judges it from {h['fallbackAt']}"
            )
    if status["notReadyNotJudged"]:
        lines.append(
            f"  not judged (more than {MAX_EXPLAINED}; nodefence explain NODE judges one): "
            + ", ".join(status["notReadyNotJudged"])
        )
    if held:
        lines.append("  (nodefence explain NODE shows every guard)")
    return lines
