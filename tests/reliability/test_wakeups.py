"""The wake-ups (``background.wakeups``) on their own: one per node at the earliest end a
refusal named, on the API server's clock; bounded; a trigger during a judgement judges again
after it; a judgement that fails never stops the others; stop cancels what is armed."""

from __future__ import annotations

import asyncio
import itertools
from datetime import UTC, datetime, timedelta

from nodefence.background import wakeups as wakeups_module
from nodefence.background.wakeups import Wakeups, earliest_end
from nodefence.engine.model import Decision, Reason, Verdict
from nodefence.errors import ClusterUnavailableError
from nodefence.observability.metrics import Metrics

SERVER_NOW = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)


def refusal(node: str, *ends: float | None) -> Decision:
    """A refusal held back by one guard per end (seconds from the server's now; None: none)."""
    reasons = tuple(
        Reason(
            "not-ready-duration",
            False,
            "wait",
            None if e is None else SERVER_NOW + timedelta(seconds=e),
        )
        for e in ends
    )
    return Decision(Verdict.NOOP, node, reasons)


class Judged:
    def __init__(self) -> None:
        self.nodes: list[str] = []
        self.seen = asyncio.Event()
        self.gate: asyncio.Event | None = None
        self.fail: set[str] = set()

    async def __call__(self, node: str) -> Decision | None:
        self.nodes.append(node)
        self.seen.set()
        if self.gate is not None:
            await self.gate.wait()
        if node in self.fail:
            raise ClusterUnavailableError("the API server is unavailable")
        return None


def make(judged: Judged, **kw: object) -> tuple[Wakeups, Metrics]:
    metrics = Metrics()
    made = Wakeups(judged, metrics, lambda: SERVER_NOW, deadline_seconds=5, **kw)  # type: ignore[arg-type]
    made.start()
    return made, metrics


async def until(condition: object, within: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not condition():  # type: ignore[operator]
        assert asyncio.get_running_loop().time() < deadline, "not met in time"
        await asyncio.sleep(0.01)


def test_the_earliest_end_of_a_refusal_and_none_for_an_action_or_no_end() -> None:
    assert earliest_end(refusal("n1", 30, 5, None)) == SERVER_NOW + timedelta(seconds=5)
    assert earliest_end(refusal("n1", None)) is None
    assert earliest_end(Decision(Verdict.NOOP, "n1", ())) is None


async def test_a_wake_up_comes_at_the_end_and_replaces_the_earlier_one(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(wakeups_module, "JITTER_SECONDS", 0.0)
    monkeypatch.setattr(wakeups_module, "MIN_DELAY_SECONDS", 0.0)
    judged = Judged()
    made, metrics = make(judged)
    try:
        made.after(refusal("n1", 3600 * 2))  # beyond the bound: left to the pass
        assert made.armed == {}
        made.after(refusal("n1", 600))
        assert set(made.armed) == {"n1"}
        made.after(refusal("n1", -5))  # a wait already over: judged at once, replacing it
        await asyncio.wait_for(judged.seen.wait(), 10)
        assert judged.nodes == ["n1"]
        await until(lambda: metrics.wakeups.labels("nothing")._value.get() == 1)
        assert made.armed == {}
    finally:
        await made.stop()


async def test_armed_wake_ups_are_bounded_and_stop_cancels_them() -> None:
    judged = Judged()
    made, metrics = make(judged, max_armed=2)
    made.after(refusal("n1", 600))
    made.after(refusal("n2", 600))
    made.after(refusal("n3", 600))
    assert set(made.armed) == {"n1", "n2"}
    assert metrics.wakeups_armed._value.get() == 2
    made.after(refusal("n1", 300))  # a node already armed may move
    assert set(made.armed) == {"n1", "n2"}
    await made.stop()
    assert made.armed == {}
    assert judged.nodes == []


async def test_a_trigger_during_a_judgement_judges_again_after_it_and_a_failure_is_counted() -> (
    None
):
    judged = Judged()
    judged.gate = asyncio.Event()
    judged.fail = {"n1"}
    made, metrics = make(judged)
    try:
        made.now("n1")
        await asyncio.wait_for(judged.seen.wait(), 10)
        made.now("n1")  # the watch again while n1 is judged: once more, after
        made.now("n2")
        judged.gate.set()
        await until(lambda: judged.nodes.count("n1") == 2 and "n2" in judged.nodes)
        await until(lambda: metrics.wakeups.labels("unavailable")._value.get() == 2)
        assert metrics.wakeups.labels("nothing")._value.get() == 1
    finally:
        await made.stop()


async def test_a_refusal_that_keeps_naming_a_past_end_is_looked_at_less_and_less_often() -> None:
    judged = Judged()
    made, _metrics = make(judged)
    try:
        delays = []
        for _ in range(9):
            assert made.arm("n1", SERVER_NOW)
            handle = made.armed["n1"]
            delays.append(handle.when() - asyncio.get_running_loop().time())
        # 1, 2, 4, ... s (plus up to 2 s of jitter), never more than a minute and the jitter.
        assert delays[0] < 1 + 2 + 0.5
        assert all(later > earlier - 2.5 for earlier, later in itertools.pairwise(delays))
        assert 60 - 0.5 < delays[-1] < 60 + 2 + 0.5
        # A future end resets the count.
        assert made.arm("n1", SERVER_NOW + timedelta(seconds=30))
        assert made.past == {}
    finally:
        await made.stop()
