"""One read for many (``kube.singleflight``), in itself: callers that come while a read is in
flight share it and its failure; a caller that gives up does not take it from the others; a
write makes later callers read again and wakes whoever waits for it."""

from __future__ import annotations

import asyncio

import pytest

from nodefence.errors import ClusterUnavailableError
from nodefence.kube.singleflight import SingleFlight


async def test_a_failure_is_shared_and_the_next_caller_reads_again() -> None:
    flights: SingleFlight[dict[str, int]] = SingleFlight()
    release = asyncio.Event()
    reads = 0

    async def failing() -> dict[str, int]:
        nonlocal reads
        reads += 1
        await release.wait()
        raise ClusterUnavailableError("down")

    waiting = [asyncio.ensure_future(flights.run("k", failing)) for _ in range(3)]
    await asyncio.sleep(0)
    release.set()
    outcomes = await asyncio.gather(*waiting, return_exceptions=True)
    assert all(isinstance(o, ClusterUnavailableError) for o in outcomes)
    assert reads == 1

    async def answering() -> dict[str, int]:
        nonlocal reads
        reads += 1
        return {"n": reads}

    assert await flights.run("k", answering) == {"n": 2}


async def test_a_caller_that_gives_up_leaves_the_read_to_the_others() -> None:
    flights: SingleFlight[dict[str, int]] = SingleFlight()
    release = asyncio.Event()

    async def slow() -> dict[str, int]:
        await release.wait()
        return {"n": 1}

    first = asyncio.ensure_future(flights.run("k", slow))
    second = asyncio.ensure_future(flights.run("k", slow))
    await asyncio.sleep(0)
    first.cancel()
    release.set()
    assert await second == {"n": 1}
    with pytest.raises(asyncio.CancelledError):
        await first
    assert (flights.stats.started, flights.stats.joined) == (1, 1)


async def test_a_write_makes_later_callers_read_again_and_wakes_its_waiters() -> None:
    flights: SingleFlight[int] = SingleFlight()
    release = asyncio.Event()
    reads = 0

    async def read() -> int:
        nonlocal reads
        reads += 1
        mine = reads
        await release.wait()
        return mine

    before = asyncio.ensure_future(flights.run("k", read))
    await asyncio.sleep(0)
    written = flights.written("k")
    flights.wrote("k")
    assert written.is_set()
    assert "k" in flights.last_write
    after = asyncio.ensure_future(flights.run("k", read))
    await asyncio.sleep(0)
    release.set()
    assert (await before, await after) == (1, 2)
