"""The node lifecycle controller: notices a silent kubelet and says so on the Node.

Its output is what both the runbook's operator and nodefence read: ``Ready=Unknown`` with the
moment the node went silent, and the ``unreachable`` taints whose ``timeAdded`` starts the
300-second toleration clock of every pod on the node. Everything is derived from the Lease's
renewTime, so a node whose kubelet was taken down "1200 s ago" gets the timestamps it would have
had if the controller had watched it die.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from nodefence.sim.controllers.kubelet import LEASE_NAMESPACE, condition
from nodefence.sim.errors import ApiError
from nodefence.sim.resources import LEASES, NODES, PODS
from nodefence.sim.store import Obj, parse_time, rfc3339

if TYPE_CHECKING:
    from nodefence.sim.simulation import Controller, Simulation

TAINT_UNREACHABLE = "node.kubernetes.io/unreachable"
TAINT_NOT_READY = "node.kubernetes.io/not-ready"
TAINT_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
TAINT_OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"
MANAGED_TAINT_KEYS = (TAINT_UNREACHABLE, TAINT_NOT_READY, TAINT_UNSCHEDULABLE)
MONITORED_CONDITIONS = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")
UNKNOWN_REASON = "NodeStatusUnknown"
UNKNOWN_MESSAGE = "Kubelet stopped posting node status."


def node_ready_status(node: Mapping[str, Any]) -> str:
    """``True``, ``False`` or ``Unknown`` (a node that never posted a Ready condition)."""
    ready = condition(node, "Ready")
    return str(ready.get("status")) if ready else "Unknown"


class NodeLifecycleController:
    """Marks silent nodes Unknown, keeps the readiness taints in line with the Ready condition,
    and marks the pods of an unreachable node not ready (as ``MarkPodsNotReady`` does)."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim

    def reconcile(self, now: datetime) -> None:
        store = self.sim.store
        for node in list(store.items(NODES)):
            new = copy.deepcopy(node)
            self._monitor_health(new, now)
            self._sync_taints(new)
            if new != node:
                try:
                    store.update(
                        NODES,
                        None,
                        node["metadata"]["name"],
                        new,
                        subresource="all",
                        check_rv=False,
                    )
                except ApiError:
                    continue
            if node_ready_status(new) == "Unknown" and condition(new, "Ready") is not None:
                self._mark_pods_not_ready(str(node["metadata"]["name"]), now)

    def _last_heartbeat(self, node: Mapping[str, Any]) -> datetime:
        """The kubelet's latest sign of life: its Lease, else its last status post, else the
        Node's registration."""
        name = node["metadata"]["name"]
        lease = self.sim.store.peek(LEASES, LEASE_NAMESPACE, name)
        renewed = parse_time((lease or {}).get("spec", {}).get("renewTime"))
        if renewed is not None:
            return renewed
        ready = condition(node, "Ready") or {}
        posted = parse_time(ready.get("lastHeartbeatTime"))
        created = parse_time(node["metadata"].get("creationTimestamp"))
        return posted or created or self.sim.store.now()

    def _monitor_health(self, node: Obj, now: datetime) -> None:
        grace = self.sim.settings.node_monitor_grace_seconds
        last = self._last_heartbeat(node)
        if (now - last).total_seconds() <= grace:
            return
        silent_since = rfc3339(last + timedelta(seconds=grace))
        status = node.setdefault("status", {})
        conditions: list[dict[str, Any]] = status.setdefault("conditions", [])
        by_type = {c.get("type"): c for c in conditions}
        for kind in MONITORED_CONDITIONS:
            cond = by_type.get(kind)
            if cond is None:
                conditions.append(
                    {
                        "type": kind,
                        "status": "Unknown",
                        "reason": "NodeStatusNeverUpdated",
                        "message": "Kubelet never posted node status.",
                        "lastHeartbeatTime": node["metadata"].get("creationTimestamp"),
                        "lastTransitionTime": silent_since,
                    }
                )
            elif cond.get("status") != "Unknown":
                cond.update(
                    status="Unknown",
                    reason=UNKNOWN_REASON,
                    message=UNKNOWN_MESSAGE,
                    lastTransitionTime=silent_since,
                )

    @staticmethod
    def _sync_taints(node: Obj) -> None:
        spec = node.setdefault("spec", {})
        ready = condition(node, "Ready")
        since = (ready or {}).get("lastTransitionTime") or node["metadata"].get("creationTimestamp")
        wanted: list[tuple[str, str]] = []
        if ready is not None and ready.get("status") == "Unknown":
            wanted += [(TAINT_UNREACHABLE, "NoSchedule"), (TAINT_UNREACHABLE, "NoExecute")]
        elif ready is not None and ready.get("status") == "False":
            wanted += [(TAINT_NOT_READY, "NoSchedule"), (TAINT_NOT_READY, "NoExecute")]
        if spec.get("unschedulable"):
            wanted.append((TAINT_UNSCHEDULABLE, "NoSchedule"))
        old = list(spec.get("taints") or [])
        kept = [
            t
            for t in old
            if t.get("key") not in MANAGED_TAINT_KEYS or (t.get("key"), t.get("effect")) in wanted
        ]
        present = {(t.get("key"), t.get("effect")) for t in kept}
        added = [
            {"key": key, "effect": effect, "timeAdded": since}
            for key, effect in wanted
            if (key, effect) not in present
        ]
        taints = kept + added
        if taints == old:
            return
        if taints:
            spec["taints"] = taints
        else:
            spec.pop("taints", None)

    def _mark_pods_not_ready(self, node_name: str, now: datetime) -> None:
        store = self.sim.store
        for pod in list(store.items(PODS)):
            if pod.get("spec", {}).get("nodeName") != node_name:
                continue
            ready = condition(pod, "Ready")
            if ready is None or ready.get("status") != "True":
                continue
            new = copy.deepcopy(pod)
            for cond in new["status"]["conditions"]:
                if cond.get("type") == "Ready":
                    cond["status"] = "False"
                    cond["lastTransitionTime"] = rfc3339(now)
            meta = pod["metadata"]
            try:
                store.update(PODS, meta["namespace"], meta["name"], new, subresource="status")
            except ApiError:
                continue


def controllers(sim: Simulation) -> list[Controller]:
    return [NodeLifecycleController(sim)]
