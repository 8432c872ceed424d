"""Cluster-level guards through the real receiver: the pause switch an operator flips with
kubectl, and proof of power-off from a power-status endpoint."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web
from tests.seeded_cluster import (
    NODE,
    eventually,
    firing,
    inference,
    node_events,
    oos_taints,
    pause,
    start_receiver,
    writes_since,
)

from nodefence_sim.testing import SimulatorHandle


async def test_pause_configmap_stops_everything_and_says_why(cluster: SimulatorHandle) -> None:
    cluster.sim.node_down(NODE, since_seconds=1200)
    pause(cluster, "storage maintenance")
    async with start_receiver(cluster) as receiver:
        cursor = cluster.faults.cursor
        [decision] = await receiver.alert(firing())
        assert decision["verdict"] == "skip"
        assert any("storage maintenance" in r["message"] for r in decision["reasons"])
        assert not oos_taints(cluster, NODE)
        assert all("/events" in w for w in writes_since(cluster, cursor))
        assert any("paused" in e["message"] for e in node_events(cluster, NODE))


@asynccontextmanager
async def power_endpoint(answer: str) -> AsyncIterator[str]:
    async def handle(request: web.Request) -> web.Response:
        assert request.match_info["node"] == NODE
        return web.json_response({"state": answer})

    app = web.Application()
    app.router.add_get("/power/{node}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/power/{{node}}"
    finally:
        await runner.cleanup()


async def test_power_proof_from_endpoint_gates_the_fence(cluster: SimulatorHandle) -> None:
    cluster.sim.node_down(NODE, since_seconds=1200)
    async with power_endpoint("on") as url:
        rule = {"name": "bmc", "power_off_proof": {"mode": "http", "url": url}}
        async with start_receiver(cluster, policy=inference({"rules": [rule]})) as receiver:
            [refused] = await receiver.alert(firing())
            assert refused["verdict"] == "noop"
            assert any(r["guard"] == "power-off" and not r["passed"] for r in refused["reasons"])
            assert not oos_taints(cluster, NODE)
    async with power_endpoint("off") as url:
        rule = {"name": "bmc", "power_off_proof": {"mode": "http", "url": url}}
        async with start_receiver(cluster, policy=inference({"rules": [rule]})) as receiver:
            [fenced] = await receiver.alert(firing())
            assert fenced["verdict"] == "fence", fenced
            assert oos_taints(cluster, NODE)


async def test_unreachable_power_endpoint_means_no_fence(cluster: SimulatorHandle) -> None:
    cluster.sim.node_down(NODE, since_seconds=1200)
    rule = {
        "name": "bmc",
        "power_off_proof": {
            "mode": "http",
            "url": "http://127.0.0.1:9/{node}",
            "timeout_seconds": 1,
        },
    }
    async with start_receiver(cluster, policy=inference({"rules": [rule]})) as receiver:
        [decision] = await receiver.alert(firing())
        assert decision["verdict"] == "noop"
        assert not oos_taints(cluster, NODE)


async def test_a_running_receiver_notices_the_pause_switch(cluster: SimulatorHandle) -> None:
    cluster.sim.node_down(NODE, since_seconds=1200)
    async with start_receiver(cluster, policy=inference({"dry_run": True})) as receiver:
        [before] = await receiver.alert(firing())
        assert before["verdict"] == "fence"
        pause(cluster)

        async def paused() -> bool:
            [decision] = await receiver.alert(firing())
            return decision["verdict"] == "skip"

        await eventually(paused, within=60, interval=0.5)
