"""A replica killed mid-action: the next one finishes the work from the cluster's state alone,
without orphaned mirror annotations and without a second fence."""

from __future__ import annotations

import asyncio
import contextlib
import random
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import pytest
from tests.seeded_cluster import OOS, oos_taints, start_receiver

from nodefence.engine import mirror
from nodefence.engine import record as fence_record
from nodefence.engine.record import FenceEntry, FenceRecord, Phase
from nodefence_sim.resources import CONFIGMAPS, NODES
from nodefence_sim.testing import SimulatorHandle, SimulatorProcess

from .support import (
    NODE_PATH,
    ServeProcess,
    assert_fenced,
    firing,
    kill_node,
    names_on,
    orphans,
    pod_uids_off,
    until,
)

NODE = "control02"
IDENTITY = "replica-a"
# Seeds for the kill points; each draws after how many API requests the receiver dies (5, 6, 8,
# 18, 28: among the first reads, at the claim, between claim and taint, in the purge and late in
# it; the whole alert takes about 50); with 30 ms per request the next request is usually in
# flight at the kill. The write order (claim,
# taint, confirm, purge) leaves at every point a state the next delivery or the reconcile pass
# completes: a claim without taint is completed on every guard, a taint with an unconfirmed
# claim is confirmed.
CRASH_SEEDS = (2, 79, 21, 3, 29)
MAX_KILL_POINT = 30


class Cluster:
    """The simulator in its own process, seen over HTTP only."""

    def __init__(self, sim: SimulatorProcess, http: aiohttp.ClientSession) -> None:
        self.sim = sim
        self.http = http

    async def get(self, path: str, **params: str) -> Any:
        async with self.http.get(self.sim.url + path, params=params) as response:
            assert response.status == 200, await response.text()
            return await response.json()

    async def post(self, path: str, body: Any) -> Any:
        async with self.http.post(self.sim.url + path, json=body) as response:
            assert response.status < 300, await response.text()
            return await response.json()

    async def nodes(self) -> list[dict[str, Any]]:
        return list((await self.get("/api/v1/nodes"))["items"])

    async def pods(self) -> list[dict[str, Any]]:
        return list((await self.get("/api/v1/pods"))["items"])

    async def terminating_on(self, name: str) -> list[str]:
        return [
            p["metadata"]["name"]
            for p in await self.pods()
            if p["spec"].get("nodeName") == name and p["metadata"].get("deletionTimestamp")
        ]

    async def requests(self, since: int) -> list[dict[str, Any]]:
        return list((await self.get("/sim/v1/requests", since=str(since)))["requests"])

    async def cursor(self) -> int:
        return int((await self.get("/sim/v1/requests", since="999999999"))["cursor"])


async def _deliver(http: aiohttp.ClientSession, url: str, token: str, path: str) -> int:
    body = firing(NODE) if path == "/alerts" else {}
    headers = {"Authorization": f"Bearer {token}"}
    async with http.post(url + path, json=body, headers=headers) as response:
        await response.read()
        return response.status


async def _crash_and_recover(seed: int) -> None:
    rng = random.Random(seed)
    kill_after = rng.randint(1, MAX_KILL_POINT)
    token = secrets.token_urlsafe(16)
    with SimulatorProcess("seed") as sim:
        async with aiohttp.ClientSession() as http:
            cluster = Cluster(sim, http)
            await cluster.post(f"/sim/v1/nodes/{NODE}/down", {"sinceSeconds": 1200})
            await until(lambda: cluster.terminating_on(NODE))
            pods = await cluster.pods()
            others = {p["metadata"]["uid"] for p in pods if p["spec"].get("nodeName") != NODE}
            on_node = {
                (p["metadata"]["namespace"], p["metadata"]["name"])
                for p in pods
                if p["spec"].get("nodeName") == NODE
            }
            await cluster.post("/sim/v1/faults", {"latencySeconds": 0.03})
            cursor = await cluster.cursor()

            with ServeProcess(sim.kubeconfig, token, IDENTITY) as first:
                await first.wait_healthy(http)
                delivery = asyncio.create_task(_deliver(http, first.url, token, "/alerts"))
                while not delivery.done() and len(await cluster.requests(cursor)) < kill_after:
                    await asyncio.sleep(0.01)
                assert not delivery.done(), f"seed {seed}: the alert finished before the kill"
                first.kill()
                with contextlib.suppress(aiohttp.ClientError):
                    await delivery
            assert orphans(await cluster.nodes()) == [], f"seed {seed}, killed at {kill_after}"

            with ServeProcess(sim.kubeconfig, token, IDENTITY) as second:
                await second.wait_healthy(http)
                assert await _deliver(http, second.url, token, "/alerts") == 200

                async def finished() -> bool:
                    assert await _deliver(http, second.url, token, "/reconcile") == 200
                    return not await cluster.terminating_on(NODE)

                await until(finished, within=60, interval=0.2)

            nodes = await cluster.nodes()
            assert orphans(nodes) == []
            [node] = [n for n in nodes if n["metadata"]["name"] == NODE]
            taints = [t for t in node["spec"]["taints"] if t["key"] == OOS]
            assert len(taints) == 1, node["spec"]["taints"]
            assert node["metadata"]["annotations"][mirror.NODE_UID] == node["metadata"]["uid"]
            log = await cluster.requests(cursor)
            fences = [
                r
                for r in log
                if (r["method"], r["path"]) == ("PUT", NODE_PATH.format(NODE))
                and r["status"] == 200
            ]
            assert len(fences) == 1, f"seed {seed}, killed at {kill_after}: {fences}"
            alive = {p["metadata"]["uid"] for p in await cluster.pods()}
            assert others <= alive, "a pod of another node was deleted"
            deleted = {
                tuple(r["path"].split("/")[4:7:2])
                for r in log
                if r["method"] == "DELETE" and "/pods/" in r["path"] and r["status"] == 200
            }
            assert deleted <= on_node


