"""The small simulated cluster the node-side tests build: a fake clock, only the node-side
controllers, and helpers to add and read nodes, pods and their Leases."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from nodefence_sim.controllers import kubelet, node_lifecycle, podgc, taint_eviction
from nodefence_sim.controllers.kubelet import LEASE_NAMESPACE
from nodefence_sim.resources import LEASES, NODES, PODS
from nodefence_sim.simulation import SimSettings, Simulation
from nodefence_sim.store import Obj, parse_time


class FakeClock:
    def __init__(self) -> None:
        self.moment = datetime.now(UTC).replace(microsecond=0)

    def __call__(self) -> datetime:
        return self.moment

    def advance(self, seconds: float) -> None:
        self.moment += timedelta(seconds=seconds)


def node_sim(clock: FakeClock, **settings: Any) -> Simulation:
    sim = Simulation(SimSettings(**settings), clock=clock)
    for module in (kubelet, node_lifecycle, taint_eviction, podgc):
        sim.controllers.extend(module.controllers(sim))
    return sim


def add_node(sim: Simulation, name: str, **labels: str) -> Obj:
    return sim.store.create(
        NODES,
        None,
        {
            "metadata": {"name": name, "labels": labels},
            "spec": {"podCIDR": "10.233.77.0/24"},
            "status": {"addresses": [{"type": "InternalIP", "address": "192.168.20.32"}]},
        },
    )


def add_pod(
    sim: Simulation,
    name: str,
    node: str | None,
    *,
    tolerations: list[dict[str, Any]] | None = None,
    daemonset: bool = False,
    init: int = 0,
    host_network: bool = False,
    annotations: dict[str, str] | None = None,
    finalizers: list[str] | None = None,
) -> Obj:
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "docker.io/library/busybox:1.36"}],
    }
    if node:
        spec["nodeName"] = node
    if init:
        spec["initContainers"] = [
            {"name": f"init-{i}", "image": "docker.io/library/busybox:1.36"} for i in range(init)
        ]
    if host_network:
        spec["hostNetwork"] = True
    if daemonset:
        spec["tolerations"] = [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
        ]
    if tolerations is not None:
        spec["tolerations"] = tolerations
    meta: dict[str, Any] = {"name": name, "namespace": "openstack"}
    if annotations:
        meta["annotations"] = annotations
    if finalizers:
        meta["finalizers"] = finalizers
    if daemonset:
        meta["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "name": "openvswitch-db",
                "uid": "5e1f0c2a-0000-4000-8000-000000000001",
                "controller": True,
            }
        ]
    return sim.store.create(PODS, "openstack", {"metadata": meta, "spec": spec})


def pod(sim: Simulation, name: str) -> Obj | None:
    return sim.store.peek(PODS, "openstack", name)


def node(sim: Simulation, name: str) -> Obj:
    found = sim.store.peek(NODES, None, name)
    assert found is not None
    return found


def cond(obj: Obj, kind: str) -> dict[str, Any]:
    for item in obj.get("status", {}).get("conditions") or []:
        if item["type"] == kind:
            return dict(item)
    raise AssertionError(f"no {kind} condition in {obj.get('status')}")


def node_with_pods(clock: FakeClock) -> Simulation:
    """control02 running mariadb-server-1 and a DaemonSet pod, settled."""
    sim = node_sim(clock)
    add_node(sim, "control02")
    add_pod(sim, "mariadb-server-1", "control02")
    add_pod(sim, "ovs-db", "control02", daemonset=True)
    sim.settle()
    return sim


def lease(sim: Simulation) -> Obj:
    found = sim.store.peek(LEASES, LEASE_NAMESPACE, "control02")
    assert found is not None
    return found


def entry(obj: Obj, manager: str, subresource: str = "") -> dict[str, Any]:
    for item in obj["metadata"]["managedFields"]:
        if item["manager"] == manager and item.get("subresource", "") == subresource:
            return dict(item)
    raise AssertionError(f"no {manager}/{subresource} entry in {obj['metadata']}")


def renew_time(sim: Simulation) -> datetime:
    moment = parse_time(lease(sim)["spec"]["renewTime"])
    assert moment is not None
    return moment
