"""The node lifecycle controller: notices a silent kubelet and says so on the Node.

Its output is what both the runbook's operator and nodefence read: ``Ready=Unknown`` with the
moment the node went silent, and the ``unreachable`` taints, dated when the controller added
them, whose appearance starts the 300-second toleration clock of every pod on the node. The
controller also records the ``NodeNotReady`` Events the real one does, on the Node and on each of
its pods, once per transition. Everything is derived from when the API
server last recorded a renewal of the Lease (its managedFields time), never from the renewTime the
kubelet stamped: the real controller times renewals on its own clock too, so a kubelet whose clock
is off stays Ready. A node whose kubelet was taken down "1200 s ago" gets the timestamps it would
have had if the controller had watched it die, and its writes are dated when it would have made
them.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from nodefence_sim.controllers.events import NORMAL, WARNING, EventRecorder
from nodefence_sim.controllers.kubelet import LEASE_NAMESPACE, condition
from nodefence_sim.errors import ApiError
from nodefence_sim.managed import CONTROLLER_MANAGER, owner_time
from nodefence_sim.resources import LEASES, NODES, PODS
from nodefence_sim.store import Obj, WatchEvent, clone, parse_time, rfc3339
from nodefence_sim.wakeup import Agenda

if TYPE_CHECKING:
    from nodefence_sim.simulation import Controller, Simulation

TAINT_UNREACHABLE = "node.kubernetes.io/unreachable"
TAINT_NOT_READY = "node.kubernetes.io/not-ready"
TAINT_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
TAINT_OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"
MANAGED_TAINT_KEYS = (TAINT_UNREACHABLE, TAINT_NOT_READY, TAINT_UNSCHEDULABLE)
MONITORED_CONDITIONS = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")
UNKNOWN_REASON = "NodeStatusUnknown"
UNKNOWN_MESSAGE = "Kubelet stopped posting node status."
RENEW_TIME_FIELD = ("f:spec", "f:renewTime")
READY_STATUS_FIELD = ("f:status", "f:conditions", 'k:{"type":"Ready"}', "f:status")
COMPONENT = "node-controller"
READINESS_TAINT_KEYS = (TAINT_UNREACHABLE, TAINT_NOT_READY)


def node_ready_status(node: Mapping[str, Any]) -> str:
    """``True``, ``False`` or ``Unknown`` (a node that never posted a Ready condition)."""
    ready = condition(node, "Ready")
    return str(ready.get("status")) if ready else "Unknown"


class NodeLifecycleController:
    """Marks silent nodes Unknown, keeps the readiness taints in line with the Ready condition,
    and marks the pods of a node that is not Ready not ready (as ``MarkPodsNotReady`` does)."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.events = EventRecorder(sim, COMPONENT)
        # A Ready node needs nothing until its Node or Lease changes or its grace runs out,
        # so an idle cluster costs the nodes whose Lease was just renewed, and a visit copies
        # a Node only when it is silent.
        self._agenda = Agenda()
        self._started = False
        # Silent nodes this controller has brought in line, by what they were then (``_inputs``).
        self._settled: dict[str, tuple[object, ...]] = {}
        sim.store.add_listener(self._heard)

    def _heard(self, event: WatchEvent) -> None:
        key, meta = event.resource.key, event.object["metadata"]
        if key == NODES.key or (key == LEASES.key and meta.get("namespace") == LEASE_NAMESPACE):
            self._agenda.mark(str(meta["name"]))

    def reconcile(self, now: datetime) -> None:
        store = self.sim.store
        if self._started:
            names = self._agenda.due(now)
        else:
            self._started = True
            names = sorted(str(n["metadata"]["name"]) for n in store.items(NODES))
        grace = timedelta(seconds=self.sim.settings.node_monitor_grace_seconds)
        for name in names:
            node = store.peek(NODES, None, name)
            if node is None:
                self._agenda.forget(name)
                self._settled.pop(name, None)
                continue
            settled = self._settled.pop(name, None)
            if settled is not None and settled == self._inputs(name, node):
                # A silent node, its Lease and its pods as the last pass left them: that pass
                # changed nothing more to do, and only time has moved since, which changes
                # nothing on a node already marked silent. Skipped, so that a thousand dead
                # nodes do not cost a thousand visits every tick.
                self._settled[name] = settled
                self._agenda.visited(name, now)
                continue
            last = self._last_heartbeat(node)
            silent = now - last > grace
            # Only a silent node's conditions and the spec's taints change here, so only they
            # are copied: a whole Node (~13 KB) copied per NotReady node per pass held the
            # simulator at a full core with a thousand of them (the store copies what it keeps).
            new = {**node, "spec": dict(node.get("spec") or {})}
            if silent:
                status = node.get("status") or {}
                conditions = [dict(c) for c in status.get("conditions") or []]
                new["status"] = {**status, "conditions": conditions}
            noticed = self._monitor_health(new, last) if silent else None
            tainted = self._sync_taints(new, noticed or now)
            if new != node:
                try:
                    store.update(
                        NODES,
                        None,
                        name,
                        new,
                        subresource="all",
                        check_rv=False,
                        manager=CONTROLLER_MANAGER,
                        written_at=noticed or tainted,
                    )
                except ApiError:
                    self._agenda.visited(name, now)
                    continue
            since = _not_ready_since(new)
            if since is not None:
                marked = self._mark_pods_not_ready(name, since)
                # A node that is not Ready is looked at on every pass (its pods, its taints).
                self._agenda.visited(name, now)
                current = store.peek(NODES, None, name)
                if silent and marked and current is not None:
                    self._settled[name] = self._inputs(name, current)
            else:
                self._agenda.visited(name, last + grace)

    def _inputs(self, name: str, node: Mapping[str, Any]) -> tuple[object, ...]:
        """Everything a visit of a silent node reads: the Node, its Lease and its pods, each
        by resourceVersion."""
        lease = self.sim.store.peek(LEASES, LEASE_NAMESPACE, name)
        pods = tuple(
            (p["metadata"]["namespace"], p["metadata"]["name"], p["metadata"]["resourceVersion"])
            for p in self.sim.store.pods_on(name)
        )
        version = node["metadata"]["resourceVersion"]
        return (version, None if lease is None else lease["metadata"]["resourceVersion"], pods)

    def _last_heartbeat(self, node: Mapping[str, Any]) -> datetime:
        """The kubelet's latest sign of life on the server's clock: when the server recorded
        the Lease's last renewal, else the renewTime itself (a Lease stripped of its
        managedFields), else its last status post, else the Node's registration."""
        name = node["metadata"]["name"]
        lease = self.sim.store.peek(LEASES, LEASE_NAMESPACE, name)
        if lease is not None:
            recorded = owner_time(lease, RENEW_TIME_FIELD)
            renewed = recorded or parse_time(lease.get("spec", {}).get("renewTime"))
            if renewed is not None:
                return renewed
        ready = condition(node, "Ready") or {}
        posted = parse_time(ready.get("lastHeartbeatTime"))
        created = parse_time(node["metadata"].get("creationTimestamp"))
        return posted or created or self.sim.store.now()

    def _monitor_health(self, node: Obj, last: datetime) -> datetime | None:
        """Mark a silent node's conditions Unknown from the moment the grace period after its
        last heartbeat ``last`` ran out; returns that moment when this pass changed them (the
        controller would have written then), else ``None``. A death moved further back moves
        the transition with it."""
        grace = self.sim.settings.node_monitor_grace_seconds
        noticed = last + timedelta(seconds=grace)
        silent_since = rfc3339(noticed)
        changed = False
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
                changed = True
            elif cond.get("status") != "Unknown":
                cond.update(
                    status="Unknown",
                    reason=UNKNOWN_REASON,
                    message=UNKNOWN_MESSAGE,
                    lastTransitionTime=silent_since,
                )
                changed = True
            elif (parse_time(cond.get("lastTransitionTime")) or noticed) > noticed:
                cond["lastTransitionTime"] = silent_since
                changed = True
        return noticed if changed else None

    def _sync_taints(self, node: Obj, now: datetime) -> datetime | None:
        """The readiness taints the Ready condition calls for, dated ``now``, when this pass's
        write is dated. An unreachable taint is added when the controller marks the node
        Unknown, or when it finds one missing (and moves back with a death moved back); a
        not-ready
        taint when the server recorded the kubelet's NotReady post (the controller sees it
        within its monitor period; the transition the kubelet stamped is on the kubelet's
        clock, which may be off), moving back with a post backdated further; the
        unschedulable taint when this pass sees the need. Returns when the controller would
        have written a not-ready taint it adds now, ``None`` for any other change."""
        spec = node.setdefault("spec", {})
        ready = condition(node, "Ready")
        unknown = ready is not None and ready.get("status") == "Unknown"
        not_ready = ready is not None and ready.get("status") == "False"
        since = rfc3339(now) if unknown else None
        if not_ready:
            posted = owner_time(node, READY_STATUS_FIELD)
            since = rfc3339(min(posted, now)) if posted is not None else None
        since = since or rfc3339(now)
        moves_back = TAINT_UNREACHABLE if unknown else TAINT_NOT_READY if not_ready else None
        wanted: list[tuple[str, str]] = []
        if ready is not None and ready.get("status") == "Unknown":
            wanted += [(TAINT_UNREACHABLE, "NoSchedule"), (TAINT_UNREACHABLE, "NoExecute")]
        elif ready is not None and ready.get("status") == "False":
            wanted += [(TAINT_NOT_READY, "NoSchedule"), (TAINT_NOT_READY, "NoExecute")]
        if spec.get("unschedulable"):
            wanted.append((TAINT_UNSCHEDULABLE, "NoSchedule"))
        old = list(spec.get("taints") or [])
        kept = [
            _moved_back(t, since) if t.get("key") == moves_back else t
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
            return None
        if taints:
            spec["taints"] = taints
        else:
            spec.pop("taints", None)
        if any(t["key"] in READINESS_TAINT_KEYS for t in added) and not any(
            t.get("key") in READINESS_TAINT_KEYS for t in old
        ):
            meta = node["metadata"]
            self.events.record(
                {"apiVersion": "v1", "kind": "Node", "name": meta["name"], "uid": meta["uid"]},
                NORMAL,
                "NodeNotReady",
                f"Node {meta['name']} status is now: NodeNotReady",
                at=parse_time(since),
            )
        if not_ready and any(t["key"] == TAINT_NOT_READY for t in added):
            return parse_time(since)
        return None

    def _mark_pods_not_ready(self, node_name: str, since: datetime) -> bool:
        """Ready=False on the node's pods from the moment the node went Unknown, as the
        controller marks them when it marks the node (a pod already NotReady keeps its
        earlier transition; one marked after a death that has since moved back moves too).
        False when a pod could not be written (the next pass tries again)."""
        store = self.sim.store
        done = True
        stamp = rfc3339(since)
        for pod in store.pods_on(node_name):
            ready = condition(pod, "Ready")
            if ready is None:
                continue
            marked = parse_time(ready.get("lastTransitionTime"))
            if ready.get("status") != "True" and (marked is None or marked <= since):
                continue
            new = clone(pod)
            for cond in new["status"]["conditions"]:
                if cond.get("type") == "Ready":
                    cond["status"] = "False"
                    cond["lastTransitionTime"] = stamp
            meta = pod["metadata"]
            try:
                store.update(
                    PODS,
                    meta["namespace"],
                    meta["name"],
                    new,
                    subresource="status",
                    manager=CONTROLLER_MANAGER,
                    written_at=since,
                )
            except ApiError:
                done = False
                continue
            self.events.record(pod, WARNING, "NodeNotReady", "Node is not ready", at=since)
        return done


def _not_ready_since(node: Mapping[str, Any]) -> datetime | None:
    """When the controller saw the node stop being Ready (``None``: it is Ready): the Unknown
    transition it stamped itself, or the not-ready taint it added for a kubelet's NotReady."""
    ready = condition(node, "Ready")
    if ready is None or ready.get("status") == "True":
        return None
    if ready.get("status") == "Unknown":
        return parse_time(ready.get("lastTransitionTime"))
    for taint in node.get("spec", {}).get("taints") or []:
        if taint.get("key") == TAINT_NOT_READY and taint.get("effect") == "NoExecute":
            return parse_time(taint.get("timeAdded"))
    return None


def _moved_back(taint: Mapping[str, Any], since: str) -> dict[str, Any]:
    """``taint`` added no later than ``since``."""
    added = parse_time(taint.get("timeAdded"))
    moment = parse_time(since)
    if added is not None and moment is not None and added > moment:
        return {**taint, "timeAdded": since}
    return dict(taint)


def controllers(sim: Simulation) -> list[Controller]:
    return [NodeLifecycleController(sim)]
