"""Which pods of a fenced node get force-deleted, and which finalizers may be stripped."""

from __future__ import annotations

from collections import Counter

from nodefence.engine.guard_kinds import PURGE
from nodefence.engine.model import NodeFacts, PodFacts, PurgePodAction, Reason
from nodefence.policy import PurgePolicy

BARE_POD_KIND = "None"
_MAX_LISTED = 5


def _exclusion(pod: PodFacts, node: NodeFacts, policy: PurgePolicy) -> str | None:
    """Why a pod is not purged, or None when it is."""
    if pod.node_name != node.name:
        # S6: the pod list is read by field selector, but an entry for another node must never
        # be deleted on this node's behalf.
        return "not on this node"
    if pod.terminating and not policy.terminating:
        return "Terminating pods are not purged by this rule"
    if not pod.terminating and not policy.non_terminating:
        return "not Terminating"
    kind = pod.owner_kind or BARE_POD_KIND
    if kind not in policy.owner_kinds:
        return f"owner kind {kind} not purged"
    if policy.namespaces and pod.namespace not in policy.namespaces:
        return "namespace not included"
    if pod.namespace in policy.exclude_namespaces:
        return "namespace excluded"
    if policy.only_with_pvc and not pod.has_pvc:
        return "no PersistentVolumeClaim"
    return None


def select_purge(
    node: NodeFacts, pods: tuple[PodFacts, ...], policy: PurgePolicy
) -> tuple[tuple[PurgePodAction, ...], Reason]:
    """The purge actions, ordered by namespace and name so equal facts give equal decisions."""
    allowed = set(policy.strip_finalizers)
    actions: list[PurgePodAction] = []
    skipped: Counter[str] = Counter()
    for pod in sorted(pods, key=lambda p: (p.namespace, p.name, p.uid)):
        why = _exclusion(pod, node, policy)
        if why is not None:
            skipped[why] += 1
            continue
        strip = tuple(f for f in pod.finalizers if f in allowed)
        actions.append(PurgePodAction(pod.namespace, pod.name, pod.uid, node.name, strip))
    names = [f"{a.namespace}/{a.name}" for a in actions]
    listed = ", ".join(names[:_MAX_LISTED])
    if len(names) > _MAX_LISTED:
        listed += f" and {len(names) - _MAX_LISTED} more"
    message = f"{len(actions)} pod(s) to purge" + (f": {listed}" if listed else "")
    if skipped:
        kept = "; ".join(f"{count} {why}" for why, count in sorted(skipped.items()))
        message += f" (left alone: {kept})"
    return tuple(actions), Reason(PURGE, True, message)
