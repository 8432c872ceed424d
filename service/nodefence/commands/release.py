"""``nodefence release NODE --reason TEXT``: let go of a fence nodefence applied.

Taking the taint off by hand (``kubectl taint ... out-of-service-``) leaves nodefence's mirror
annotations on the node and its entry in the fence record, and the next pass reads the node as
one that "may be flapping". This releases all of it. The engine decides the release
(``engine.release``: what is nodefence's, what is refused and why) and the shell's loop commits
it as it commits any decision: the node first (exactly nodefence's taint and its
``nodefence.io/`` annotations, in one JSON patch that tests the uid and resourceVersion it was
decided on; a node that changed is read and decided again), then the record entry
(read-modify-write on the ConfigMap's resourceVersion). This command then records an Event on
the Node with who and why. A record entry left behind by a crash between the two is let go by
the next reconcile pass, which finds its taint gone.

What is never released (S4): an out-of-service taint nodefence did not apply (no entry in the
record, or a taint whose value or effect someone changed), and a fence still being written. A
node still NotReady is released only with ``--yes``, after the command has said what that means.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

from nodefence.actions.executor import Outcome, is_own_taint, release_patch
from nodefence.commands.failures import CommandRefusedError
from nodefence.engine import guard_kinds
from nodefence.engine import release as engine_release
from nodefence.engine.model import (
    OUT_OF_SERVICE_KEY,
    ClusterFacts,
    Decision,
    Facts,
    ReleaseFenceAction,
)
from nodefence.engine.printable import printable_lines
from nodefence.engine.record import FenceEntry, FenceRecord
from nodefence.engine.wording import instant
from nodefence.kube.client import Deadline, Json
from nodefence.kube.convert import node_facts
from nodefence.kube.events import EventRecorder
from nodefence.kube.facts import Snapshot
from nodefence.policy import Policy
from nodefence.shell.loop import KeptChangingError, Loop

EVENT_REASON = "FenceReleased"


class ConfirmationNeededError(CommandRefusedError):
    """The release would take the taint off a node that is still NotReady."""


@dataclasses.dataclass(frozen=True)
class ReleasePlan:
    """What releasing the node takes away, as the engine decided it on one read of the node
    and the record."""

    entry: FenceEntry
    # JSON patch for the node; empty when nothing on the node is nodefence's any more.
    patch: tuple[Json, ...]
    taint: Json | None
    annotations: tuple[str, ...]
    node_uid: str
    # Set when the node is still NotReady: what releasing it now means.
    not_ready: str = ""
    notes: tuple[str, ...] = ()
    # False when the fence was of a node object that is gone: that node is not touched.
    same_node: bool = True
    # The Event's words (the decision's verdict).
    message: str = ""


def planned(decision: Decision, node: Json | None, record: FenceRecord) -> ReleasePlan:
    """The release ``decision`` commits, or the refusal it holds as ``CommandRefusedError``
    (``ConfirmationNeededError`` when only the operator's confirmation is missing)."""
    blocking = next((r for r in decision.reasons if not r.passed), None)
    if blocking is not None:
        if blocking.guard == guard_kinds.RELEASE_CONFIRMED:
            raise ConfirmationNeededError(blocking.message)
        raise CommandRefusedError(blocking.message)
    action = next(a for a in decision.actions if isinstance(a, ReleaseFenceAction))
    entry = record.entry(action.node)
    assert entry is not None
    taints = ((node or {}).get("spec") or {}).get("taints") or []
    taint = next((t for t in taints if is_own_taint(t, action.effect)), None)
    return ReleasePlan(
        entry,
        tuple(release_patch(node, action)) if node is not None else (),
        taint if action.effect and action.same_node else None,
        action.remove_annotations if action.same_node else (),
        action.node_uid,
        action.not_ready,
        action.notes,
        action.same_node,
        decision.summary,
    )


def plan_release(
    name: str, node: Json | None, record: FenceRecord, policy: Policy, namespace: str
) -> ReleasePlan:
    """What releasing node ``name`` takes away, as confirmed by the operator, or
    ``CommandRefusedError`` saying why nothing is."""
    facts = Facts(
        node_facts(node) if node is not None else None,
        None,
        (),
        ClusterFacts(total_nodes=0, ready_nodes=0),
        record=record,
    )
    asked = engine_release.ReleaseRequest(name, "", confirmed=True, namespace=namespace)
    decision = engine_release.decide_release(facts, asked, policy, datetime.now(UTC))
    return planned(decision, node, record)


async def release(
    loop: Loop,
    policy: Policy,
    *,
    namespace: str,
    identity: str,
    name: str,
    reason: str,
    by: str,
    confirmed: bool,
    deadline: Deadline,
) -> dict[str, Any]:
    """Release node ``name``'s fence through the loop (read, decide, commit, and on a node that
    changed under the patch read and decide again). Raises ``CommandRefusedError`` (nothing
    changed) when the fence is not nodefence's to release, or the node is still NotReady and
    ``confirmed`` is not set."""
    if not reason.strip():
        raise CommandRefusedError("--reason must say why the fence is released")
    asked = engine_release.ReleaseRequest(
        name, f"released by {by}: {reason.strip()}", confirmed, namespace
    )

    def decider(snapshot: Snapshot) -> Decision:
        return engine_release.decide_release(snapshot.facts, asked, policy, snapshot.now)

    try:
        done = await loop.run(name, decider, deadline)
    except KeptChangingError:
        raise CommandRefusedError(
            f"node {name} kept changing while nodefence tried to release it; try again"
        ) from None
    plan = planned(done.decision, done.snapshot.node, done.snapshot.facts.record)
    written = next((r for r in done.results if r.action == "release-node"), None)
    if written is not None and written.outcome is Outcome.FAILED:
        raise CommandRefusedError(
            f"node {name} could not be written ({written.detail}); nothing was released"
        )
    dropped = next((r for r in done.results if r.action == "release"), None)
    if dropped is None or dropped.outcome is Outcome.FAILED:
        detail = dropped.detail if dropped is not None else "not written"
        raise CommandRefusedError(
            f"node {name}'s taint and annotations are off, but its fence record entry could not "
            f"be dropped ({detail}); the next reconcile pass lets go of it"
        )
    recorded = False
    if plan.same_node:
        recorded = await EventRecorder(loop.reader.kube, identity).node_event(
            node=name,
            node_uid=plan.node_uid,
            reason=EVENT_REASON,
            message=plan.message,
            warning=bool(plan.not_ready),
            deadline=deadline,
        )
    return {
        "node": name,
        "nodeUID": plan.node_uid,
        "released": True,
        "by": by,
        "reason": reason.strip(),
        "taintRemoved": plan.taint,
        "annotationsRemoved": list(plan.annotations),
        "recordEntry": "dropped" if dropped.outcome is Outcome.DONE else dropped.detail,
        "stillNotReady": bool(plan.not_ready),
        "event": EVENT_REASON if recorded else None,
        "notes": list(plan.notes),
        "machine": machine_state(name, plan.entry),
    }


def machine_state(name: str, entry: FenceEntry) -> str:
    """What nodefence left the node's machine in: a release takes the taint away, never the
    power, so a machine nodefence powered off stays off until someone powers it on."""
    off, on = entry.power_off_sent_at, entry.power_on_sent_at
    if off is not None and (on is None or on < off):
        return (
            f"nodefence powered the machine off at {instant(off)} and did not power it on: it "
            "stays off until someone does, through its BMC (Redfish ComputerSystem.Reset "
            "with ResetType On, `ipmitool ... chassis power on`, or its fence agent with "
            f"action=on); `nodefence check-fencing {name}` reads its power state now"
        )
    if off is not None and on is not None:
        return (
            f"nodefence powered the machine off at {instant(off)} and on again at "
            f"{instant(on)} (a reboot); `nodefence check-fencing {name}` reads its power "
            "state now"
        )
    return "nodefence sent no power action to the machine: its power is as nodefence found it"


def as_text(report: dict[str, Any]) -> str:
    taint = report["taintRemoved"]
    lines = [f"Released node {report['node']} ({report['reason']}; by {report['by']}):"]
    if taint is not None:
        lines.append(
            f"  removed taint {OUT_OF_SERVICE_KEY}={taint.get('value')}:{taint.get('effect')}"
        )
    for key in report["annotationsRemoved"]:
        lines.append(f"  removed annotation {key}")
    lines.append(f"  fence record entry: {report['recordEntry']}")
    lines.append(f"  machine: {report['machine']}")
    lines.extend(f"  note: {n}" for n in report["notes"])
    if report["event"]:
        lines.append(f"  Event {report['event']} recorded on the node")
    if report["stillNotReady"]:
        lines.append("  the node is still NotReady: watch its pods and volumes")
    return printable_lines(lines)
