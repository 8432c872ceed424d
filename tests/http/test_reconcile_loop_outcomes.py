"""The receiver's own reconcile loop: how each pass ends is counted, the wait between passes is
jittered within bounds, and stopping lets a pass in progress finish or cuts it at the grace.
(The loop against the simulator, finishing real half-written fences, is in
tests/reliability/test_reconcile_loop.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nodefence.background.reconcile import ReconcileLoop
from nodefence.engine.model import Decision, Reason, Verdict
from nodefence.errors import ClusterUnavailableError
from nodefence.observability.metrics import Metrics


class Passes:
    """A reconciler whose passes do what the test says."""

    def __init__(self, behave: Callable[[], Awaitable[list[Decision]]]) -> None:
        self.behave = behave
        self.calls = 0

    async def reconcile(self) -> list[Decision]:
        self.calls += 1
        return await self.behave()


def counted(metrics: Metrics) -> dict[str, float]:
    return {
        f"{s.name}{dict(sorted(s.labels.items()))}": s.value
        for family in text_string_to_metric_families(metrics.exposition().decode())
        for s in family.samples
        if s.name.startswith("nodefence_reconcile") or s.name.startswith("nodefence_decisions")
    }


async def test_each_outcome_is_counted_and_only_ok_moves_the_last_success() -> None:
    metrics = Metrics()
    outcomes = iter(
        [
            ClusterUnavailableError("API down"),
            RuntimeError("a bug"),
            [Decision(Verdict.NOOP, "n1", (Reason("ownership", True, "nothing to do"),))],
        ]
    )

    async def behave() -> list[Decision]:
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    clock = iter([100.0, 200.0])
    loop = ReconcileLoop(
        Passes(behave), metrics, interval=60, deadline_seconds=5, wall_clock=lambda: next(clock)
    )
    loop.start()  # sets the interval and dates the loop's start; the first pass is a minute away
    assert counted(metrics)["nodefence_reconcile_last_success_timestamp_seconds{}"] == 100.0
    assert await loop.run_once() == "unavailable"
    assert await loop.run_once() == "error"
    assert counted(metrics)["nodefence_reconcile_last_success_timestamp_seconds{}"] == 100.0
    assert await loop.run_once() == "ok"
    await loop.stop()
    seen = counted(metrics)
    assert seen["nodefence_reconcile_passes_total{'outcome': 'unavailable'}"] == 1
    assert seen["nodefence_reconcile_passes_total{'outcome': 'error'}"] == 1
    assert seen["nodefence_reconcile_passes_total{'outcome': 'ok'}"] == 1
    assert seen["nodefence_reconcile_last_success_timestamp_seconds{}"] == 200.0
    assert seen["nodefence_reconcile_interval_seconds{}"] == 60
    assert seen["nodefence_decisions_total{'guard': 'ok', 'verdict': 'noop'}"] == 1


async def test_a_pass_over_its_deadline_is_cut_and_counted_unavailable() -> None:
    metrics = Metrics()
    never = asyncio.Event()

    async def hang() -> list[Decision]:
        await never.wait()
        return []

    loop = ReconcileLoop(Passes(hang), metrics, interval=60, deadline_seconds=0.05)
    assert await loop.run_once() == "unavailable"


@pytest.mark.parametrize("interval", [0.5, 60.0, 3600.0])
def test_the_wait_is_jittered_within_bounds(interval: float) -> None:
    loop = ReconcileLoop(
        Passes(lambda: asyncio.sleep(0, [])), Metrics(), interval=interval, deadline_seconds=5
    )
    waits = [loop.next_delay() for _ in range(500)]
    assert all(0.8 * interval <= w <= 1.2 * interval for w in waits)
    assert max(waits) - min(waits) > 0.2 * interval, "replicas started together must drift apart"
    firsts = [loop.next_delay(first=True) for _ in range(500)]
    assert all(0.2 * interval <= w <= interval for w in firsts)


async def test_a_zero_interval_starts_nothing() -> None:
    passes = Passes(lambda: asyncio.sleep(0, []))
    metrics = Metrics()
    loop = ReconcileLoop(passes, metrics, interval=0, deadline_seconds=5)
    loop.start()
    assert not loop.enabled
    await loop.stop()
    assert passes.calls == 0
    assert counted(metrics)["nodefence_reconcile_interval_seconds{}"] == 0


async def test_stop_lets_a_pass_finish_within_the_grace_and_cuts_it_after() -> None:
    entered, release = asyncio.Event(), asyncio.Event()
    finished: list[bool] = []

    async def slow() -> list[Decision]:
        entered.set()
        await release.wait()
        finished.append(True)
        return []

    loop = ReconcileLoop(Passes(slow), Metrics(), interval=0.01, deadline_seconds=30)
    loop.start()
    await asyncio.wait_for(entered.wait(), 30)
    stopping = asyncio.create_task(loop.stop(grace=30))
    release.set()
    await asyncio.wait_for(stopping, 30)
    assert finished == [True]

    entered.clear()
    release.clear()
    loop = ReconcileLoop(Passes(slow), Metrics(), interval=0.01, deadline_seconds=30)
    loop.start()
    await asyncio.wait_for(entered.wait(), 30)
    await asyncio.wait_for(loop.stop(grace=0.01), 30)
    assert finished == [True], "stop returned at the grace, without waiting for the pass"
