"""The ``/sim/v1`` control surface over real HTTP."""

from __future__ import annotations

from datetime import timedelta

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from nodefence_sim.simulation import Simulation
from nodefence_sim.store import rfc3339

from .support import FakeClock, add_node, add_pod, node_sim, pod


# Its own: the listings and actions need a second node (control03) and no DaemonSet pod.
@pytest.fixture
def cluster(clock: FakeClock) -> Simulation:
    sim = node_sim(clock)
    add_node(sim, "control02")
    add_node(sim, "control03")
    add_pod(sim, "mariadb-server-1", "control02")
    sim.settle()
    return sim


async def test_list_nodes(client: TestClient[web.Request, web.Application]) -> None:
    response = await client.get("/sim/v1/nodes")
    assert response.status == 200
    body = await response.json()
    assert [(n["name"], n["kubelet"], n["ready"]) for n in body["nodes"]] == [
        ("control02", "up", "True"),
        ("control03", "up", "True"),
    ]


async def test_down_backdates_and_answers_node_state(
    client: TestClient[web.Request, web.Application], cluster: Simulation, clock: FakeClock
) -> None:
    response = await client.post("/sim/v1/nodes/control02/down", json={"sinceSeconds": 1200})
    assert response.status == 200
    state = await response.json()
    assert state["kubelet"] == "down"
    assert state["ready"] == "Unknown"
    assert state["readySince"] == rfc3339(clock() - timedelta(seconds=1160))
    assert {t["key"] for t in state["taints"]} == {"node.kubernetes.io/unreachable"}
    evicted = pod(cluster, "mariadb-server-1")
    assert evicted is not None
    assert evicted["metadata"]["deletionTimestamp"]

    listing = await (await client.get("/sim/v1/nodes")).json()
    assert {n["name"]: n["kubelet"] for n in listing["nodes"]} == {
        "control02": "down",
        "control03": "up",
    }


async def test_up_with_reboot_and_empty_body(
    client: TestClient[web.Request, web.Application], clock: FakeClock
) -> None:
    before = await (await client.post("/sim/v1/nodes/control02/down")).json()
    clock.advance(1)
    response = await client.post(
        "/sim/v1/nodes/control02/up", json={"sinceSeconds": 600, "reboot": True}
    )
    assert response.status == 200
    state = await response.json()
    assert state["kubelet"] == "up"
    assert state["ready"] == "True"
    # It died a second ago, so it cannot have been Ready for ten minutes: Ready since its death.
    assert state["readySince"] == rfc3339(clock() - timedelta(seconds=1))
    assert state["bootID"] != before["bootID"]
    plain = await client.post("/sim/v1/nodes/control03/up")
    assert plain.status == 200
    assert (await plain.json())["ready"] == "True"


async def test_recreate_gives_new_uid(client: TestClient[web.Request, web.Application]) -> None:
    old = await (await client.get("/sim/v1/nodes/control03")).json()
    response = await client.post("/sim/v1/nodes/control03/recreate")
    assert response.status == 200
    assert (await response.json())["uid"] != old["uid"]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/sim/v1/nodes/control09/down"),
        ("POST", "/sim/v1/nodes/control09/up"),
        ("GET", "/sim/v1/nodes/control09"),
    ],
)
async def test_unknown_node_is_a_json_problem(
    client: TestClient[web.Request, web.Application], method: str, path: str
) -> None:
    response = await client.request(method, path)
    assert response.status == 404
    assert response.content_type == "application/problem+json"
    problem = await response.json(content_type=None)
    assert problem["status"] == 404
    assert "control09" in problem["detail"]


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("down", "not json"),
        ("down", "[1, 2]"),
        ("down", '{"sinceSeconds": -5}'),
        ("down", '{"sinceSeconds": "1200"}'),
        ("down", '{"sinceSeconds": true}'),
        ("down", '{"reboot": true}'),
        ("up", '{"reboot": "yes"}'),
        ("up", '{"since": 10}'),
    ],
)
async def test_bad_bodies_are_rejected(
    client: TestClient[web.Request, web.Application], cluster: Simulation, path: str, body: str
) -> None:
    response = await client.post(
        f"/sim/v1/nodes/control02/{path}",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    assert response.status == 400
    assert response.content_type == "application/problem+json"
    assert (await response.json(content_type=None))["status"] == 400
    assert cluster.node_state("control02")["kubelet"] == "up"
