"""Whose clock stamps what: a kubelet stamps its own (possibly wrong) clock, the API server
stamps managedFields on its own, and a backdated death is one consistent story on both."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from nodefence_sim.simulation import Simulation
from nodefence_sim.store import parse_time, rfc3339

from .support import (
    FakeClock,
    add_pod,
    cond,
    entry,
    lease,
    node,
    pod,
    renew_time,
)

GRACE = 40


def run_for(sim: Simulation, clock: FakeClock, seconds: int, step: int = 2) -> None:
    for _ in range(seconds // step):
        clock.advance(step)
        sim.settle()


def test_every_renewal_refreshes_the_kubelets_server_time(
    cluster: Simulation, clock: FakeClock
) -> None:
    run_for(cluster, clock, 20)
    assert renew_time(cluster) == clock()
    assert entry(lease(cluster), "kubelet")["time"] == rfc3339(clock())
    assert entry(lease(cluster), "kubelet")["fieldsV1"]["f:spec"]["f:renewTime"] == {}


async def test_a_kubelet_with_a_slow_clock_keeps_renewing_and_stays_ready(
    client: TestClient[web.Request, web.Application], cluster: Simulation, clock: FakeClock
) -> None:
    response = await client.post("/sim/v1/nodes/control02/clock", json={"skewSeconds": -600})
    assert response.status == 200
    assert (await response.json())["clockSkewSeconds"] == -600
    run_for(cluster, clock, 120)
    # renewTime is the kubelet's clock, the managedFields time the server's.
    assert renew_time(cluster) == clock() - timedelta(seconds=600)
    assert entry(lease(cluster), "kubelet")["time"] == rfc3339(clock())
    ready = cond(node(cluster, "control02"), "Ready")
    assert ready["status"] == "True"
    heartbeat = parse_time(ready["lastHeartbeatTime"])
    assert heartbeat is not None
    assert heartbeat <= clock() - timedelta(seconds=600)
    assert entry(node(cluster, "control02"), "kubelet", "status")["time"] >= rfc3339(
        clock() - timedelta(seconds=60)
    )
    assert "node.kubernetes.io/unreachable" not in str(node(cluster, "control02")["spec"])
    add_pod(cluster, "late", "control02")
    cluster.settle()
    late = pod(cluster, "late")
    assert late is not None
    assert late["status"]["startTime"] == rfc3339(clock() - timedelta(seconds=600))
    assert entry(late, "kubelet", "status")["time"] == rfc3339(clock())

    reset = await client.post("/sim/v1/nodes/control02/clock", json={"skewSeconds": 0})
    assert (await reset.json())["clockSkewSeconds"] == 0
    run_for(cluster, clock, 4)
    assert renew_time(cluster) == clock()


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"skewSeconds": "soon"}, 400),
        ({"skewSeconds": True}, 400),
        ({"skewSeconds": 1e12}, 400),
        ({}, 400),
        ({"skewSeconds": 5, "sinceSeconds": 3}, 400),
    ],
)
async def test_clock_refuses_bad_bodies(
    client: TestClient[web.Request, web.Application], body: dict[str, Any], status: int
) -> None:
    response = await client.post("/sim/v1/nodes/control02/clock", json=body)
    assert response.status == status
    assert response.content_type == "application/problem+json"


async def test_clock_of_an_unknown_node_is_404(
    client: TestClient[web.Request, web.Application],
) -> None:
    response = await client.post("/sim/v1/nodes/control09/clock", json={"skewSeconds": 1})
    assert response.status == 404
    assert response.content_type == "application/problem+json"


def _assert_one_death(sim: Simulation, died: datetime) -> None:
    """Everything the death implies, at the moments it implies them."""
    noticed = rfc3339(died + timedelta(seconds=GRACE))
    assert renew_time(sim) == died
    assert entry(lease(sim), "kubelet")["time"] == rfc3339(died)
    current = node(sim, "control02")
    ready = cond(current, "Ready")
    assert (ready["status"], ready["lastTransitionTime"]) == ("Unknown", noticed)
    taints = {(t["key"], t["effect"]): t["timeAdded"] for t in current["spec"]["taints"]}
    assert taints == {
        ("node.kubernetes.io/unreachable", "NoSchedule"): noticed,
        ("node.kubernetes.io/unreachable", "NoExecute"): noticed,
    }
    assert entry(current, "kube-controller-manager", "status")["time"] == noticed
    survivor = pod(sim, "ovs-db")
    assert survivor is not None
    pod_ready = cond(survivor, "Ready")
    assert (pod_ready["status"], pod_ready["lastTransitionTime"]) == ("False", noticed)


async def test_down_backdates_lease_managed_fields_conditions_and_pods(
    client: TestClient[web.Request, web.Application], cluster: Simulation, clock: FakeClock
) -> None:
    await client.post("/sim/v1/nodes/control02/down", json={"sinceSeconds": 100})
    _assert_one_death(cluster, clock() - timedelta(seconds=100))


async def test_down_twice_keeps_one_death_or_moves_it_back(
    client: TestClient[web.Request, web.Application], cluster: Simulation, clock: FakeClock
) -> None:
    await client.post("/sim/v1/nodes/control02/down", json={"sinceSeconds": 100})
    died = clock() - timedelta(seconds=100)
    clock.advance(30)
    await client.post("/sim/v1/nodes/control02/down")
    _assert_one_death(cluster, died)
    await client.post("/sim/v1/nodes/control02/down", json={"sinceSeconds": 1200})
    _assert_one_death(cluster, clock() - timedelta(seconds=1200))


async def test_up_after_down_is_never_ready_before_the_death(
    client: TestClient[web.Request, web.Application], cluster: Simulation, clock: FakeClock
) -> None:
    await client.post("/sim/v1/nodes/control02/down", json={"sinceSeconds": 300})
    died = clock() - timedelta(seconds=300)
    clock.advance(10)
    response = await client.post(
        "/sim/v1/nodes/control02/up", json={"sinceSeconds": 3600, "reboot": True}
    )
    state = await response.json()
    assert state["ready"] == "True"
    assert state["readySince"] == rfc3339(died)
    assert entry(node(cluster, "control02"), "kubelet", "status")["time"] == rfc3339(died)
    survivor = pod(cluster, "ovs-db")
    assert survivor is not None
    ready_again = parse_time(cond(survivor, "Ready")["lastTransitionTime"])
    assert cond(survivor, "Ready")["status"] == "True"
    assert ready_again is not None
    assert ready_again >= died
    assert renew_time(cluster) == clock()
    assert entry(lease(cluster), "kubelet")["time"] == rfc3339(clock())
