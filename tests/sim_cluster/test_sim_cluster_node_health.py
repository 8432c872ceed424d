"""Node lifecycle, NoExecute taint eviction and PodGC: the seed runbook's symptoms and cure."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodefence_sim.controllers.kubelet import LEASE_NAMESPACE
from nodefence_sim.resources import LEASES, NODES, PODS
from nodefence_sim.simulation import Simulation
from nodefence_sim.store import parse_time, rfc3339

from .support import FakeClock, add_node, add_pod, cond, node, node_sim, pod

OUT_OF_SERVICE = {
    "key": "node.kubernetes.io/out-of-service",
    "value": "nodeshutdown",
    "effect": "NoExecute",
}


def taint(sim: Simulation, name: str, new: dict[str, str]) -> None:
    current = sim.store.get(NODES, None, name)
    current["spec"]["taints"] = [*current["spec"].get("taints", []), new]
    sim.store.update(NODES, None, name, current)
    sim.settle()


def terminating(sim: Simulation, name: str) -> bool:
    found = pod(sim, name)
    assert found is not None, f"{name} is gone"
    return bool(found["metadata"].get("deletionTimestamp"))


def dead_node_with_pods(clock: FakeClock, since: float, **settings: object) -> Simulation:
    sim = node_sim(clock, **settings)
    add_node(sim, "control02")
    add_node(sim, "control03")
    add_pod(sim, "mariadb-server-1", "control02", init=2)
    add_pod(sim, "keystone-api-1", "control02")
    add_pod(sim, "openvswitch-db-1", "control02", daemonset=True, host_network=True)
    add_pod(sim, "keystone-api-3", "control03")
    sim.settle()
    sim.node_down("control02", since_seconds=since)
    return sim


def test_node_down_backdates_conditions_and_taints(clock: FakeClock) -> None:
    sim = dead_node_with_pods(clock, 1200)
    dead = node(sim, "control02")
    silent_since = rfc3339(clock() - timedelta(seconds=1160))
    for kind in ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure"):
        condition = cond(dead, kind)
        assert condition["status"] == "Unknown"
        assert condition["reason"] == "NodeStatusUnknown"
        assert condition["message"] == "Kubelet stopped posting node status."
        assert condition["lastTransitionTime"] == silent_since
    assert sorted((t["key"], t["effect"], t["timeAdded"]) for t in dead["spec"]["taints"]) == [
        ("node.kubernetes.io/unreachable", "NoExecute", silent_since),
        ("node.kubernetes.io/unreachable", "NoSchedule", silent_since),
    ]
    lease = sim.store.peek(LEASES, LEASE_NAMESPACE, "control02")
    assert lease is not None
    assert parse_time(lease["spec"]["renewTime"]) == clock() - timedelta(seconds=1200)
    # The other node is untouched; the dead node's pods are marked not ready.
    assert cond(node(sim, "control03"), "Ready")["status"] == "True"
    assert "taints" not in node(sim, "control03")["spec"]
    ds_pod = pod(sim, "openvswitch-db-1")
    assert ds_pod is not None
    assert cond(ds_pod, "Ready")["status"] == "False"


def test_silent_node_turns_unknown_only_after_the_grace_period(clock: FakeClock) -> None:
    sim = dead_node_with_pods(clock, 0)
    assert cond(node(sim, "control02"), "Ready")["status"] == "True"
    clock.advance(39)
    sim.settle()
    assert cond(node(sim, "control02"), "Ready")["status"] == "True"
    assert sim.node_state("control02")["kubelet"] == "down"
    clock.advance(2)
    sim.settle()
    ready = cond(node(sim, "control02"), "Ready")
    assert ready["status"] == "Unknown"
    assert ready["lastTransitionTime"] == rfc3339(clock() - timedelta(seconds=1))


def test_pods_are_evicted_after_toleration_and_stay_terminating(clock: FakeClock) -> None:
    sim = dead_node_with_pods(clock, 200)
    # Unreachable since 160 s: the 300 s toleration has not run out yet.
    assert not terminating(sim, "mariadb-server-1")
    clock.advance(130)
    sim.settle()
    assert not terminating(sim, "keystone-api-1")
    clock.advance(20)
    sim.settle()
    assert terminating(sim, "mariadb-server-1")
    assert terminating(sim, "keystone-api-1")
    # No kubelet confirms: they stay Terminating, however long we wait.
    clock.advance(3600)
    sim.settle()
    assert terminating(sim, "mariadb-server-1")
    # DaemonSet pods tolerate unreachable forever; pods elsewhere are untouched.
    assert not terminating(sim, "openvswitch-db-1")
    assert not terminating(sim, "keystone-api-3")


def test_long_dead_node_evicts_at_once(clock: FakeClock) -> None:
    sim = dead_node_with_pods(clock, 1200)
    assert terminating(sim, "mariadb-server-1")
    assert terminating(sim, "keystone-api-1")
    assert not terminating(sim, "openvswitch-db-1")
    assert "DisruptionTarget" not in {
        c["type"]
        for c in pod(sim, "keystone-api-1")["status"]["conditions"]  # type: ignore[index]
    }


def test_untolerated_taint_evicts_and_live_kubelet_confirms(
    sim: Simulation, clock: FakeClock
) -> None:
    add_pod(sim, "horizon-1", "control02")
    add_pod(
        sim,
        "tolerant",
        "control02",
        tolerations=[{"key": "example.com/drain", "operator": "Exists"}],
    )
    sim.settle()
    taint(sim, "control02", {"key": "example.com/drain", "effect": "NoExecute"})
    assert terminating(sim, "horizon-1")
    assert not terminating(sim, "tolerant")
    clock.advance(1)
    sim.settle()
    assert pod(sim, "horizon-1") is None


def test_out_of_service_on_1_24_evicts_daemonset_pods_but_nothing_is_force_deleted(
    clock: FakeClock,
) -> None:
    sim = dead_node_with_pods(clock, 1200)
    taint(sim, "control02", OUT_OF_SERVICE)
    clock.advance(600)
    sim.settle()
    for name in ("mariadb-server-1", "keystone-api-1", "openvswitch-db-1"):
        assert terminating(sim, name)


@pytest.mark.parametrize("version", ["1.26.11", "1.28.3"])
def test_out_of_service_with_gate_on_force_deletes_terminating_pods(
    clock: FakeClock, version: str
) -> None:
    sim = dead_node_with_pods(clock, 1200, k8s_version=version)
    # NotReady alone is not enough for PodGC.
    assert terminating(sim, "mariadb-server-1")
    taint(sim, "control02", OUT_OF_SERVICE)
    for name in ("mariadb-server-1", "keystone-api-1", "openvswitch-db-1"):
        assert pod(sim, name) is None
    assert not terminating(sim, "keystone-api-3")


def test_gate_explicitly_off_on_1_26_leaves_pods_with_disruption_condition(
    clock: FakeClock,
) -> None:
    sim = dead_node_with_pods(
        clock, 1200, k8s_version="1.26.11", feature_gates={"NodeOutOfServiceVolumeDetach": False}
    )
    taint(sim, "control02", OUT_OF_SERVICE)
    stuck = pod(sim, "openvswitch-db-1")
    assert stuck is not None
    assert stuck["metadata"]["deletionTimestamp"]
    disruption = cond(stuck, "DisruptionTarget")
    assert (disruption["status"], disruption["reason"]) == ("True", "DeletionByTaintManager")


def test_out_of_service_on_a_ready_node_is_not_force_deleted(clock: FakeClock) -> None:
    sim = node_sim(clock, k8s_version="1.28.3")
    add_node(sim, "control02")
    add_pod(sim, "held", "control02", finalizers=["example.com/hold"])
    sim.settle()
    taint(sim, "control02", OUT_OF_SERVICE)
    held = pod(sim, "held")
    assert held is not None
    # Evicted gracefully; the live kubelet (not PodGC) confirms after its second.
    assert held["metadata"]["deletionGracePeriodSeconds"] == 30


def test_node_up_clears_taints_confirms_terminating_and_readies_pods(clock: FakeClock) -> None:
    sim = dead_node_with_pods(clock, 1200)
    boot = node(sim, "control02")["status"]["nodeInfo"]["bootID"]
    clock.advance(5)
    state = sim.node_up("control02", since_seconds=600)
    assert state["kubelet"] == "up"
    assert state["ready"] == "True"
    assert state["readySince"] == rfc3339(clock() - timedelta(seconds=600))
    assert state["taints"] == []
    assert state["bootID"] == boot
    assert pod(sim, "mariadb-server-1") is None
    assert pod(sim, "keystone-api-1") is None
    survivor = pod(sim, "openvswitch-db-1")
    assert survivor is not None
    assert cond(survivor, "Ready")["status"] == "True"
    assert survivor["status"]["containerStatuses"][0]["restartCount"] == 0
    lease = sim.store.peek(LEASES, LEASE_NAMESPACE, "control02")
    assert lease is not None
    assert parse_time(lease["spec"]["renewTime"]) == clock()


def test_out_of_service_taint_survives_recovery(clock: FakeClock) -> None:
    sim = dead_node_with_pods(clock, 1200)
    taint(sim, "control02", OUT_OF_SERVICE)
    sim.node_up("control02")
    assert [t["key"] for t in node(sim, "control02")["spec"]["taints"]] == [
        "node.kubernetes.io/out-of-service"
    ]


def test_reboot_gives_new_boot_id_and_restarts_containers(sim: Simulation) -> None:
    add_pod(sim, "ovs", "control02", daemonset=True)
    sim.settle()
    boot = node(sim, "control02")["status"]["nodeInfo"]["bootID"]
    sim.node_down("control02", since_seconds=120)
    state = sim.node_up("control02", reboot=True)
    assert state["bootID"] != boot
    assert node(sim, "control02")["status"]["nodeInfo"]["bootID"] == state["bootID"]
    restarted = pod(sim, "ovs")
    assert restarted is not None
    container = restarted["status"]["containerStatuses"][0]
    assert container["restartCount"] == 1
    assert container["lastState"]["terminated"]["reason"] == "Unknown"
    sim.node_up("control02")
    again = pod(sim, "ovs")
    assert again is not None
    assert again["status"]["containerStatuses"][0]["restartCount"] == 1


def test_unknown_node_is_an_api_not_found(sim: Simulation) -> None:
    from nodefence_sim.errors import ApiError

    with pytest.raises(ApiError) as caught:
        sim.node_down("control09")
    assert caught.value.code == 404
    with pytest.raises(ValueError, match="negative"):
        sim.node_down("control02", since_seconds=-1)


def test_recreated_node_has_new_uid_and_inherits_nothing(sim: Simulation) -> None:
    old = sim.store.get(NODES, None, "control02")
    old["metadata"]["labels"]["openstack-control-plane"] = "enabled"
    old["metadata"]["annotations"] = {"nodefence.io/fenced-by": "nodefence"}
    old["spec"]["taints"] = [OUT_OF_SERVICE]
    sim.store.update(NODES, None, "control02", old)
    sim.node_down("control02", since_seconds=1200)
    add_pod(sim, "bound", "control02", daemonset=True)

    state = sim.recreate_node("control02")
    fresh = node(sim, "control02")
    assert state["uid"] != old["metadata"]["uid"]
    assert fresh["metadata"]["labels"]["openstack-control-plane"] == "enabled"
    assert "annotations" not in fresh["metadata"]
    assert state["taints"] == []
    assert (state["kubelet"], state["ready"]) == ("up", "True")
    lease = sim.store.peek(LEASES, LEASE_NAMESPACE, "control02")
    assert lease is not None
    assert lease["metadata"]["ownerReferences"][0]["uid"] == state["uid"]
    # Pods bound by name keep running on the re-registered node.
    assert pod(sim, "bound") is not None


def test_orphaned_pods_are_removed_after_quarantine(sim: Simulation, clock: FakeClock) -> None:
    add_pod(sim, "orphan", "control09")
    sim.settle()
    clock.advance(39)
    sim.settle()
    assert pod(sim, "orphan") is not None
    clock.advance(1)
    sim.settle()
    assert pod(sim, "orphan") is None
    assert sim.store.items(PODS) == []
