"""The watch-fed node index behind the cluster-wide counts, against the simulated API server:
it follows every kind of node change, recovers from broken watches and expired versions, never
serves counts older than its bound, and keeps a few hundred bytes per node."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import pytest

from nodefence.background.runner import Runner
from nodefence.engine.model import OUT_OF_SERVICE_KEY, ClusterFacts
from nodefence.kube.client import KubeClient, load_api_client
from nodefence.kube.facts import FactsReader
from nodefence.kube.node_index import NodeIndex
from nodefence.runtime import serving_reader
from nodefence_sim import store as sim_store
from nodefence_sim.resources import NODES
from nodefence_sim.scale import realistic_node
from nodefence_sim.simulation import Simulation
from nodefence_sim.store import DeleteOptions
from nodefence_sim.testing import SimulatorHandle, running_simulator

from .oracle import cluster_facts

T = TypeVar("T")
# Generous: a poll returns as soon as the index agrees, and must hold on a busy machine.
WITHIN = 30.0


async def eventually(probe: Callable[[], Awaitable[T]], within: float = WITHIN) -> T:
    deadline = time.monotonic() + within
    while True:
        value = await probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {within}s (last value {value!r})")
        await asyncio.sleep(0.05)


@pytest.fixture
async def kube(cluster: SimulatorHandle) -> AsyncIterator[KubeClient]:
    client = KubeClient(await load_api_client(str(cluster.kubeconfig)))
    yield client
    await client.close()


@pytest.fixture
async def index(kube: KubeClient) -> AsyncIterator[NodeIndex]:
    nodes = NodeIndex(kube, watch_seconds=2)
    nodes.start()
    yield nodes
    await nodes.stop()


@pytest.fixture
async def reader(kube: KubeClient) -> AsyncIterator[FactsReader]:
    """A facts reader whose node counts come from its own watch-fed index."""
    facts = serving_reader(kube, "nodefence")
    assert facts.nodes is not None
    assert facts.pause_watch is not None
    followers = Runner([facts.nodes, facts.pause_watch])
    followers.start()
    yield facts
    await followers.stop()


def comparable(facts: ClusterFacts) -> tuple[Any, ...]:
    return (
        facts.total_nodes,
        facts.ready_nodes,
        facts.schedulable_ready,
        facts.control_plane_total,
        facts.control_plane_ready,
        sorted(facts.ready_since),
    )


def agrees(index: NodeIndex, kube: KubeClient) -> Callable[[], Awaitable[bool]]:
    """The index serves what a full list of the Nodes would count, right now."""

    async def probe() -> bool:
        served = index.fresh()
        if served is None:
            return False
        return comparable(served.facts) == comparable(cluster_facts(await kube.list_nodes()))

    return probe


async def test_the_index_counts_what_a_full_list_counts(index: NodeIndex, kube: KubeClient) -> None:
    await eventually(agrees(index, kube))
    served = index.fresh()
    assert served is not None
    assert served.facts.total_nodes > 0
    assert 0 <= served.age <= index.max_age


async def test_the_index_follows_every_kind_of_node_change(
    cluster: SimulatorHandle, index: NodeIndex, kube: KubeClient
) -> None:
    await eventually(agrees(index, kube))
    sim = cluster.sim
    worker = "compute01"

    sim.node_down(worker, since_seconds=600)
    await eventually(agrees(index, kube))
    assert index.nodes[worker].ready is False

    sim.node_up(worker, since_seconds=5)
    await eventually(agrees(index, kube))
    assert index.nodes[worker].ready is True

    await kube.patch_node_json(
        worker, [{"op": "add", "path": "/spec/unschedulable", "value": True}]
    )
    await eventually(agrees(index, kube))
    assert index.nodes[worker].takes_workloads is False

    await kube.patch_node_json(worker, [{"op": "remove", "path": "/spec/unschedulable"}])
    node = (await kube.get_node(worker)).body
    taint = {"key": OUT_OF_SERVICE_KEY, "value": "nodeshutdown", "effect": "NoExecute"}
    node["spec"]["taints"] = [*(node["spec"].get("taints") or []), taint]
    await kube.replace_node(worker, node)
    await eventually(agrees(index, kube))
    assert index.nodes[worker].ready
    assert not index.nodes[worker].takes_workloads

    sim.load_objects([realistic_node("worker99", images=3)])
    await eventually(agrees(index, kube))
    assert "worker99" in index.nodes

    sim.store.delete(NODES, None, "worker99", DeleteOptions())
    await eventually(agrees(index, kube))
    assert "worker99" not in index.nodes


async def test_a_broken_watch_recovers(
    cluster: SimulatorHandle, index: NodeIndex, kube: KubeClient
) -> None:
    await eventually(agrees(index, kube))
    # Every watch ends now, and the next two attempts have their connection reset.
    cluster.faults.reset(verbs=("watch",), count=2)
    cluster.sim.store.close_watches()
    cluster.sim.node_down("compute01", since_seconds=600)
    await eventually(agrees(index, kube))
    assert index.nodes["compute01"].ready is False
    assert index.relists == 1, "a broken stream resumes from its resourceVersion"


async def test_an_expired_resource_version_lists_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A short history, as after an etcd compaction: a watch that fell behind gets 410 Gone.
    monkeypatch.setattr(sim_store, "HISTORY", 50)
    async with running_simulator(Simulation.from_scenario("seed")) as cluster:
        kube = KubeClient(await load_api_client(str(cluster.kubeconfig)))
        index = NodeIndex(kube, watch_seconds=2)
        index.start()
        try:
            await eventually(agrees(index, kube))
            outage = cluster.faults.fail(None, verbs=("watch",), status=503)
            cluster.sim.store.close_watches()
            cluster.sim.node_down("compute01", since_seconds=600)
            for n in range(60):  # more changes than the history keeps
                await kube.patch_node_json(
                    "compute02",
                    [{"op": "add", "path": "/metadata/labels/churn", "value": str(n)}],
                )
            cluster.faults.clear()
            assert outage.hits >= 1
            await eventually(agrees(index, kube))
            assert index.nodes["compute01"].ready is False
            assert index.relists >= 2
        finally:
            await index.stop()
            await kube.close()


async def test_counts_past_the_bound_are_not_served(index: NodeIndex, kube: KubeClient) -> None:
    await eventually(agrees(index, kube))
    now = [time.monotonic()]
    index.clock = lambda: now[0]
    index.heard_at = now[0]
    assert index.fresh() is not None
    now[0] += index.max_age + 0.1
    assert index.fresh() is None


async def test_the_reader_falls_back_to_a_list_when_the_index_is_stale(
    cluster: SimulatorHandle, kube: KubeClient, reader: FactsReader
) -> None:
    assert reader.nodes is not None
    await eventually(agrees(reader.nodes, kube))
    assert (await reader.cluster()).total_nodes == len(reader.nodes.nodes)
    cursor = cluster.faults.cursor
    await reader.cluster()
    assert not [r for r in cluster.faults.requests(cursor) if r.verb == "list"]

    # The index stops hearing from the server (as with a watch that hangs) and ages out.
    await reader.nodes.stop()
    reader.nodes.heard_at = time.monotonic() - reader.nodes.max_age - 1
    cluster.sim.node_down("compute01", since_seconds=600)
    cursor = cluster.faults.cursor
    live = cluster_facts(await kube.list_nodes())
    facts = await reader.cluster()
    assert comparable(facts) == comparable(live)
    listed = [r for r in cluster.faults.requests(cursor) if r.verb == "list"]
    assert len(listed) >= 2, "the reader listed the nodes itself"


async def test_a_control_plane_alert_reads_its_peers_live(
    cluster: SimulatorHandle, kube: KubeClient, reader: FactsReader
) -> None:
    assert reader.nodes is not None
    await eventually(agrees(reader.nodes, kube))
    # The index has not seen control03 go down yet: its stream is held back.
    cluster.faults.fail(None, verbs=("watch",), status=503)
    cluster.sim.store.close_watches()
    cluster.sim.node_down("control03", since_seconds=600)
    snapshot = await reader.read("control01")
    assert snapshot.facts.cluster.control_plane_ready == 2
    assert reader.nodes.nodes["control03"].ready is True


# Measured in an interpreter of its own: in a process that has run a thousand other tests,
# what the index keeps cannot be told apart from what those tests' caches and threads keep.
MEASURE = """
import tracemalloc
from nodefence.kube.client import KubeClient
from nodefence.kube.node_index import NodeIndex
from nodefence_sim.scale import realistic_node

count = 2000
index = NodeIndex(KubeClient.__new__(KubeClient))
tracemalloc.start()
before = tracemalloc.take_snapshot()
for n in range(count):
    node = realistic_node(f"node-{n:05d}")
    node["metadata"]["resourceVersion"] = str(n + 1)
    index._apply({"type": "ADDED", "object": node})
after = tracemalloc.take_snapshot()
kept = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
assert len(index.nodes) == count, len(index.nodes)
print(kept / count)
"""


def test_memory_per_node_is_bounded() -> None:
    """A Node of realistic size (~9 KB of JSON) costs the index a few hundred bytes."""
    done = subprocess.run(
        [sys.executable, "-c", MEASURE], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    per_node = float(done.stdout.strip())
    assert per_node < 1024, f"{per_node:.0f} bytes per node"
