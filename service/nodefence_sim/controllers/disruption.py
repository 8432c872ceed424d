"""PodDisruptionBudgets: the disruption controller's status and the eviction subresource.

``kubectl drain`` evicts instead of deleting so that a budget can refuse: the eviction REST
handler (``pkg/registry/core/pod/storage/eviction.go``) reads the budget's status, answers 429
with the real message when no disruption is allowed, and otherwise takes one disruption from
the budget before it deletes the pod with the eviction's delete options (its grace period). The
controller recomputes the status from the pods, as the real one does after every change.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from nodefence_sim.controllers.kubelet import condition
from nodefence_sim.errors import ApiError, conflict
from nodefence_sim.managed import CONTROLLER_MANAGER
from nodefence_sim.resources import BY_KIND, PDBS, PODS, REPLICASETS, STATEFULSETS
from nodefence_sim.store import DeleteOptions, Obj, rfc3339

if TYPE_CHECKING:
    from nodefence_sim.simulation import Controller, Simulation

VIOLATION = "Cannot evict pod as it would violate the pod's disruption budget."
_SCALED = frozenset({REPLICASETS.key, STATEFULSETS.key})


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A ``metav1.LabelSelector``; as for a budget, an empty or missing one matches nothing."""
    if not selector:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        present = key in labels
        if op == "In" and (not present or labels[key] not in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
    return bool(selector.get("matchLabels") or selector.get("matchExpressions"))


def _resolve(value: Any, total: int, *, round_up: bool) -> int:
    """An IntOrString: a count, or a percentage of ``total``."""
    if isinstance(value, str) and value.endswith("%"):
        share = int(value[:-1]) * total / 100
        return math.ceil(share) if round_up else math.floor(share)
    return int(value)


class DisruptionController:
    """Keeps every budget's status in line with the pods it selects."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim

    def pods_of(self, pdb: Mapping[str, Any]) -> list[Obj]:
        namespace = pdb["metadata"]["namespace"]
        selector = pdb.get("spec", {}).get("selector")
        return [
            p
            for p in self.sim.store.items(PODS, namespace)
            if selector_matches(selector, p["metadata"].get("labels") or {})
        ]

    def _expected(self, pdb: Mapping[str, Any], pods: list[Obj]) -> int:
        """How many pods there should be: the pod count for an integer ``minAvailable``,
        else the scale of the controllers owning them (as ``getExpectedScale``)."""
        spec = pdb.get("spec", {})
        if isinstance(spec.get("minAvailable"), int):
            return len(pods)
        scales: dict[str, int] = {}
        for pod in pods:
            for ref in pod["metadata"].get("ownerReferences") or []:
                rt = BY_KIND.get(str(ref.get("kind")))
                if not ref.get("controller") or rt is None or rt.key not in _SCALED:
                    continue
                owner = self.sim.store.peek(rt, pod["metadata"]["namespace"], ref["name"])
                if owner is not None:
                    scales[str(ref["uid"])] = int(owner.get("spec", {}).get("replicas", 1))
        return sum(scales.values()) if scales else len(pods)

    def status_for(self, pdb: Mapping[str, Any]) -> dict[str, Any]:
        spec = pdb.get("spec", {})
        pods = [p for p in self.pods_of(pdb) if not p["metadata"].get("deletionTimestamp")]
        healthy = sum(1 for p in pods if (condition(p, "Ready") or {}).get("status") == "True")
        expected = self._expected(pdb, pods)
        if "maxUnavailable" in spec:
            desired = max(0, expected - _resolve(spec["maxUnavailable"], expected, round_up=True))
        else:
            desired = _resolve(spec.get("minAvailable", 1), expected, round_up=True)
        old = pdb.get("status") or {}
        disrupted = dict(old.get("disruptedPods") or {})
        allowed = max(0, healthy - desired - len(disrupted))
        sufficient = allowed > 0
        previous = condition(pdb, "DisruptionAllowed") or {}
        value = "True" if sufficient else "False"
        status: dict[str, Any] = {
            "observedGeneration": pdb["metadata"].get("generation", 1),
            "disruptionsAllowed": allowed,
            "currentHealthy": healthy,
            "desiredHealthy": desired,
            "expectedPods": expected,
            "conditions": [
                {
                    "type": "DisruptionAllowed",
                    "status": value,
                    "reason": "SufficientPods" if sufficient else "InsufficientPods",
                    "message": "",
                    "observedGeneration": pdb["metadata"].get("generation", 1),
                    "lastTransitionTime": previous.get("lastTransitionTime")
                    if previous.get("status") == value
                    else rfc3339(self.sim.store.now()),
                }
            ],
        }
        if disrupted:
            status["disruptedPods"] = disrupted
        return status

    def reconcile(self, now: datetime) -> None:
        store = self.sim.store
        for pdb in list(store.items(PDBS)):
            meta = pdb["metadata"]
            disrupted = (pdb.get("status") or {}).get("disruptedPods") or {}
            live = {p["metadata"]["name"] for p in self.pods_of(pdb)}
            new = copy.deepcopy(pdb)
            new.setdefault("status", {})["disruptedPods"] = {
                name: moment for name, moment in disrupted.items() if name in live
            }
            if not new["status"]["disruptedPods"]:
                new["status"].pop("disruptedPods")
            new["status"] = self.status_for(new)
            if new["status"] != pdb.get("status"):
                try:
                    store.update(
                        PDBS,
                        meta["namespace"],
                        meta["name"],
                        new,
                        subresource="status",
                        manager=CONTROLLER_MANAGER,
                    )
                except ApiError:
                    continue


def _too_many_requests(cause: str) -> ApiError:
    error = ApiError(429, "TooManyRequests", VIOLATION)
    error.causes = [{"reason": "DisruptionBudget", "message": cause}]
    return error


def evict(sim: Simulation, namespace: str, name: str, options: DeleteOptions) -> None:
    """The eviction subresource: delete ``name`` unless a budget forbids it (429)."""
    store = sim.store
    pod = store.get(PODS, namespace, name)
    meta = pod["metadata"]
    if options.uid and options.uid != meta["uid"]:
        raise conflict(
            PODS.plural,
            name,
            f"Precondition failed: UID in precondition: {options.uid}, UID in object meta: "
            f"{meta['uid']}",
        )
    phase = pod.get("status", {}).get("phase")
    if meta.get("deletionTimestamp") or phase in ("Succeeded", "Failed", "Pending"):
        store.delete(PODS, namespace, name, options)
        return
    labels = meta.get("labels") or {}
    budgets = [
        b
        for b in store.items(PDBS, namespace)
        if selector_matches(b.get("spec", {}).get("selector"), labels)
    ]
    if len(budgets) > 1:
        raise ApiError(
            500,
            "InternalError",
            "This pod has more than one PodDisruptionBudget, which the eviction subresource "
            "does not support.",
        )
    if budgets:
        pdb = copy.deepcopy(budgets[0])
        status = pdb.get("status") or {}
        if int(status.get("observedGeneration", 0)) < int(pdb["metadata"].get("generation", 1)):
            raise _too_many_requests(
                f"The disruption budget {pdb['metadata']['name']} is still being processed "
                "by the server."
            )
        allowed = int(status.get("disruptionsAllowed", 0))
        if allowed < 0:
            raise ApiError(403, "Forbidden", "pdb disruptions allowed is negative")
        ready = (condition(pod, "Ready") or {}).get("status") == "True"
        if ready or int(status.get("currentHealthy", 0)) < int(status.get("desiredHealthy", 0)):
            if allowed == 0:
                raise _too_many_requests(
                    f"The disruption budget {pdb['metadata']['name']} needs "
                    f"{status.get('desiredHealthy', 0)} healthy pods and has "
                    f"{status.get('currentHealthy', 0)} currently"
                )
            status["disruptionsAllowed"] = allowed - 1
            disrupted = status.setdefault("disruptedPods", {})
            disrupted[name] = rfc3339(store.now())
            pdb["status"] = status
            if not options.dry_run:
                store.update(
                    PDBS,
                    namespace,
                    pdb["metadata"]["name"],
                    pdb,
                    subresource="status",
                    manager=CONTROLLER_MANAGER,
                )
    store.delete(PODS, namespace, name, options)


def controllers(sim: Simulation) -> list[Controller]:
    return [DisruptionController(sim)]
