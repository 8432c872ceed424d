"""Refuse from the cache, act on live reads, against the simulated API server.

The watch-fed node index is frozen for these tests the way a real one goes stale: its watches
hang at the API server, so it stops hearing of changes while what it holds still counts as
fresh (its bound raised, so the test does not race it on a slow machine). Then the cache and
the live cluster disagree, and what nodefence does is checked on the wire (the simulator's
request log) and at the machine (the simulated BMCs' resets).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from tests.seeded_cluster import (
    Receiver,
    eventually,
    firing,
    inference,
    node,
    oos_taints,
    start_receiver,
)

from nodefence.engine.cached import CACHED
from nodefence_sim.redfish import bmcs_of, write_bmc_inventory
from nodefence_sim.scale import node_name, simulation
from nodefence_sim.testing import SimulatorHandle, running_simulator

from .cache_support import following, freeze, sent_since, writes_since

NODE = "compute01"
REDFISH_OFF: dict[str, Any] = {
    "rules": [
        {
            "name": "default",
            "fencing": {"driver": "redfish", "action": "off", "timeout_seconds": 10},
        }
    ],
    "cluster": {"max_fenced_nodes": 2, "storm_not_ready_fraction": 0.6, "min_ready_fraction": 0.5},
}


def ready_in_cluster(cluster: SimulatorHandle, name: str) -> bool:
    conditions = node(cluster, name)["status"].get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


@pytest.fixture
async def receiver(cluster: SimulatorHandle) -> AsyncIterator[Receiver]:
    async with start_receiver(cluster, policy=inference(), follow=True) as started:
        yield started


async def test_a_node_the_index_saw_ready_is_refused_by_s1_without_a_request(
    cluster: SimulatorHandle, receiver: Receiver
) -> None:
    await following(receiver)
    [warm] = await receiver.alert(firing(NODE))  # the fence record read once, shared after
    assert warm["verdict"] == "noop", warm
    stats = receiver.pipeline.loop.cached.stats
    record_reads, live = stats.record_reads, stats.live
    since = cluster.faults.cursor
    [decision] = await receiver.alert(firing(NODE))
    assert decision["verdict"] == "noop", decision
    blocked = [r["guard"] for r in decision["reasons"] if not r["passed"]]
    assert blocked == ["ready"], decision
    [note] = [r for r in decision["reasons"] if r["guard"] == CACHED]
    assert "watch-fed node index" in note["message"], note
    assert " s old" in note["message"], note
    # Neither the Lease nor pods were judged: a refusal needs neither.
    assert not any(r["guard"] == "lease" for r in decision["reasons"]), decision
    sent = sent_since(cluster, since)
    assert sent == [], sent
    assert (stats.record_reads, stats.live) == (record_reads, live), stats


async def test_a_stale_cache_saying_notready_never_acts_on_a_live_ready_node(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    """The index saw the node die and then stopped hearing; the node came back. The decision
    made on the cache would fence; it is discarded, the live read finds the node Ready, and
    nothing is claimed, powered off or tainted."""
    bmcs = write_bmc_inventory(tmp_path / "bmcs.yaml", cluster.url, cluster.sim)
    async with start_receiver(
        cluster, policy=REDFISH_OFF, bmc_inventory=bmcs, follow=True
    ) as receiver:
        index = await following(receiver)
        cluster.sim.node_down(NODE, since_seconds=1200)
        cached = receiver.pipeline.reader.node_facts

        def cache_says_dead() -> bool:
            facts = cached.get(NODE)
            return facts is not None and facts.ready is not None and facts.ready.status != "True"

        await eventually(cache_says_dead, within=30)
        await freeze(cluster, index)
        cluster.sim.node_up(NODE, since_seconds=600)
        assert ready_in_cluster(cluster, NODE)
        assert cache_says_dead()
        assert index.fresh() is not None
        since = cluster.faults.cursor
        stats = receiver.pipeline.loop.cached.stats
        refused_before, live_before = stats.refused, stats.live
        [decision] = await receiver.alert(firing(NODE))
        assert decision["verdict"] == "noop", decision
        blocked = [r["guard"] for r in decision["reasons"] if not r["passed"]]
        assert "ready" in blocked, decision
        assert not any(r["guard"] == CACHED for r in decision["reasons"]), decision
        assert (stats.refused, stats.live) == (refused_before, live_before + 1)
        assert writes_since(cluster, since) == []
        assert bmcs_of(cluster.sim).resets == []
        assert not oos_taints(cluster, NODE)
        assert ready_in_cluster(cluster, NODE)


async def test_a_ready_control_plane_node_is_refused_from_the_cache_too(
    cluster: SimulatorHandle, receiver: Receiver
) -> None:
    await following(receiver)
    [warm] = await receiver.alert(firing("control01"))
    assert warm["verdict"] == "noop", warm
    stats = receiver.pipeline.loop.cached.stats
    record_reads, live = stats.record_reads, stats.live
    since = cluster.faults.cursor
    [decision] = await receiver.alert(firing("control01"))
    assert [r["guard"] for r in decision["reasons"] if not r["passed"]] == ["ready"], decision
    assert any(r["guard"] == CACHED for r in decision["reasons"]), decision
    assert sent_since(cluster, since) == []
    assert (stats.record_reads, stats.live) == (record_reads, live), stats


async def test_a_storm_in_miniature_reads_live_only_where_it_fences() -> None:
    """Twelve of forty nodes dead, their webhooks all at once: one fence within the budget of
    one; the others wait for its claim and are refused on the record read after it, from the
    cache, instead of each reading its node, Lease and pods."""
    async with running_simulator(simulation(40, 40)) as cluster:
        dead = [node_name(i) for i in range(28, 40)]
        for name in dead:
            cluster.sim.node_down(name, since_seconds=1200)
        async with start_receiver(
            cluster, policy=inference(), deadline_seconds=60, follow=True
        ) as receiver:
            await following(receiver)
            since = cluster.faults.cursor
            answers = await asyncio.gather(*(receiver.alert(firing(name)) for name in dead))
            sent = cluster.faults.requests(since)
            stats = receiver.pipeline.loop.cached.stats
    decisions = [d for answer in answers for d in answer]
    assert sorted(d["node"] for d in decisions) == sorted(dead)
    fenced = [d for d in decisions if d["verdict"] == "fence"]
    assert len(fenced) == 1, [d["verdict"] for d in decisions]
    refused = [d for d in decisions if d["verdict"] == "noop"]
    assert all(
        {r["guard"] for r in d["reasons"] if not r["passed"]} == {"fence-budget"} for d in refused
    ), refused
    node_reads = [r for r in sent if r.method == "GET" and r.path.startswith("/api/v1/nodes/")]
    assert len(node_reads) < len(dead) // 2, [r.path for r in node_reads]
    assert stats.refused >= len(dead) // 2, stats