@pytest.mark.parametrize("seed", CRASH_SEEDS)
async def test_receiver_killed_mid_fence_is_finished_by_the_next_one(seed: int) -> None:
    await _crash_and_recover(seed)


def _claim(cluster: SimulatorHandle, name: str, claimed_at: datetime, by: str) -> None:
    """The fence record as a replica leaves it when it dies right after its claim."""
    node = cluster.sim.store.get(NODES, None, name)
    entry = FenceEntry(
        node=name,
        uid=node["metadata"]["uid"],
        phase=Phase.CLAIMED,
        claimed_at=claimed_at,
        rule="default",
        alertname="KubeNodeNotReady",
        fingerprint="crashed",
        boot_id=node["status"]["nodeInfo"]["bootID"],
        effect="NoExecute",
        control_plane=True,
        claimed_by=by,
    )
    cluster.sim.store.create(
        CONFIGMAPS,
        "nodefence",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": fence_record.CONFIGMAP, "namespace": "nodefence"},
            "data": fence_record.encode(fence_record.with_entry(FenceRecord(), entry)),
        },
    )


async def test_claim_of_a_crashed_replica_is_completed_by_the_next_delivery(
    cluster: SimulatorHandle,
) -> None:
    """A replica that died between its claim and the taint leaves a claimed entry; no lock
    times out, so the next delivery does not wait: it judges the node afresh on every guard and
    completes that very claim (one taint, one entry, the budget spent once)."""
    await kill_node(cluster, NODE)
    others, on_node, cursor = pod_uids_off(cluster, NODE), names_on(cluster, NODE), 0
    _claim(cluster, NODE, datetime.now(UTC), "replica-crashed/0")
    async with start_receiver(cluster, identity="replica-b") as receiver:
        [decision] = await receiver.alert(firing(NODE))
    assert decision["verdict"] == "fence", decision
    held = cluster.sim.store.get(CONFIGMAPS, "nodefence", fence_record.CONFIGMAP)
    record = fence_record.decode(held["data"], held["metadata"]["resourceVersion"])
    [entry] = record.entries
    assert (entry.phase, entry.claimed_by) == (Phase.FENCED, "replica-crashed/0")
    assert_fenced(cluster, NODE, others_before=others, on_node_before=on_node, since=cursor)


async def test_stale_claim_for_a_recovered_node_is_rolled_back(cluster: SimulatorHandle) -> None:
    """A claim older than the claim timeout whose node is Ready again is removed by the
    reconcile pass, so the budget slot is not held for ever; the node is not touched."""
    _claim(cluster, NODE, datetime.now(UTC) - timedelta(hours=1), "replica-crashed/0")
    async with start_receiver(cluster, identity="replica-b") as receiver:
        status, body = await receiver.post("/reconcile", {})
    assert status == 200, body
    held = cluster.sim.store.get(CONFIGMAPS, "nodefence", fence_record.CONFIGMAP)
    record = fence_record.decode(held["data"], held["metadata"]["resourceVersion"])
    assert record.entries == ()
    assert record.released == (), "a claim whose taint never came released nothing"
    assert oos_taints(cluster, NODE) == []
