"""``nodefence release NODE --reason TEXT``: let go of a fence nodefence applied.

Taking the taint off by hand (``kubectl taint ... out-of-service-``) leaves nodefence's mirror
annotations on the node and its entry in the fence record, and the next pass reads the node as
one that "may be flapping". This releases all of it, in the order that stays safe if it stops
half-way: the node first (exactly nodefence's taint and its ``nodefence.io/`` annotations, in one
JSON patch that tests the uid and resourceVersion it was planned on), then the record entry
(read-modify-write on the ConfigMap's resourceVersion), then an Event on the Node with who and
why. A record entry left behind by a crash between the two is let go by the next reconcile pass,
which finds its taint gone.

What is never released (S4): an out-of-service taint nodefence did not apply (no entry in the
record, or a taint whose value or effect someone changed), and a fence still being written. A
node still NotReady is released only with ``--yes``, after the command has said what that means.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from nodefence.actions.executor import Outcome, is_own_taint
from nodefence.actions.fence_record_writer import FenceRecordWriter
from nodefence.commands.failures import CommandRefusedError
from nodefence.engine import mirror
from nodefence.engine import record as fence_record
from nodefence.engine.authorship import taint_authorship
from nodefence.engine.model import (
    EXCLUDE_LABEL,
    OUT_OF_SERVICE_KEY,
    OUT_OF_SERVICE_VALUE,
    PREFIX,
    ReleaseAction,
)
from nodefence.engine.readiness import is_ready
from nodefence.engine.record import FenceEntry, FenceRecord, Phase
from nodefence.engine.wording import duration, instant
from nodefence.kube.client import Deadline, Json, KubeClient, KubeError
from nodefence.kube.convert import node_facts, ready_condition
from nodefence.kube.events import EventRecorder
from nodefence.policy import Policy, Rule

EVENT_REASON = "FenceReleased"
MAX_ATTEMPTS = 5


class ConfirmationNeededError(CommandRefusedError):
    """The release would take the taint off a node that is still NotReady."""


@dataclasses.dataclass(frozen=True)
class ReleasePlan:
    """What releasing the node takes away, decided on one read of the node and the record."""

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


def _escape(key: str) -> str:
    """An annotation key as a JSON pointer segment (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def _not_ours(name: str, node: Json | None, record: FenceRecord, namespace: str) -> str:
    where = f"ConfigMap {namespace}/{fence_record.CONFIGMAP}"
    key = fence_record.FENCE_PREFIX + name
    if key in record.unreadable:
        return (
            f"the fence record's entry for node {name} ({where}, key {key}) cannot be read; "
            "nothing is released on an entry nobody can read"
        )
    taints = [
        t
        for t in (node or {}).get("spec", {}).get("taints") or []
        if t.get("key") == OUT_OF_SERVICE_KEY
    ]
    notes = ((node or {}).get("metadata") or {}).get("annotations") or {}
    if taints and notes.get(mirror.FENCED_BY) == mirror.FENCED_BY_VALUE:
        # The mirror is not authority (the node can write it), but it says the record may have
        # lost an entry: the reconcile pass adopts the taint back only where the API server's
        # record of the write shows nodefence wrote it.
        return (
            f"node {name} carries an out-of-service taint and nodefence's annotations, but "
            f"nodefence's fence record ({where}) has no entry for it, so nothing proves the taint "
            "is nodefence's. The reconcile pass takes it back into the record where the API "
            "server shows nodefence wrote it; release it after that, or, if you are sure, "
            f"remove it by hand: kubectl taint nodes {name} {OUT_OF_SERVICE_KEY}-"
        )
    if taints:
        shown = ", ".join(f"{t.get('value') or '(no value)'}:{t.get('effect')}" for t in taints)
        return (
            f"the out-of-service taint on node {name} ({shown}) was not applied by nodefence: "
            f"it is not in nodefence's fence record ({where}), and nodefence never removes a "
            f"taint it did not apply. Whoever applied it removes it: kubectl taint nodes {name} "
            f"{OUT_OF_SERVICE_KEY}-"
        )
    if node is None:
        return f"node {name} does not exist, and nodefence's fence record has no entry for it"
    return (
        f"nodefence holds no fence of node {name} ({where} has no entry for it); nothing to release"
    )


def _consequences(name: str, node: Json, entry: FenceEntry, rule: Rule) -> str:
    cond = ready_condition(node)
    state = f"Ready is {cond.status}" if cond is not None else "it reports no Ready condition"
    if cond is not None and cond.last_transition is not None:
        state += f" since {instant(cond.last_transition)}"
    window = duration(rule.flap_window_seconds)
    return "\n".join(
        [
            f"node {name} is still NotReady ({state}). Releasing it takes the out-of-service "
            "taint off a node whose machine may be down or may be running unseen:",
            "  - pods still bound to it are no longer force-deleted: they stay Terminating, and "
            "StatefulSet replicas on it are not re-created elsewhere;",
            "  - volumes still attached to it are no longer force-detached: pods elsewhere that "
            "need them wait (Multi-Attach error) until the node is back or deleted;",
            f"  - for {window} (the flap window of rule {rule.name!r}) nodefence does not fence "
            "this node again unless a person approves it; after that a firing alert may fence it "
            f"again. To keep nodefence away from it: kubectl label node {name} "
            f"{EXCLUDE_LABEL}=true",
            "Run the command again with --yes to release it anyway.",
        ]
    )


def _authored(name: str, node: Json, taints: list[Json], entry: FenceEntry) -> Json | None:
    """The taint nodefence wrote for ``entry`` (S4), or None when none looks like it. One that
    looks like it but that the API server's record says someone else wrote (its timeAdded is not
    nodefence's write's, or, for a claim, nodefence's field manager did not write it) is refused:
    it is theirs, whatever it looks like."""
    index = next((i for i, t in enumerate(taints) if is_own_taint(t, entry.effect)), None)
    if index is None:
        return None
    facts = node_facts(node)
    judged = taint_authorship(dataclasses.replace(facts, taints=(facts.taints[index],)), entry)
    if not judged.ours:
        raise CommandRefusedError(
            f"the out-of-service taint on node {name} looks like the one nodefence applied but is "
            f"not ({judged.why}); it is theirs and is left on, and the reconcile pass lets go of "
            "nodefence's record entry"
        )
    return taints[index]


def plan_release(
    name: str, node: Json | None, record: FenceRecord, policy: Policy, namespace: str
) -> ReleasePlan:
    """What to take away, or ``CommandRefusedError`` saying why nothing is."""
    entry = record.entry(name)
    if entry is None:
        raise CommandRefusedError(_not_ours(name, node, record, namespace))
    meta = (node or {}).get("metadata") or {}
    if node is None or meta.get("uid") != entry.uid:
        note = (
            f"node {name} no longer exists"
            if node is None
            else f"node {name} was re-created (UID {meta.get('uid')}; the fence was of UID "
            f"{entry.uid}) and is left as it is"
        )
        only = (note + "; only the record entry is dropped",)
        return ReleasePlan(entry, (), None, (), entry.uid, notes=only, same_node=False)
    taints = list((node.get("spec") or {}).get("taints") or [])
    own = _authored(name, node, taints, entry)
    others = [t for t in taints if t.get("key") == OUT_OF_SERVICE_KEY and t is not own]
    if own is None and entry.phase is Phase.CLAIMED:
        raise CommandRefusedError(
            f"a fence of node {name} is being written (claimed at {instant(entry.claimed_at)} by "
            f"{entry.claimed_by or 'a replica'}; its taint is not on yet): wait for it to finish "
            "or for the reconcile pass to roll it back, then release it"
        )
    if own is None and others:
        shown = ", ".join(f"{t.get('value') or '(no value)'}:{t.get('effect')}" for t in others)
        raise CommandRefusedError(
            f"the out-of-service taint on node {name} is now {shown}, not the "
            f"{OUT_OF_SERVICE_VALUE}:{entry.effect} nodefence applied: someone changed it, so it "
            "is theirs and is left on; the reconcile pass lets go of nodefence's record entry"
        )
    notes = dict(meta.get("annotations") or {})
    mirror = tuple(sorted(k for k in notes if k.startswith(PREFIX) and k != EXCLUDE_LABEL))
    ops: list[Json] = []
    if own is not None or mirror:
        ops = [
            {"op": "test", "path": "/metadata/uid", "value": entry.uid},
            {
                "op": "test",
                "path": "/metadata/resourceVersion",
                "value": meta.get("resourceVersion"),
            },
        ]
    if own is not None:
        ops.append(
            {"op": "replace", "path": "/spec/taints", "value": [t for t in taints if t is not own]}
        )
    ops.extend({"op": "remove", "path": f"/metadata/annotations/{_escape(k)}"} for k in mirror)
    cond = ready_condition(node)
    not_ready = ""
    if own is not None and not is_ready(cond):
        rule = policy.rule_named(entry.rule) or Rule(name="built-in defaults")
        not_ready = _consequences(name, node, entry, rule)
    extra = () if own is not None else ("its out-of-service taint was already removed",)
    return ReleasePlan(entry, tuple(ops), own, mirror, entry.uid, not_ready, extra)


async def _read(
    kube: KubeClient, namespace: str, name: str, deadline: Deadline
) -> tuple[Json | None, FenceRecord]:
    try:
        node: Json | None = (await kube.get_node(name, deadline)).body
    except KubeError as exc:
        if exc.status != 404:
            raise
        node = None
    try:
        configmap = (
            await kube.get_configmap_dated(namespace, fence_record.CONFIGMAP, deadline)
        ).body
    except KubeError as exc:
        if exc.status != 404:
            raise
        configmap = {}
    return node, fence_record.from_configmap(configmap)[0]


async def release(
    kube: KubeClient,
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
    """Release node ``name``'s fence; re-read and re-plan whenever the node changed under the
    patch. Raises ``CommandRefusedError`` (nothing changed) when the fence is not nodefence's
    to release, or the node is still NotReady and ``confirmed`` is not set."""
    if not reason.strip():
        raise CommandRefusedError("--reason must say why the fence is released")
    for _attempt in range(MAX_ATTEMPTS):
        node, record = await _read(kube, namespace, name, deadline)
        plan = plan_release(name, node, record, policy, namespace)
        if plan.not_ready and not confirmed:
            raise ConfirmationNeededError(plan.not_ready)
        if plan.patch:
            try:
                await kube.patch_node_json(name, list(plan.patch), deadline)
            except KubeError as exc:
                # 409/422: the node changed since it was read (a failed test); 404: it is gone.
                if exc.status in (404, 409, 422):
                    continue
                raise
        return await _finish(
            kube,
            policy,
            plan,
            namespace=namespace,
            identity=identity,
            name=name,
            reason=reason,
            by=by,
            deadline=deadline,
        )
    raise CommandRefusedError(
        f"node {name} kept changing while nodefence tried to release it; try again"
    )


async def _finish(
    kube: KubeClient,
    policy: Policy,
    plan: ReleasePlan,
    *,
    namespace: str,
    identity: str,
    name: str,
    reason: str,
    by: str,
    deadline: Deadline,
) -> dict[str, Any]:
    why = f"released by {by}: {reason.strip()}"
    keep = max((r.flap_window_seconds for r in policy.rules), default=0)
    writer = FenceRecordWriter(kube, namespace, identity, keep_releases_seconds=keep)
    dropped = await writer.release(ReleaseAction(name, plan.entry.uid, why), deadline)
    if dropped.outcome is Outcome.FAILED:
        raise CommandRefusedError(
            f"node {name}'s taint and annotations are off, but its fence record entry could not "
            f"be dropped ({dropped.detail}); the next reconcile pass lets go of it"
        )
    removed = []
    if plan.taint is not None:
        removed.append(
            f"out-of-service taint ({plan.taint.get('value')}:{plan.taint.get('effect')})"
        )
    if plan.annotations:
        removed.append(f"{len(plan.annotations)} {PREFIX} annotation(s)")
    removed.append("fence record entry")
    message = f"{why}. nodefence let go of its fence: " + ", ".join(removed) + " removed"
    if plan.not_ready:
        message += " (the node was still NotReady; released with --yes)"
    recorded = False
    if plan.same_node:
        recorded = await EventRecorder(kube, identity).node_event(
            node=name,
            node_uid=plan.node_uid,
            reason=EVENT_REASON,
            message=message,
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
    return "\n".join(lines)
