"""``nodefence release``: an operator letting go of a fence nodefence applied, decided like any
other change, on one read of the node and the fence record.

What is released is exactly nodefence's: its taint (S4: the one the API server's record of the
write shows nodefence wrote, ``engine.authorship``), its ``nodefence.io/`` mirror annotations
and its record entry. Each guard below is one reason a release is refused, in the words the
command prints; a decision that releases carries one ``ReleaseFenceAction`` that the shell
commits with the node's uid and resourceVersion as read (S7: a node that changed under it is
read and decided again).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime

from nodefence.engine import mirror, readiness
from nodefence.engine import record as fence_record
from nodefence.engine.authorship import taint_authorship
from nodefence.engine.guard_kinds import RELEASE_CONFIRMED as CONFIRMED
from nodefence.engine.guard_kinds import RELEASE_HELD as HELD
from nodefence.engine.guard_kinds import RELEASE_NOT_BEING_WRITTEN as NOT_BEING_WRITTEN
from nodefence.engine.guard_kinds import RELEASE_OWN_TAINT as OWN_TAINT
from nodefence.engine.guard_kinds import RELEASE_TAINT_UNCHANGED as TAINT_UNCHANGED
from nodefence.engine.guard_kinds import VERDICT
from nodefence.engine.model import (
    EXCLUDE_LABEL,
    OUT_OF_SERVICE_KEY,
    OUT_OF_SERVICE_VALUE,
    PREFIX,
    Decision,
    Facts,
    NodeFacts,
    Reason,
    ReleaseFenceAction,
    Taint,
    Verdict,
)
from nodefence.engine.record import FenceEntry, FenceRecord, Phase
from nodefence.engine.wording import duration, instant
from nodefence.policy import Policy, Rule


@dataclass(frozen=True)
class ReleaseRequest:
    """What the operator asked: which node, why (already worded with who), whether they
    confirmed releasing a node that is still NotReady, and the namespace of the record (for
    the words of a refusal)."""

    node: str
    why: str
    confirmed: bool
    namespace: str


def _pass(guard: str, message: str) -> Reason:
    return Reason(guard, True, message)


def _block(guard: str, message: str) -> Reason:
    return Reason(guard, False, message)


def _shown(taints: list[Taint]) -> str:
    return ", ".join(f"{t.value or '(no value)'}:{t.effect}" for t in taints)


def _out_of_service(node: NodeFacts | None) -> list[Taint]:
    return [t for t in (node.taints if node is not None else ()) if t.key == OUT_OF_SERVICE_KEY]


def held(name: str, node: NodeFacts | None, record: FenceRecord, namespace: str) -> Reason:
    """S4, S12: only a fence the record holds is nodefence's to release; the node's mirror
    annotations (which its own credentials can write) prove nothing."""
    if record.entry(name) is not None:
        return _pass(HELD, f"nodefence's fence record holds a fence of node {name}")
    where = f"ConfigMap {namespace}/{fence_record.CONFIGMAP}"
    key = fence_record.FENCE_PREFIX + name
    if key in record.unreadable:
        return _block(
            HELD,
            f"the fence record's entry for node {name} ({where}, key {key}) cannot be read; "
            "nothing is released on an entry nobody can read",
        )
    taints = _out_of_service(node)
    notes = node.annotations if node is not None else {}
    if taints and notes.get(mirror.FENCED_BY) == mirror.FENCED_BY_VALUE:
        # The reconcile pass adopts the taint back only where the API server's record of the
        # write shows nodefence wrote it.
        return _block(
            HELD,
            f"node {name} carries an out-of-service taint and nodefence's annotations, but "
            f"nodefence's fence record ({where}) has no entry for it, so nothing proves the taint "
            "is nodefence's. The reconcile pass takes it back into the record where the API "
            "server shows nodefence wrote it; release it after that, or, if you are sure, "
            f"remove it by hand: kubectl taint nodes {name} {OUT_OF_SERVICE_KEY}-",
        )
    if taints:
        return _block(
            HELD,
            f"the out-of-service taint on node {name} ({_shown(taints)}) was not applied by "
            f"nodefence: it is not in nodefence's fence record ({where}), and nodefence never "
            f"removes a taint it did not apply. Whoever applied it removes it: kubectl taint "
            f"nodes {name} {OUT_OF_SERVICE_KEY}-",
        )
    if node is None:
        return _block(
            HELD, f"node {name} does not exist, and nodefence's fence record has no entry for it"
        )
    return _block(
        HELD,
        f"nodefence holds no fence of node {name} ({where} has no entry for it); nothing to "
        "release",
    )


def lookalike(node: NodeFacts, entry: FenceEntry) -> Taint | None:
    """The first taint with the key, value and effect nodefence writes for ``entry``."""
    return next(
        (
            t
            for t in node.taints
            if t.key == OUT_OF_SERVICE_KEY
            and t.value == OUT_OF_SERVICE_VALUE
            and t.effect == entry.effect
        ),
        None,
    )


def own_taint(node: NodeFacts, entry: FenceEntry) -> Reason:
    """S4: a taint that looks like nodefence's but that the API server's record of the write
    says someone else wrote is theirs, whatever it looks like."""
    taint = lookalike(node, entry)
    if taint is None:
        return _pass(OWN_TAINT, f"node {node.name} carries no taint that looks like nodefence's")
    judged = taint_authorship(dataclasses.replace(node, taints=(taint,)), entry)
    if not judged.ours:
        return _block(
            OWN_TAINT,
            f"the out-of-service taint on node {node.name} looks like the one nodefence applied "
            f"but is not ({judged.why}); it is theirs and is left on, and the reconcile pass lets "
            "go of nodefence's record entry",
        )
    return _pass(OWN_TAINT, f"the out-of-service taint is nodefence's ({judged.why})")


def not_being_written(node: NodeFacts, entry: FenceEntry, own: bool) -> Reason:
    """S7: a claim whose taint is not on yet belongs to the request writing it."""
    if not own and entry.phase is Phase.CLAIMED:
        return _block(
            NOT_BEING_WRITTEN,
            f"a fence of node {node.name} is being written (claimed at "
            f"{instant(entry.claimed_at)} by {entry.claimed_by or 'a replica'}; its taint is not "
            "on yet): wait for it to finish or for the reconcile pass to roll it back, then "
            "release it",
        )
    return _pass(NOT_BEING_WRITTEN, f"no fence of node {node.name} is being written")


def taint_unchanged(node: NodeFacts, entry: FenceEntry, own: bool) -> Reason:
    """S4: an out-of-service taint someone changed (value or effect) is theirs now."""
    others = _out_of_service(node)
    if not own and others:
        return _block(
            TAINT_UNCHANGED,
            f"the out-of-service taint on node {node.name} is now {_shown(others)}, not the "
            f"{OUT_OF_SERVICE_VALUE}:{entry.effect} nodefence applied: someone changed it, so it "
            "is theirs and is left on; the reconcile pass lets go of nodefence's record entry",
        )
    return _pass(TAINT_UNCHANGED, f"no out-of-service taint on node {node.name} was changed")


def consequences(node: NodeFacts, rule: Rule) -> str:
    """What taking the taint off a node still NotReady means, for the person deciding it."""
    cond = node.ready
    state = f"Ready is {cond.status}" if cond is not None else "it reports no Ready condition"
    if cond is not None and cond.last_transition is not None:
        state += f" since {instant(cond.last_transition)}"
    window = duration(rule.flap_window_seconds)
    name = node.name
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


def confirmed(not_ready: str, name: str, asked: bool) -> Reason:
    """A node still NotReady loses its taint only when the operator said so, after reading
    what that means."""
    if not not_ready:
        return _pass(CONFIRMED, f"node {name} is Ready")
    if not asked:
        return _block(CONFIRMED, not_ready)
    return _pass(CONFIRMED, f"node {name} is still NotReady; released as the operator confirmed")


def _words(action: ReleaseFenceAction) -> str:
    """The Event's message: who and why, then everything the release took away."""
    removed = []
    if action.effect:
        removed.append(f"out-of-service taint ({OUT_OF_SERVICE_VALUE}:{action.effect})")
    if action.remove_annotations:
        removed.append(f"{len(action.remove_annotations)} {PREFIX} annotation(s)")
    removed.append("fence record entry")
    message = f"{action.why}. nodefence let go of its fence: " + ", ".join(removed) + " removed"
    if action.not_ready:
        message += " (the node was still NotReady; released with --yes)"
    return message


