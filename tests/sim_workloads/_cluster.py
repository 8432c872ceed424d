"""A small simulated cluster for the workload, scheduling, GC and volume controller tests.

Nodes' health is set directly (Ready condition, taints); a minimal kubelet stand-in runs pods
bound to Ready nodes and confirms graceful deletions there, and does nothing on NotReady nodes,
which is all these controllers need to observe.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from nodefence_sim.controllers import garbage_collector, scheduler, volumes, workloads
from nodefence_sim.controllers.scheduler import node_is_ready
from nodefence_sim.controllers.volumes import VOLUME_BLOCKED_ANNOTATION
from nodefence_sim.resources import NODES, PODS
from nodefence_sim.simulation import SimSettings, Simulation
from nodefence_sim.store import DeleteOptions, Obj, rfc3339

NS = "openstack"
MAX_ROUNDS = 60


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class StandInKubelet:
    """Runs pods on Ready nodes (unless volume-blocked) and confirms their deletion there."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim

    def reconcile(self, now: datetime) -> None:
        store = self.sim.store
        for pod in list(store.items(PODS)):
            node = store.peek(NODES, None, pod["spec"].get("nodeName") or "")
            if node is None or not node_is_ready(node):
                continue
            meta = pod["metadata"]
            if meta.get("deletionTimestamp"):
                store.delete(
                    PODS, meta["namespace"], meta["name"], DeleteOptions(grace_period_seconds=0)
                )
                continue
            blocked = (meta.get("annotations") or {}).get(VOLUME_BLOCKED_ANNOTATION) == "true"
            phase = "Pending" if blocked else "Running"
            if pod.get("status", {}).get("phase") == phase:
                continue
            new = copy.deepcopy(pod)
            new.setdefault("status", {})["phase"] = phase
            new["status"]["hostIP"] = "192.168.0.1"
            new["status"]["podIP"] = "10.0.0.1"
            conditions = [c for c in new["status"].get("conditions") or [] if c["type"] != "Ready"]
            conditions.append({"type": "Ready", "status": "False" if blocked else "True"})
            new["status"]["conditions"] = conditions
            store.update(PODS, meta["namespace"], meta["name"], new, subresource="status")


def make_sim(settings: SimSettings | None = None, clock: Clock | None = None) -> Simulation:
    sim = Simulation(settings, clock=clock)
    sim.controllers.extend(workloads.controllers(sim))
    sim.controllers.extend(scheduler.controllers(sim))
    sim.controllers.extend(garbage_collector.controllers(sim))
    sim.controllers.extend(volumes.controllers(sim))
    sim.controllers.append(StandInKubelet(sim))
    return sim


def add_node(
    sim: Simulation,
    name: str,
    *,
    ready: bool = True,
    taints: list[dict[str, str]] | None = None,
    labels: dict[str, str] | None = None,
) -> Obj:
    status = "True" if ready else "Unknown"
    stamp = rfc3339(sim.store.now())
    node: Obj = {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": taints or [], "podCIDR": "10.244.1.0/24", "providerID": f"sim://{name}"},
        "status": {
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "lastTransitionTime": stamp},
                {"type": "Ready", "status": status, "lastTransitionTime": stamp},
            ],
            "addresses": [{"type": "InternalIP", "address": "192.168.20.31"}],
            "nodeInfo": {
                "kernelVersion": "5.15.0",
                "osImage": "Ubuntu 22.04.3 LTS",
                "containerRuntimeVersion": "containerd://1.6.8",
                "kubeletVersion": "v1.24.8",
                "kubeProxyVersion": "v1.24.8",
                "systemUUID": f"uuid-{name}",
            },
        },
    }
    return sim.store.create(NODES, None, node)


def modify_node(sim: Simulation, name: str, change: Callable[[Obj], None]) -> None:
    node = sim.store.get(NODES, None, name)
    change(node)
    sim.store.update(NODES, None, name, node, subresource="all")


def set_ready(sim: Simulation, name: str, ready: bool) -> None:
    """Ready flips, with the lifecycle controller's unreachable taints while it is not Ready."""

    def change(node: Obj) -> None:
        for cond in node["status"]["conditions"]:
            if cond["type"] == "Ready":
                cond["status"] = "True" if ready else "Unknown"
        taints = [
            t
            for t in node["spec"].get("taints") or []
            if t["key"] != "node.kubernetes.io/unreachable"
        ]
        if not ready:
            taints += [
                {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
            ]
        node["spec"]["taints"] = taints

    modify_node(sim, name, change)


OUT_OF_SERVICE = {
    "key": "node.kubernetes.io/out-of-service",
    "value": "nodeshutdown",
    "effect": "NoExecute",
}


def set_out_of_service(sim: Simulation, name: str, present: bool) -> None:
    def change(node: Obj) -> None:
        taints = [t for t in node["spec"].get("taints") or [] if t["key"] != OUT_OF_SERVICE["key"]]
        if present:
            taints.append(dict(OUT_OF_SERVICE))
        node["spec"]["taints"] = taints

    modify_node(sim, name, change)


def run_until(sim: Simulation, predicate: Callable[[], Any], rounds: int = MAX_ROUNDS) -> None:
    """Step the controllers until ``predicate`` holds; fail after ``rounds`` passes."""
    for _ in range(rounds):
        if predicate():
            return
        sim.step()
    assert predicate(), "condition not reached"


def settle(sim: Simulation, rounds: int = MAX_ROUNDS) -> None:
    """Step until a pass writes nothing."""
    for _ in range(rounds):
        before = sim.store.resource_version
        sim.step()
        if sim.store.resource_version == before:
            return
    raise AssertionError("the controllers did not settle")


def pods(sim: Simulation, prefix: str = "") -> list[Obj]:
    return sorted(
        (p for p in sim.store.items(PODS) if p["metadata"]["name"].startswith(prefix)),
        key=lambda p: p["metadata"]["name"],
    )


def force_delete(sim: Simulation, pod: Obj) -> None:
    sim.store.delete(
        PODS,
        pod["metadata"]["namespace"],
        pod["metadata"]["name"],
        DeleteOptions(grace_period_seconds=0, uid=pod["metadata"]["uid"]),
    )


def container_template(labels: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"labels": labels},
        "spec": {"containers": [{"name": "main", "image": "registry.example/app:1"}], **spec},
    }


def statefulset(
    name: str,
    replicas: int,
    *,
    claims: bool = True,
    annotations: dict[str, str] | None = None,
) -> Obj:
    labels = {"app": name}
    spec: dict[str, Any] = {
        "replicas": replicas,
        "serviceName": name,
        "podManagementPolicy": "Parallel",
        "selector": {"matchLabels": labels},
        "template": container_template(labels),
    }
    if claims:
        spec["volumeClaimTemplates"] = [
            {
                "metadata": {"name": "data"},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "5Gi"}},
                },
            }
        ]
    meta: dict[str, Any] = {"name": name, "namespace": NS}
    if annotations:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": spec}


def deployment(name: str, replicas: int, annotations: dict[str, str] | None = None) -> Obj:
    labels = {"app": name}
    meta: dict[str, Any] = {"name": name, "namespace": NS}
    if annotations:
        meta["annotations"] = annotations
    return {
        "metadata": meta,
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": container_template(labels),
        },
    }
