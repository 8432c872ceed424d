"""The pods a fenced node held that should come back elsewhere, as the fence record keeps them.

``nodefence_recovery_seconds`` measures an incident up to the moment every such pod runs on
another node (``engine.recovery``); what "every pod" was is fixed when the fence is claimed, in
the node's fence entry (``held``), since by the time the replacements run the node's own pods
are gone. Only pods a controller brings back are remembered:

- a StatefulSet's pod, by its StatefulSet and ordinal: its replacement has the same name
  (``<statefulset>-<ordinal>``, Kubernetes' own naming), so it is matched by name and owner;
- a Deployment's pod, by its Deployment and how many of them the node held: its replacement has
  a new name, so it is matched by owner (the ReplicaSet whose name is the Deployment's and the
  pod's ``pod-template-hash``) and counted.

DaemonSet pods come back with the node, not elsewhere; Jobs and bare pods are not brought back
by anyone; they are not remembered.

The entry lives in a ConfigMap every fence writes, so what is kept is bounded: at most
``MAX_HELD_PODS`` pods and ``MAX_HELD_BYTES`` bytes of stored JSON (namespaces and
owner names are said by whoever created the workloads). Pods beyond either bound are counted in
``left_out`` and not measured; the Event and ``nodefence status`` say how many. The caps are
applied where the value is made and again as it is read back, so what is compared, stored and
read back agree.

This module is pure: it turns pods into the stored value and back.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from nodefence.engine.caps import stored_size

# Pods remembered per incident: a node rarely runs more controller-managed pods than this that
# matter to anyone waiting; the rest are counted, not measured.
MAX_HELD_PODS = 64
# Bytes of stored JSON (``engine.caps.stored_size``) the remembered pods take at most: with owner
# names once and ordinals as numbers, a few dozen pods of ordinary names; 32 fenced nodes' worth
# keeps the record's worst case under 512 KiB (``tests/engine/test_record_bounds.py``). Whole
# pods are left out, never a name cut: a cut name would match no pod.
MAX_HELD_BYTES = 640
STATEFULSET = "StatefulSet"
DEPLOYMENT = "Deployment"


@dataclass(frozen=True, order=True)
class HeldPod:
    """One pod to come back elsewhere: a StatefulSet's (``owner`` and ``ordinal``) or a
    Deployment's (``owner``; ``ordinal`` is -1: they are counted, not named)."""

    namespace: str
    kind: str
    owner: str
    ordinal: int = -1


@dataclass(frozen=True)
class HeldPods:
    pods: tuple[HeldPod, ...] = ()
    # Pods the node held that did not fit the bounds: not measured.
    left_out: int = 0

    @property
    def count(self) -> int:
        return len(self.pods)

    def kinds(self) -> tuple[str, ...]:
        """The workload kinds remembered, StatefulSet first."""
        return tuple(k for k in (STATEFULSET, DEPLOYMENT) if any(p.kind == k for p in self.pods))

    def deployments(self) -> dict[tuple[str, str], int]:
        """How many pods of each Deployment (namespace, name) the node held."""
        counts: dict[tuple[str, str], int] = {}
        for pod in self.pods:
            if pod.kind == DEPLOYMENT:
                key = (pod.namespace, pod.owner)
                counts[key] = counts.get(key, 0) + 1
        return counts

    def statefulset_pods(self) -> tuple[HeldPod, ...]:
        return tuple(p for p in self.pods if p.kind == STATEFULSET)

    def namespaces(self) -> tuple[str, ...]:
        return tuple(sorted({p.namespace for p in self.pods}))


def held_json(held: HeldPods) -> dict[str, Any]:
    """``{"statefulSets": {ns: {name: [ordinals]}}, "deployments": {ns: {name: count}},
    "leftOut": n}``, each part only when it has something: owner names once, ordinals as
    numbers, so the bound holds many pods."""
    sets: dict[str, dict[str, list[int]]] = {}
    deployments: dict[str, dict[str, int]] = {}
    for pod in sorted(held.pods):
        if pod.kind == STATEFULSET:
            sets.setdefault(pod.namespace, {}).setdefault(pod.owner, []).append(pod.ordinal)
        else:
            by_name = deployments.setdefault(pod.namespace, {})
            by_name[pod.owner] = by_name.get(pod.owner, 0) + 1
    out: dict[str, Any] = {}
    if sets:
        out["statefulSets"] = sets
    if deployments:
        out["deployments"] = deployments
    if held.left_out:
        out["leftOut"] = held.left_out
    return out


def _size(pods: Iterable[HeldPod]) -> int:
    return stored_size(json.dumps(held_json(HeldPods(tuple(pods))), sort_keys=True))


def bounded(pods: Iterable[HeldPod], left_out: int = 0) -> HeldPods:
    """``pods`` (in their order, duplicates once) up to ``MAX_HELD_PODS`` and the stored-size
    cap; the rest are counted in ``left_out``."""
    cap = MAX_HELD_BYTES
    kept: list[HeldPod] = []
    seen: set[HeldPod] = set()
    for pod in pods:
        if pod in seen and pod.kind == STATEFULSET:
            continue
        seen.add(pod)
        if len(kept) < MAX_HELD_PODS and _size([*kept, pod]) <= cap:
            kept.append(pod)
        else:
            left_out += 1
    return HeldPods(tuple(kept), left_out)


def _mapping(raw: Any) -> Mapping[str, Any]:
    return raw if isinstance(raw, dict) else {}


def parse_held(raw: Any) -> HeldPods:
    """The stored value, read leniently and bounded again: it only serves the measurement, so a
    part that cannot be read is no pod to wait for (never an unreadable fence entry, which
    would hold a budget slot nodefence cannot let go of)."""
    fields = _mapping(raw)
    pods: list[HeldPod] = []
    for namespace, owners in _mapping(fields.get("statefulSets")).items():
        for owner, ordinals in _mapping(owners).items():
            if isinstance(ordinals, list):
                pods.extend(
                    HeldPod(str(namespace), STATEFULSET, str(owner), n)
                    for n in ordinals
                    if isinstance(n, int) and not isinstance(n, bool) and n >= 0
                )
    for namespace, owners in _mapping(fields.get("deployments")).items():
        for owner, count in _mapping(owners).items():
            if isinstance(count, int) and not isinstance(count, bool) and count > 0:
                number = min(count, MAX_HELD_PODS + 1)
                pods.extend(HeldPod(str(namespace), DEPLOYMENT, str(owner)) for _ in range(number))
    left = fields.get("leftOut", 0)
    left_out = left if isinstance(left, int) and not isinstance(left, bool) and left > 0 else 0
    return bounded(pods, left_out)