def decide_release(
    facts: Facts, request: ReleaseRequest, policy: Policy, now: datetime
) -> Decision:
    """Release the fence of ``request.node``, or say why nothing is released (no action)."""
    name = request.node
    reasons: list[Reason] = []

    def finish(verdict: Verdict, action: ReleaseFenceAction | None = None) -> Decision:
        if action is not None:
            reasons.append(_pass(VERDICT, _words(action)))
        return Decision(
            verdict=verdict,
            node=name,
            reasons=tuple(reasons),
            actions=(action,) if action is not None else (),
            status="release",
            rule=entry.rule if entry is not None else None,
            now=now,
        )

    entry = facts.record.entry(name)
    node = facts.node
    reasons.append(held(name, node, facts.record, request.namespace))
    if entry is None:
        return finish(Verdict.SKIP)
    if node is None or node.uid != entry.uid:
        return finish(Verdict.UNFENCE, _entry_only(name, entry, node, request.why))
    judged = own_taint(node, entry)
    reasons.append(judged)
    if not judged.passed:
        return finish(Verdict.SKIP)
    own = lookalike(node, entry) is not None
    for reason in (not_being_written(node, entry, own), taint_unchanged(node, entry, own)):
        reasons.append(reason)
        if not reason.passed:
            return finish(Verdict.SKIP)
    rule = policy.rule_named(entry.rule) or Rule(name="built-in defaults")
    not_ready = consequences(node, rule) if own and not readiness.node_is_ready(node) else ""
    asked = confirmed(not_ready, name, request.confirmed)
    reasons.append(asked)
    if not asked.passed:
        return finish(Verdict.SKIP)
    return finish(Verdict.UNFENCE, _whole(node, entry, request.why, own=own, not_ready=not_ready))


def _entry_only(
    name: str, entry: FenceEntry, node: NodeFacts | None, why: str
) -> ReleaseFenceAction:
    """S9: the fence was of a node object that is gone; a new one of the same name is not
    touched, only the record entry is dropped."""
    note = (
        f"node {name} no longer exists"
        if node is None
        else f"node {name} was re-created (UID {node.uid}; the fence was of UID "
        f"{entry.uid}) and is left as it is"
    )
    only = (note + "; only the record entry is dropped",)
    return ReleaseFenceAction(name, entry.uid, why=why, same_node=False, notes=only)


def _whole(
    node: NodeFacts, entry: FenceEntry, why: str, *, own: bool, not_ready: str
) -> ReleaseFenceAction:
    """nodefence's taint (``own``: still on), its annotations and the record entry."""
    notes = tuple(
        sorted(k for k in node.annotations if k.startswith(PREFIX) and k != EXCLUDE_LABEL)
    )
    return ReleaseFenceAction(
        node.name,
        entry.uid,
        resource_version=node.resource_version,
        effect=entry.effect if own else "",
        remove_annotations=notes,
        why=why,
        not_ready=not_ready,
        notes=() if own else ("its out-of-service taint was already removed",),
    )
