"""The pod garbage collector, reduced to the two sweeps that matter when nodes die.

Terminating pods on a NotReady node carrying the ``out-of-service`` taint are force-deleted only
when the ``NodeOutOfServiceVolumeDetach`` gate is on (off by default on 1.24/1.25, which is why
the seed cluster needed the gate turned on): without it the taint evicts pods but they stay
``Terminating``. Pods bound to a node that no longer exists are removed after a quarantine, so a
node deleted and re-registered at once keeps its pods.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from nodefence_sim.controllers.node_lifecycle import TAINT_OUT_OF_SERVICE, node_ready_status
from nodefence_sim.resources import NODES, PODS
from nodefence_sim.simulation import NODE_OUT_OF_SERVICE_VOLUME_DETACH
from nodefence_sim.wakeup import Wakeup

if TYPE_CHECKING:
    from nodefence_sim.simulation import Controller, Simulation


def out_of_service(node: Mapping[str, Any]) -> bool:
    return any(
        t.get("key") == TAINT_OUT_OF_SERVICE for t in node.get("spec", {}).get("taints") or []
    )


class PodGC:
    """Force-deletes (grace 0, UID precondition) what no kubelet will ever confirm."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self._orphaned_since: dict[str, datetime] = {}
        self.wakeup = Wakeup(
            sim.store, waiting=lambda: bool(self._orphaned_since), kinds=(NODES, PODS)
        )

    def reconcile(self, now: datetime) -> None:
        if not self.wakeup.due(now):
            return
        store = self.sim.store
        nodes = {str(n["metadata"]["name"]): n for n in store.items(NODES)}
        gate = self.sim.settings.gate_enabled(NODE_OUT_OF_SERVICE_VOLUME_DETACH)
        quarantine = self.sim.settings.orphan_pod_quarantine_seconds
        orphaned: dict[str, datetime] = {}
        for pod in list(store.items(PODS)):
            meta = pod["metadata"]
            node_name = pod.get("spec", {}).get("nodeName")
            if not node_name:
                continue
            node = nodes.get(str(node_name))
            if node is None:
                since = self._orphaned_since.get(meta["uid"], now)
                orphaned[meta["uid"]] = since
                if (now - since).total_seconds() >= quarantine:
                    self._force_delete(pod)
            elif (
                gate
                and meta.get("deletionTimestamp")
                and node_ready_status(node) != "True"
                and out_of_service(node)
            ):
                self._force_delete(pod)
        self._orphaned_since = orphaned

    def _force_delete(self, pod: Mapping[str, Any]) -> None:
        meta = pod["metadata"]
        if meta.get("deletionTimestamp") and int(meta.get("deletionGracePeriodSeconds") or 0) == 0:
            return
        self.sim.store.force_delete_pod(pod)


def controllers(sim: Simulation) -> list[Controller]:
    return [PodGC(sim)]
