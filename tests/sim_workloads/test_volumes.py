"""Claims, VolumeAttachments, Multi-Attach blocking and the detach rules."""

from __future__ import annotations

import json

import pytest

from nodefence_sim.controllers.volumes import CSI_DRIVER, VOLUME_BLOCKED_ANNOTATION
from nodefence_sim.resources import EVENTS, PODS, PVCS, PVS, STATEFULSETS, VOLUME_ATTACHMENTS
from nodefence_sim.simulation import SimSettings, Simulation
from nodefence_sim.store import DeleteOptions, Obj

from ._cluster import (
    NS,
    Clock,
    add_node,
    force_delete,
    make_sim,
    run_until,
    set_out_of_service,
    set_ready,
    settle,
    statefulset,
)

POD = "mariadb-server-0"
PIN = {"sim.nodefence.io/initial-node": json.dumps({"0": "control01"})}
STUCK_ROUNDS = 30


def _attachments(sim: Simulation) -> dict[str, Obj]:
    return {va["spec"]["nodeName"]: va for va in sim.store.items(VOLUME_ATTACHMENTS)}


def _blocked(sim: Simulation) -> bool:
    pod = sim.store.peek(PODS, NS, POD)
    return (
        pod is not None
        and (pod["metadata"].get("annotations") or {}).get(VOLUME_BLOCKED_ANNOTATION) == "true"
    )


def _running_on(sim: Simulation, node: str) -> bool:
    pod = sim.store.peek(PODS, NS, POD)
    return (
        pod is not None
        and pod["spec"].get("nodeName") == node
        and pod["status"].get("phase") == "Running"
        and not _blocked(sim)
        and set(_attachments(sim)) == {node}
    )


def _cluster(settings: SimSettings | None = None, clock: Clock | None = None) -> Simulation:
    sim = make_sim(settings, clock)
    add_node(sim, "control01")
    add_node(sim, "control02")
    sim.store.create(STATEFULSETS, NS, statefulset("mariadb-server", 1, annotations=PIN))
    settle(sim)
    assert _running_on(sim, "control01")
    return sim


def _lose_control01(sim: Simulation) -> Obj:
    """control01 dies; its pod is purged (as the runbook does); the replacement lands on
    control02 while the volume is still attached to control01."""
    set_ready(sim, "control01", False)
    old = sim.store.get(PODS, NS, POD)
    force_delete(sim, old)
    run_until(sim, lambda: _blocked(sim))
    new = sim.store.get(PODS, NS, POD)
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    assert new["spec"]["nodeName"] == "control02"
    return new


def _stays_blocked(sim: Simulation) -> None:
    for _ in range(STUCK_ROUNDS):
        sim.step()
    assert _blocked(sim)
    assert sim.store.get(PODS, NS, POD)["status"]["phase"] == "Pending"
    assert set(_attachments(sim)) == {"control01"}


