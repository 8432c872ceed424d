"""The process's rate limit on the Kubernetes API and the shared GETs, against the simulated API
server where requests go out: the writes of a fence in progress are served before reads for
refusals, a request that cannot be served before its deadline is a 503 Alertmanager retries,
and concurrent GETs of one object are one request on the wire (counted in the simulator's own
request log, ``GET /sim/v1/requests``)."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from nodefence.errors import ClusterUnavailableError
from nodefence.kube.client import Deadline, KubeClient, load_api_client
from nodefence.kube.convert import node_facts
from nodefence.kube.ratelimit import (
    Priority,
    RateLimiter,
    build_limiter,
    read_priority,
    reads_at,
)
from nodefence.settings import Settings
from nodefence.shell.machine_binding import live_twins
from nodefence_sim.testing import SimulatorHandle


async def wire_requests(cluster: SimulatorHandle, since: int) -> list[dict[str, Any]]:
    """The simulator's request log since ``since``, read as any client reads it."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{cluster.url}/sim/v1/requests", params={"since": str(since)}) as reply,
    ):
        body = await reply.json()
    return list(body["requests"])


async def left(cluster: SimulatorHandle, since: int, path: str) -> None:
    """Until the API server has received a GET of ``path`` sent after ``since`` (not a fixed
    pause, which a busy machine can outlast before the request is even sent)."""
    deadline = asyncio.get_running_loop().time() + 60
    while not any(r.method == "GET" and r.path == path for r in cluster.faults.requests(since)):
        assert asyncio.get_running_loop().time() < deadline, f"no GET {path} sent"
        await asyncio.sleep(0.01)


async def test_fence_writes_go_before_live_reads_before_refusal_reads() -> None:
    limiter = RateLimiter(50, 1, keep_order=True)
    await limiter.acquire(Priority.REFUSAL)  # the burst is spent: everyone else queues
    queued = [Priority.REFUSAL] * 3 + [Priority.LIVE] * 3 + [Priority.FENCE] * 3
    await asyncio.gather(*(limiter.acquire(p, 30.0) for p in queued))
    served = limiter.stats.order[1:]
    assert served == sorted(queued), served
    assert limiter.stats.queued == len(queued)


async def test_a_fence_in_progress_spends_its_own_allowance_and_leaves_the_bucket_to_reads() -> (
    None
):
    limiter = RateLimiter(0.01, 1, fence_qps=0.01, fence_burst=100)
    # A hundred purge deletes go out at once, on the fence's own allowance...
    await asyncio.gather(*(limiter.acquire(Priority.FENCE, 30.0) for _ in range(100)))
    assert limiter.stats.fence_allowance_used == 100
    # ...and the read the settle step makes meanwhile still finds the shared bucket.
    await limiter.acquire(Priority.LIVE, 0.0)
    # Once both are spent, a fence write waits like anyone else.
    with pytest.raises(ClusterUnavailableError, match="rate limit"):
        await limiter.acquire(Priority.FENCE, 5.0)
    with pytest.raises(ClusterUnavailableError, match="rate limit"):
        await limiter.acquire(Priority.REFUSAL, 5.0)


async def test_a_request_that_cannot_be_served_before_its_deadline_is_refused_at_once() -> None:
    limiter = RateLimiter(0.01, 2)
    await limiter.acquire(Priority.LIVE)
    await limiter.acquire(Priority.LIVE)
    with pytest.raises(ClusterUnavailableError, match="deadline"):
        await limiter.acquire(Priority.LIVE, 10.0)
    assert limiter.stats.refused == 1
    assert limiter.stats.queued == 0  # refused on the estimate, never parked in the queue


def test_settings_defaults_are_a_controllers_and_zero_turns_the_limit_off() -> None:
    settings = Settings(auth_disabled=True)
    assert (settings.api_qps, settings.api_burst) == (20, 30)
    limiter = build_limiter(
        settings.api_qps, settings.api_burst, settings.api_fence_qps, settings.api_fence_burst
    )
    assert limiter is not None
    assert (limiter.qps, limiter.burst) == (20, 30)
    assert build_limiter(0, 30, 500, 500) is None


async def test_concurrent_gets_of_one_object_are_one_request_each_caller_its_own_copy(
    cluster: SimulatorHandle,
) -> None:
    kube = KubeClient(await load_api_client(str(cluster.kubeconfig)))
    try:
        cluster.faults.slow(0.3, verbs=("get",), path="/api/v1/nodes/*")
        since = cluster.faults.cursor
        replies = await asyncio.gather(
            *(kube.get_node("compute01", Deadline(30)) for _ in range(20))
        )
        on_wire = [
            r
            for r in await wire_requests(cluster, since)
            if r["method"] == "GET" and r["path"] == "/api/v1/nodes/compute01"
        ]
        assert len(on_wire) == 1, on_wire
        assert kube.flights.stats.joined == 19
        assert all(r.body["metadata"]["name"] == "compute01" for r in replies)
        replies[0].body["metadata"]["name"] = "changed by one caller"
        assert replies[1].body["metadata"]["name"] == "compute01"
        # Sequential reads are not shared: each one asks the API server again.
        since = cluster.faults.cursor
        await kube.get_node("compute01", Deadline(30))
        await kube.get_node("compute01", Deadline(30))
        again = [r for r in await wire_requests(cluster, since) if r["method"] == "GET"]
        assert len(again) == 2
    finally:
        await kube.close()


async def test_a_read_after_a_write_never_joins_a_read_sent_before_it(
    cluster: SimulatorHandle,
) -> None:
    kube = KubeClient(await load_api_client(str(cluster.kubeconfig)))
    try:
        cluster.faults.slow(0.5, verbs=("get",), path="/api/v1/nodes/*")
        since = cluster.faults.cursor
        before = asyncio.ensure_future(kube.get_node("compute01", Deadline(30)))
        await left(cluster, since, "/api/v1/nodes/compute01")
        node = (await kube.get_node("compute02", Deadline(30))).body
        node = (await kube.get_node("compute01", Deadline(30))).body  # joins ``before``
        node["metadata"].setdefault("labels", {})["written"] = "yes"
        await kube.replace_node("compute01", node, Deadline(30))
        after = await kube.get_node("compute01", Deadline(30))
        assert after.body["metadata"]["labels"]["written"] == "yes"
        await before
    finally:
        await kube.close()


async def test_reads_at_sets_the_priority_of_a_blocks_reads_and_of_the_tasks_it_starts() -> None:
    async def seen() -> Priority:
        return read_priority()

    assert read_priority() is Priority.LIVE
    with reads_at(Priority.REFUSAL):
        assert read_priority() is Priority.REFUSAL
        started = asyncio.ensure_future(seen())
    assert await started is Priority.REFUSAL
    assert read_priority() is Priority.LIVE


async def test_the_live_list_a_power_action_rests_on_goes_at_live_priority(
    cluster: SimulatorHandle,
) -> None:
    """The Nodes listed to find a node's cloned twins decide whether a power action goes out:
    they queue as a live read, even from a block whose reads are for refusals."""
    limiter = RateLimiter(1000, 1000, keep_order=True)
    kube = KubeClient(await load_api_client(str(cluster.kubeconfig)), limiter=limiter)
    try:
        node = node_facts((await kube.get_node("compute01", Deadline(30))).body)
        limiter.stats.order.clear()
        with reads_at(Priority.REFUSAL):
            assert await live_twins(kube, node, Deadline(30)) == ()
    finally:
        await kube.close()
    assert limiter.stats.order, "nothing was listed"
    assert set(limiter.stats.order) == {Priority.LIVE}, limiter.stats.order
