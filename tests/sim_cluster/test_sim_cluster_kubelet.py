"""The simulated kubelet: lease, node status, running pods, confirming deletions."""

from __future__ import annotations

import ipaddress
import re
from datetime import timedelta

from nodefence_sim.controllers.kubelet import LEASE_NAMESPACE
from nodefence_sim.resources import LEASES, PODS
from nodefence_sim.simulation import Simulation
from nodefence_sim.store import DeleteOptions, Obj, parse_time, rfc3339

from .support import FakeClock, add_pod, cond, node, pod


def lease(sim: Simulation, name: str = "control02") -> Obj:
    found = sim.store.peek(LEASES, LEASE_NAMESPACE, name)
    assert found is not None
    return found


def test_lease_is_created_owned_and_renewed_on_period(sim: Simulation, clock: FakeClock) -> None:
    first = lease(sim)
    assert first["spec"]["holderIdentity"] == "control02"
    assert first["spec"]["leaseDurationSeconds"] == 40
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", first["spec"]["renewTime"])
    assert parse_time(first["spec"]["renewTime"]) == clock()
    owner = first["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"]) == ("Node", node(sim, "control02")["metadata"]["uid"])

    clock.advance(1)
    sim.step()
    assert lease(sim)["spec"]["renewTime"] == first["spec"]["renewTime"]

    clock.advance(1.5)
    sim.step()
    assert parse_time(lease(sim)["spec"]["renewTime"]) == clock()


def test_node_status_is_posted_ready(sim: Simulation) -> None:
    current = node(sim, "control02")
    ready = cond(current, "Ready")
    assert ready["status"] == "True"
    assert ready["reason"] == "KubeletReady"
    assert ready["message"] == "kubelet is posting ready status"
    for kind in ("MemoryPressure", "DiskPressure", "PIDPressure"):
        assert cond(current, kind)["status"] == "False"
    info = current["status"]["nodeInfo"]
    assert info["kubeletVersion"] == "v1.24.8"
    for key in ("bootID", "osImage", "kernelVersion", "containerRuntimeVersion", "machineID"):
        assert info[key]
    assert info["systemUUID"]
    types = {a["type"] for a in current["status"]["addresses"]}
    assert "InternalIP" in types


def test_scheduled_pod_starts_running(sim: Simulation) -> None:
    add_pod(sim, "keystone-api-1", "control02", init=2)
    add_pod(sim, "ovs", "control02", host_network=True)
    add_pod(sim, "waiting", None)
    sim.settle()

    running = pod(sim, "keystone-api-1")
    assert running is not None
    status = running["status"]
    assert status["phase"] == "Running"
    assert ipaddress.ip_address(status["podIP"]) in ipaddress.ip_network("10.233.77.0/24")
    assert status["hostIP"] == "192.168.20.32"
    assert all(c["ready"] and "running" in c["state"] for c in status["containerStatuses"])
    assert [c["state"]["terminated"]["reason"] for c in status["initContainerStatuses"]] == [
        "Completed",
        "Completed",
    ]
    assert cond(running, "Ready")["status"] == "True"

    host = pod(sim, "ovs")
    assert host is not None
    assert host["status"]["podIP"] == "192.168.20.32"
    unscheduled = pod(sim, "waiting")
    assert unscheduled is not None
    assert "phase" not in unscheduled.get("status", {})


def test_pod_ips_are_distinct(sim: Simulation) -> None:
    for index in range(5):
        add_pod(sim, f"api-{index}", "control02")
    sim.settle()
    ips = {pod(sim, f"api-{i}")["status"]["podIP"] for i in range(5)}  # type: ignore[index]
    assert len(ips) == 5


def test_volume_blocked_pod_waits_until_unblocked(sim: Simulation) -> None:
    blocked = {"sim.nodefence.io/volume-blocked": "true"}
    add_pod(sim, "mariadb-server-1", "control02", init=2, annotations=blocked)
    add_pod(sim, "plain", "control02", annotations=blocked)
    sim.settle()

    waiting = pod(sim, "mariadb-server-1")
    assert waiting is not None
    assert waiting["status"]["phase"] == "Pending"
    assert "podIP" not in waiting["status"]
    reasons = {c["state"]["waiting"]["reason"] for c in waiting["status"]["initContainerStatuses"]}
    assert reasons == {"PodInitializing"}
    assert cond(waiting, "Initialized")["status"] == "False"
    plain = pod(sim, "plain")
    assert plain is not None
    assert plain["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == (
        "ContainerCreating"
    )

    unblocked = sim.store.get(PODS, "openstack", "mariadb-server-1")
    unblocked["metadata"]["annotations"] = {}
    sim.store.update(PODS, "openstack", "mariadb-server-1", unblocked)
    sim.settle()
    started = pod(sim, "mariadb-server-1")
    assert started is not None
    assert started["status"]["phase"] == "Running"
    assert cond(started, "Initialized")["status"] == "True"


def test_live_kubelet_confirms_graceful_deletion_after_a_second(
    sim: Simulation, clock: FakeClock
) -> None:
    created = add_pod(sim, "horizon-1", "control02")
    sim.settle()
    sim.store.delete(PODS, "openstack", "horizon-1", DeleteOptions())
    sim.settle()
    terminating = pod(sim, "horizon-1")
    assert terminating is not None
    assert terminating["metadata"]["deletionTimestamp"] == rfc3339(clock() + timedelta(seconds=30))

    clock.advance(1)
    sim.settle()
    assert pod(sim, "horizon-1") is None
    # A same-named successor is never hit by the confirmation (UID precondition).
    add_pod(sim, "horizon-1", "control02")
    sim.settle()
    successor = pod(sim, "horizon-1")
    assert successor is not None
    assert successor["metadata"]["uid"] != created["metadata"]["uid"]


def test_finalizer_keeps_confirmed_pod(sim: Simulation, clock: FakeClock) -> None:
    add_pod(sim, "held", "control02", finalizers=["example.com/hold"])
    sim.settle()
    sim.store.delete(PODS, "openstack", "held", DeleteOptions())
    clock.advance(1)
    sim.settle()
    held = pod(sim, "held")
    assert held is not None
    assert held["metadata"]["deletionGracePeriodSeconds"] == 0


def test_admission_adds_default_tolerations(sim: Simulation) -> None:
    plain = add_pod(sim, "plain", None)
    assert sorted(
        (t["key"], t["effect"], t["tolerationSeconds"]) for t in plain["spec"]["tolerations"]
    ) == [
        ("node.kubernetes.io/not-ready", "NoExecute", 300),
        ("node.kubernetes.io/unreachable", "NoExecute", 300),
    ]
    own = add_pod(
        sim,
        "own",
        None,
        tolerations=[
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"}
        ],
    )
    assert own["spec"]["tolerations"] == [
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
        {
            "key": "node.kubernetes.io/not-ready",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 300,
        },
    ]
    everything = add_pod(sim, "everything", None, tolerations=[{"operator": "Exists"}])
    assert everything["spec"]["tolerations"] == [{"operator": "Exists"}]