def test_claim_is_bound_to_a_csi_volume_and_attached_to_the_pods_node() -> None:
    sim = _cluster()
    claim = sim.store.get(PVCS, NS, "data-mariadb-server-0")
    pv = sim.store.get(PVS, None, claim["spec"]["volumeName"])
    assert pv["metadata"]["name"] == f"pv-{claim['metadata']['uid']}"
    assert pv["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert pv["spec"]["csi"]["driver"] == CSI_DRIVER
    assert pv["spec"]["claimRef"]["uid"] == claim["metadata"]["uid"]
    assert claim["status"]["phase"] == "Bound"
    va = _attachments(sim)["control01"]
    assert va["metadata"]["name"].startswith("csi-")
    assert len(va["metadata"]["name"]) == 4 + 64
    assert va["spec"] == {
        "attacher": CSI_DRIVER,
        "nodeName": "control01",
        "source": {"persistentVolumeName": pv["metadata"]["name"]},
    }
    assert va["status"] == {"attached": True}


def test_multi_attach_error_blocks_the_replacement_with_an_event() -> None:
    sim = _cluster()
    new = _lose_control01(sim)
    pv_name = sim.store.get(PVCS, NS, "data-mariadb-server-0")["spec"]["volumeName"]
    events = [e for e in sim.store.items(EVENTS, NS) if e["reason"] == "FailedAttachVolume"]
    assert len(events) == 1
    event = events[0]
    assert event["type"] == "Warning"
    assert event["involvedObject"]["uid"] == new["metadata"]["uid"]
    assert event["source"] == {"component": "attachdetach-controller"}
    assert event["message"] == (
        f'Multi-Attach error for volume "{pv_name}" Volume is already exclusively attached to one '
        "node and can't be attached to another"
    )


@pytest.mark.parametrize(
    "settings",
    [
        SimSettings(k8s_version="1.24.8"),
        SimSettings(k8s_version="1.26.3", feature_gates={"NodeOutOfServiceVolumeDetach": False}),
    ],
    ids=["1.24-default-off", "1.26-explicitly-off"],
)
def test_gate_off_keeps_the_volume_until_the_node_is_ready_again(settings: SimSettings) -> None:
    sim = _cluster(settings)
    _lose_control01(sim)
    set_out_of_service(sim, "control01", True)
    _stays_blocked(sim)
    set_ready(sim, "control01", True)
    run_until(sim, lambda: _running_on(sim, "control02"))


def test_gate_off_unblocks_when_the_attachment_is_deleted_by_someone_else() -> None:
    sim = _cluster()
    _lose_control01(sim)
    _stays_blocked(sim)
    stale = _attachments(sim)["control01"]
    sim.store.delete(VOLUME_ATTACHMENTS, None, stale["metadata"]["name"], DeleteOptions())
    run_until(sim, lambda: _running_on(sim, "control02"))


@pytest.mark.parametrize(
    "settings",
    [
        SimSettings(k8s_version="1.24.8", feature_gates={"NodeOutOfServiceVolumeDetach": True}),
        SimSettings(k8s_version="1.26.3"),
    ],
    ids=["1.24-explicitly-on", "1.26-default-on"],
)
def test_gate_on_detaches_once_the_dead_node_is_out_of_service(settings: SimSettings) -> None:
    sim = _cluster(settings)
    _lose_control01(sim)
    _stays_blocked(sim)
    set_out_of_service(sim, "control01", True)
    run_until(sim, lambda: _running_on(sim, "control02"))


def test_gate_on_does_not_detach_from_a_dead_node_without_the_taint_while_a_pod_uses_it() -> None:
    sim = _cluster(SimSettings(k8s_version="1.28.0"))
    set_ready(sim, "control01", False)
    set_out_of_service(sim, "control01", True)
    for _ in range(STUCK_ROUNDS):
        sim.step()
    # The old pod was not purged: it still needs the volume, so it stays attached.
    assert set(_attachments(sim)) == {"control01"}
    assert sim.store.get(PODS, NS, POD)["spec"]["nodeName"] == "control01"


def test_force_detach_after_the_configured_wait() -> None:
    clock = Clock()
    sim = _cluster(SimSettings(force_detach_after_seconds=360), clock)
    _lose_control01(sim)
    clock.advance(359)
    _stays_blocked(sim)
    clock.advance(2)
    run_until(sim, lambda: _running_on(sim, "control02"))


def test_pods_sharing_a_claim_on_two_nodes_name_the_user_in_the_error() -> None:
    sim = make_sim()
    add_node(sim, "n1")
    add_node(sim, "n2")
    sim.store.create(
        PVCS, NS, {"metadata": {"name": "shared"}, "spec": {"accessModes": ["ReadWriteOnce"]}}
    )
    for name, node in (("first", "n1"), ("second", "n2")):
        sim.store.create(
            PODS,
            NS,
            {
                "metadata": {"name": name},
                "spec": {
                    "nodeName": node,
                    "containers": [{"name": "c", "image": "img"}],
                    "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "shared"}}],
                },
                "status": {"phase": "Pending"},
            },
        )
        settle(sim)
    second = sim.store.get(PODS, NS, "second")
    assert second["metadata"]["annotations"][VOLUME_BLOCKED_ANNOTATION] == "true"
    messages = [
        e["message"] for e in sim.store.items(EVENTS, NS) if e["reason"] == "FailedAttachVolume"
    ]
    assert len(messages) == 1
    assert messages[0].endswith("Volume is already used by pod(s) first")
    assert sim.store.get(PODS, NS, "first")["status"]["phase"] == "Running"


def test_read_write_many_volumes_attach_to_several_nodes() -> None:
    sim = make_sim()
    add_node(sim, "n1")
    add_node(sim, "n2")
    sim.store.create(
        PVCS, NS, {"metadata": {"name": "shared"}, "spec": {"accessModes": ["ReadWriteMany"]}}
    )
    for name, node in (("first", "n1"), ("second", "n2")):
        sim.store.create(
            PODS,
            NS,
            {
                "metadata": {"name": name},
                "spec": {
                    "nodeName": node,
                    "containers": [{"name": "c", "image": "img"}],
                    "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "shared"}}],
                },
            },
        )
    settle(sim)
    assert set(_attachments(sim)) == {"n1", "n2"}
    assert all(
        sim.store.get(PODS, NS, n)["status"]["phase"] == "Running" for n in ("first", "second")
    )
