"""A live kubelet that reports NotReady (``/sim/v1/nodes/{name}/notready``): the Lease stays
fresh on the server's clock while the node is NotReady, tainted and its pods evicted but still
running, the dangerous case nodefence must never fence on inference."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from nodefence_sim.simulation import Simulation
from nodefence_sim.store import rfc3339

from .support import (
    FakeClock,
    cond,
    entry,
    lease,
    node,
    pod,
    renew_time,
)

Client = TestClient[web.Request, web.Application]


def taints(sim: Simulation) -> dict[tuple[str, str], str]:
    spec = node(sim, "control02").get("spec", {})
    return {(t["key"], t["effect"]): t["timeAdded"] for t in spec.get("taints") or []}


async def test_not_ready_keeps_the_lease_fresh_and_backdates_the_transition(
    client: Client, cluster: Simulation, clock: FakeClock
) -> None:
    memory_before = cond(node(cluster, "control02"), "MemoryPressure")
    clock.advance(5)
    response = await client.post(
        "/sim/v1/nodes/control02/notready",
        json={"reason": "ContainerRuntimeDown", "sinceSeconds": 120},
    )
    assert response.status == 200
    state = await response.json()
    since = rfc3339(clock() - timedelta(seconds=120))
    assert (state["kubelet"], state["ready"], state["readyReason"]) == (
        "up",
        "False",
        "ContainerRuntimeDown",
    )
    assert state["readySince"] == since
    assert state["readyMessage"] == "container runtime is down"
    # The other conditions keep their history: only Ready moved.
    memory = cond(node(cluster, "control02"), "MemoryPressure")
    assert memory["lastTransitionTime"] == memory_before["lastTransitionTime"]
    assert renew_time(cluster) == clock()
    assert entry(lease(cluster), "kubelet")["time"] == rfc3339(clock())
    assert taints(cluster) == {
        ("node.kubernetes.io/not-ready", "NoSchedule"): since,
        ("node.kubernetes.io/not-ready", "NoExecute"): since,
    }
    for name in ("mariadb-server-1", "ovs-db"):
        current = pod(cluster, name)
        assert current is not None
        assert current["status"]["phase"] == "Running"
        ready = cond(current, "Ready")
        assert (ready["status"], ready["lastTransitionTime"]) == ("False", since)
        assert not current["metadata"].get("deletionTimestamp")


async def test_it_keeps_renewing_and_heartbeating_on_the_server_clock(
    client: Client, cluster: Simulation, clock: FakeClock
) -> None:
    await client.post("/sim/v1/nodes/control02/notready")
    first = cond(node(cluster, "control02"), "Ready")
    clock.advance(cluster.settings.node_status_report_seconds + 1)
    cluster.settle()
    ready = cond(node(cluster, "control02"), "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "KubeletNotReady")
    assert ready["lastTransitionTime"] == first["lastTransitionTime"]
    assert ready["lastHeartbeatTime"] == rfc3339(clock())
    assert renew_time(cluster) == clock()
    assert entry(lease(cluster), "kubelet")["time"] == rfc3339(clock())
    # Alive: the node lifecycle controller never calls it Unknown or unreachable.
    assert not any(key == "node.kubernetes.io/unreachable" for key, _ in taints(cluster))


async def test_past_the_toleration_pods_are_evicted_and_stay_terminating(
    client: Client, cluster: Simulation, clock: FakeClock
) -> None:
    await client.post(
        "/sim/v1/nodes/control02/notready", json={"reason": "PLEGNotHealthy", "sinceSeconds": 600}
    )
    clock.advance(30)
    cluster.settle()
    evicted = pod(cluster, "mariadb-server-1")
    assert evicted is not None
    assert evicted["metadata"]["deletionTimestamp"]
    # The runtime does not answer: the containers run on and the deletion is never confirmed.
    assert evicted["status"]["phase"] == "Running"
    assert (evicted["status"]["containerStatuses"][0]["state"]).get("running")
    daemon = pod(cluster, "ovs-db")
    assert daemon is not None
    assert not daemon["metadata"].get("deletionTimestamp")
    assert cond(node(cluster, "control02"), "Ready")["message"].startswith("PLEG is not healthy")


async def test_skewed_kubelet_stamps_its_transition_from_its_own_clock(
    client: Client, cluster: Simulation, clock: FakeClock
) -> None:
    await client.post("/sim/v1/nodes/control02/clock", json={"skewSeconds": -900})
    state = await (
        await client.post("/sim/v1/nodes/control02/notready", json={"sinceSeconds": 60})
    ).json()
    server_since = clock() - timedelta(seconds=60)
    assert state["readySince"] == rfc3339(server_since - timedelta(seconds=900))
    # The controller reacts on the server's clock, to when the server recorded the post.
    assert set(taints(cluster).values()) == {rfc3339(server_since)}
    assert entry(lease(cluster), "kubelet")["time"] == rfc3339(clock())


async def test_again_changes_the_reason_and_moves_the_transition_only_back(
    client: Client, cluster: Simulation, clock: FakeClock
) -> None:
    await client.post("/sim/v1/nodes/control02/notready", json={"sinceSeconds": 100})
    since = rfc3339(clock() - timedelta(seconds=100))
    clock.advance(20)
    again = await (
        await client.post(
            "/sim/v1/nodes/control02/notready", json={"reason": "NetworkPluginNotReady"}
        )
    ).json()
    assert (again["readyReason"], again["readySince"]) == ("NetworkPluginNotReady", since)
    assert again["readyMessage"].startswith("container runtime network not ready")
    further = await (
        await client.post("/sim/v1/nodes/control02/notready", json={"sinceSeconds": 400})
    ).json()
    earlier = rfc3339(clock() - timedelta(seconds=400))
    assert further["readySince"] == earlier
    assert set(taints(cluster).values()) == {earlier}


async def test_up_ends_it_confirms_evictions_and_readies_pods(
    client: Client, cluster: Simulation, clock: FakeClock
) -> None:
    await client.post("/sim/v1/nodes/control02/notready", json={"sinceSeconds": 600})
    clock.advance(5)
    response = await client.post("/sim/v1/nodes/control02/up")
    state = await response.json()
    assert (state["ready"], state["readyReason"]) == ("True", "KubeletReady")
    assert state["readySince"] == rfc3339(clock())
    clock.advance(2)
    cluster.settle()
    assert taints(cluster) == {}
    assert pod(cluster, "mariadb-server-1") is None
    survivor = pod(cluster, "ovs-db")
    assert survivor is not None
    assert cond(survivor, "Ready")["status"] == "True"


async def test_a_dead_kubelet_started_not_ready_is_never_not_ready_before_its_death(
    client: Client, cluster: Simulation, clock: FakeClock
) -> None:
    await client.post("/sim/v1/nodes/control02/down", json={"sinceSeconds": 30})
    died = clock() - timedelta(seconds=30)
    state = await (
        await client.post("/sim/v1/nodes/control02/notready", json={"sinceSeconds": 3600})
    ).json()
    assert (state["kubelet"], state["ready"], state["readySince"]) == ("up", "False", rfc3339(died))
    assert renew_time(cluster) == clock()
    assert not any(key == "node.kubernetes.io/unreachable" for key, _ in taints(cluster))


def test_the_simulation_method(cluster: Simulation, clock: FakeClock) -> None:
    state = cluster.node_not_ready("control02", since_seconds=10, reason="ContainerRuntimeDown")
    assert (state["ready"], state["readyReason"]) == ("False", "ContainerRuntimeDown")
    assert state["readySince"] == rfc3339(clock() - timedelta(seconds=10))


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"reason": ""}, 400),
        ({"reason": "not a reason"}, 400),
        ({"reason": 7}, 400),
        ({"reason": "Runtime_Down,"}, 400),
        ({"sinceSeconds": -1}, 400),
        ({"sinceSeconds": "600"}, 400),
        ({"reboot": True}, 400),
        ({"message": "runtime down"}, 400),
    ],
)
async def test_bad_bodies_are_problems(
    client: Client, cluster: Simulation, body: dict[str, Any], status: int
) -> None:
    response = await client.post("/sim/v1/nodes/control02/notready", json=body)
    assert response.status == status
    assert response.content_type == "application/problem+json"
    assert (await response.json(content_type=None))["status"] == status
    assert cluster.node_state("control02")["ready"] == "True"


async def test_unknown_node_is_a_404_problem(client: Client) -> None:
    response = await client.post("/sim/v1/nodes/control09/notready")
    assert response.status == 404
    assert response.content_type == "application/problem+json"
    assert "control09" in (await response.json(content_type=None))["detail"]
