"""Several replicas, several dead nodes, duplicated and reordered deliveries (S3, S7).

Each seed draws which nodes die, how many copies of each alert are sent, in which order, in
which concurrent batches and to which replica; the test id carries the seed, so a failure is
reproduced by running that one id. The fence budget is checked after every batch and, through
a store listener, on every single node write.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from contextlib import AsyncExitStack
from typing import Any

import pytest
from tests.seeded_cluster import Receiver, inference, node_events, start_receiver

from nodefence.policy import parse_policy
from nodefence_sim.resources import NODES
from nodefence_sim.simulation import Simulation
from nodefence_sim.testing import SimulatorHandle, running_simulator

from .support import NODE_PATH, NodeWriteWatch, firing, orphans, ours, resolved, successful

pytestmark = pytest.mark.invariant("S3", "S7")

REPLICAS = 3
SEEDS_BUDGET_ONE = range(12)
SEEDS_BUDGET_TWO = range(1000, 1008)
# Which nodes may be down together in the five-node seed cluster: up to two NotReady stay within
# the 50% storm threshold and keep 3 of 5 Ready; control02 with either worker keeps 2 of 3
# control-plane nodes. Three down is a storm, in which nothing may be fenced at all.
OUTAGES = (
    ("compute01",),
    ("control02",),
    ("compute01", "compute02"),
    ("compute01", "control02"),
    ("compute02", "control02"),
    ("compute01", "compute02", "control02"),
)


def expected_fenced(down: tuple[str, ...], limit: int) -> int:
    return 0 if len(down) >= 3 else min(limit, len(down))


def schedule(rng: random.Random, down: tuple[str, ...]) -> list[list[dict[str, Any]]]:
    """Batches of payloads: every dead node's alert one to three times, sometimes a resolved
    one too (possibly before any firing one), shuffled, cut into concurrent batches of at most
    one delivery per replica."""
    payloads: list[dict[str, Any]] = []
    for name in down:
        payloads += [firing(name) for _ in range(rng.randint(1, 3))]
        if rng.random() < 0.5:
            payloads.append(resolved(name))
    rng.shuffle(payloads)
    batches = []
    while payloads:
        size = rng.randint(1, REPLICAS)
        batches.append(payloads[:size])
        payloads = payloads[size:]
    return batches


def fenced_now(cluster: SimulatorHandle) -> list[str]:
    return sorted(n["metadata"]["name"] for n in cluster.sim.store.items(NODES) if ours(n))


async def run(seed: int, limit: int) -> None:
    rng = random.Random(seed)
    down = rng.choice(OUTAGES)
    policy = parse_policy(inference({"cluster": {"max_fenced_nodes": limit}}))
    async with running_simulator(Simulation.from_scenario("seed")) as cluster:
        watch = NodeWriteWatch(limit).attach(cluster)
        for name in down:
            cluster.sim.node_down(name, since_seconds=1200)
        cluster.faults.latency = rng.choice((0.0, 0.005, 0.02))
        cursor = cluster.faults.cursor
        async with AsyncExitStack() as stack:
            receivers: list[Receiver] = [
                await stack.enter_async_context(
                    start_receiver(
                        cluster, policy=policy, identity=f"replica-{i}", settle_seconds=0
                    )
                )
                for i in range(REPLICAS)
            ]
            for batch in schedule(rng, down):
                targets = rng.sample(receivers, len(batch))
                answers = await asyncio.gather(
                    *(r.post("/alerts", p) for r, p in zip(targets, batch, strict=True))
                )
                assert [status for status, _ in answers] == [200] * len(batch), answers
                assert len(fenced_now(cluster)) <= limit, fenced_now(cluster)
                assert orphans(cluster.sim.store.items(NODES)) == []
        fenced = fenced_now(cluster)
        assert watch.violations == []
        assert watch.max_fenced <= limit
        assert len(fenced) == expected_fenced(down, limit), (down, fenced)
        assert set(fenced) <= set(down)
        for name in down:
            fences = successful(cluster, "PUT", NODE_PATH.format(name), cursor)
            assert fences == (1 if name in fenced else 0), (name, fences)
            reasons = Counter(e["reason"] for e in node_events(cluster, name))
            assert reasons["NodeFenced"] == fences, (name, reasons)
            assert reasons["NodeUnfenced"] == 0


@pytest.mark.parametrize("seed", SEEDS_BUDGET_ONE)
async def test_replicas_fence_within_budget_of_one(seed: int) -> None:
    await run(seed, 1)


@pytest.mark.parametrize("seed", SEEDS_BUDGET_TWO)
async def test_replicas_fence_within_budget_of_two(seed: int) -> None:
    await run(seed, 2)


@pytest.mark.parametrize("grouped", [False, True], ids=["two-requests", "one-payload"])
async def test_one_replica_serving_concurrent_alerts_keeps_the_budget(grouped: bool) -> None:
    async with running_simulator(Simulation.from_scenario("seed")) as cluster:
        for name in ("compute01", "compute02"):
            cluster.sim.node_down(name, since_seconds=1200)
        cluster.faults.latency = 0.05
        watch = NodeWriteWatch(limit=1).attach(cluster)
        async with start_receiver(cluster, settle_seconds=0) as receiver:
            if grouped:
                await receiver.alert(firing("compute01", "compute02"))
            else:
                await asyncio.gather(
                    receiver.alert(firing("compute01")), receiver.alert(firing("compute02"))
                )
        assert watch.violations == []
        assert len(fenced_now(cluster)) == 1
