"""NoExecute taint eviction (the taint manager) and the DefaultTolerationSeconds admission.

Together they produce the seed's symptom: every ordinary pod tolerates ``unreachable`` for 300 s
(added at admission), after which the taint manager deletes it gracefully; on a dead node no
kubelet confirms the deletion, so the pod stays ``Terminating``. DaemonSet pods tolerate
``unreachable`` forever and stay ``Running``, until an ``out-of-service`` taint, which they do
not tolerate, evicts them too.

As the real taint manager does, a toleration's ``tolerationSeconds`` run from when the manager
observed the taint, not from the taint's ``timeAdded``, which whoever wrote the taint chose: a
taint written with a ``timeAdded`` an hour old still gives a pod its full toleration. The
manager watches every Node write, so it observes a taint when the server recorded the write
that added it; a write the simulation dates in the past (a node that died "20 minutes ago")
stands for one the node lifecycle controller made then, and the manager saw it then.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from nodefence_sim.controllers.events import NORMAL, EventRecorder
from nodefence_sim.controllers.tolerations import tolerates
from nodefence_sim.errors import ApiError
from nodefence_sim.managed import CONTROLLER_MANAGER, owner_time
from nodefence_sim.resources import NODES, PODS, ResourceType
from nodefence_sim.store import DeleteOptions, Obj, rfc3339
from nodefence_sim.wakeup import Wakeup

if TYPE_CHECKING:
    from nodefence_sim.simulation import Controller, SimSettings, Simulation

NOT_READY_KEY = "node.kubernetes.io/not-ready"
UNREACHABLE_KEY = "node.kubernetes.io/unreachable"
DISRUPTION_TARGET_FROM = (1, 26)
TAINTS_FIELD = ("f:spec", "f:taints")
# 1.29 moved the manager out of the node lifecycle controller, under a name of its own.
OWN_CONTROLLER_FROM = (1, 29)


def min_toleration_seconds(tolerations: Iterable[Mapping[str, Any]]) -> float | None:
    """The shortest ``tolerationSeconds`` among the matching tolerations (none set: forever,
    ``None``; zero or negative: evict at once), as the taint manager computes it."""
    shortest: float | None = None
    for toleration in tolerations:
        seconds = toleration.get("tolerationSeconds")
        if seconds is None:
            continue
        if int(seconds) <= 0:
            return 0.0
        shortest = float(seconds) if shortest is None else min(shortest, float(seconds))
    return shortest


def default_toleration_seconds(settings: SimSettings) -> Callable[[ResourceType, Obj], None]:
    """The admission plugin: a pod without NoExecute tolerations for ``not-ready`` and
    ``unreachable`` gets them, bounded to ``pod_eviction_toleration_seconds``."""

    def admit(rt: ResourceType, obj: Obj) -> None:
        if rt.key != PODS.key:
            return
        spec = obj.setdefault("spec", {})
        tolerations: list[dict[str, Any]] = list(spec.get("tolerations") or [])
        for key in (NOT_READY_KEY, UNREACHABLE_KEY):
            covered = any(
                (t.get("key") or "") in (key, "") and (t.get("effect") or "") in ("NoExecute", "")
                for t in tolerations
            )
            if not covered:
                tolerations.append(
                    {
                        "key": key,
                        "operator": "Exists",
                        "effect": "NoExecute",
                        "tolerationSeconds": settings.pod_eviction_toleration_seconds,
                    }
                )
        spec["tolerations"] = tolerations

    return admit


class TaintEvictionController:
    """Evicts pods from nodes with NoExecute taints they do not tolerate (at once) or tolerate
    only for a while (once ``tolerationSeconds`` have passed since it observed the taint)."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self._first_seen: dict[tuple[str, str, str, str], datetime] = {}
        self._read_at: dict[tuple[str, str, str, str], tuple[str, str]] = {}
        component = (
            "taint-eviction-controller"
            if sim.settings.version[:2] >= OWN_CONTROLLER_FROM
            else "taint-controller"
        )
        self.events = EventRecorder(sim, component)
        self.wakeup = Wakeup(sim.store, waiting=lambda: bool(self._first_seen), kinds=(NODES, PODS))

    def reconcile(self, now: datetime) -> None:
        if not self.wakeup.due(now):
            return
        store = self.sim.store
        taints_by_node: dict[str, tuple[Obj, list[Mapping[str, Any]]]] = {}
        seen: dict[tuple[str, str, str, str], datetime] = {}
        for node in store.items(NODES):
            name = str(node["metadata"]["name"])
            taints = [
                t
                for t in node.get("spec", {}).get("taints") or []
                if t.get("effect") == "NoExecute"
            ]
            if taints:
                taints_by_node[name] = (node, taints)
            for taint in taints:
                key = self._taint_key(node, taint)
                seen[key] = self._observed(node, taint, key, now)
        self._first_seen = seen
        self._read_at = {k: v for k, v in self._read_at.items() if k in seen}
        if not taints_by_node:
            return
        for node_name, (tainted, pod_taints) in taints_by_node.items():
            for pod in store.pods_on(node_name):
                if pod["metadata"].get("deletionTimestamp"):
                    continue
                if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                    continue
                due = self._eviction_time(pod, tainted, pod_taints, now)
                if due is not None and now >= due:
                    self._evict(pod, now)

    def _observed(
        self,
        node: Mapping[str, Any],
        taint: Mapping[str, Any],
        key: tuple[str, str, str, str],
        now: datetime,
    ) -> datetime:
        """When the manager saw the taint: when the server recorded the write of its Node's
        taints, no later than the pass that found it. A taint written again (removed and put
        back, or dated further back for a death moved back: its ``timeAdded`` changed) is
        seen anew at that write. Only a changed Node is looked at again."""
        rv = str(node["metadata"].get("resourceVersion", ""))
        added = str(taint.get("timeAdded") or "")
        known = self._first_seen.get(key)
        read = self._read_at.get(key)
        if known is not None and read is not None and (read[0] == rv or read[1] == added):
            self._read_at[key] = (rv, added)
            return known
        self._read_at[key] = (rv, added)
        recorded = owner_time(node, TAINTS_FIELD) or now
        return min(recorded, now)

    @staticmethod
    def _taint_key(node: Mapping[str, Any], taint: Mapping[str, Any]) -> tuple[str, str, str, str]:
        return (
            str(node["metadata"]["uid"]),
            str(taint.get("key")),
            str(taint.get("value") or ""),
            str(taint.get("effect")),
        )

    def _eviction_time(
        self,
        pod: Mapping[str, Any],
        node: Mapping[str, Any],
        taints: list[Mapping[str, Any]],
        now: datetime,
    ) -> datetime | None:
        tolerations = list(pod.get("spec", {}).get("tolerations") or [])
        due: datetime | None = None
        for taint in taints:
            matching = [t for t in tolerations if tolerates(t, taint)]
            if not matching:
                return now
            seconds = min_toleration_seconds(matching)
            if seconds is None:
                continue
            observed = self._first_seen.get(self._taint_key(node, taint), now)
            moment = observed + timedelta(seconds=seconds)
            due = moment if due is None else min(due, moment)
        return due

    def _evict(self, pod: Obj, now: datetime) -> None:
        store = self.sim.store
        meta = pod["metadata"]
        namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]
        try:
            if self.sim.settings.version[:2] >= DISRUPTION_TARGET_FROM:
                new = copy.deepcopy(pod)
                conditions = new.setdefault("status", {}).setdefault("conditions", [])
                conditions[:] = [c for c in conditions if c.get("type") != "DisruptionTarget"]
                conditions.append(
                    {
                        "type": "DisruptionTarget",
                        "status": "True",
                        "reason": "DeletionByTaintManager",
                        "message": "Taint manager: deleting due to NoExecute taint",
                        "lastTransitionTime": rfc3339(now),
                    }
                )
                store.update(
                    PODS, namespace, name, new, subresource="status", manager=CONTROLLER_MANAGER
                )
            store.delete(PODS, namespace, name, DeleteOptions(uid=uid))
        except ApiError:
            return
        self.events.record(
            {"apiVersion": "v1", "kind": "Pod", "name": name, "namespace": namespace},
            NORMAL,
            "TaintManagerEviction",
            f"Marking for deletion Pod {namespace}/{name}",
            at=now,
        )


def controllers(sim: Simulation) -> list[Controller]:
    return [TaintEvictionController(sim)]
