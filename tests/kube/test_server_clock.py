"""The API server's clock between replies (``kube.server_clock``): what a refusal made without a
request is timed on. It follows the replies' Date headers, moves on by the monotonic clock, is
never moved back by a Date that lags its own estimate, and ignores what it cannot read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from nodefence.kube.server_clock import ServerClock


class Ticks:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_no_estimate_before_a_reply_carried_a_date() -> None:
    clock = ServerClock(Ticks())
    clock.saw(None)
    clock.saw("")
    clock.saw("not a date")
    clock.saw("Tue, 01 Dec 2026 16:00:00")  # no zone: not the API server's word on time
    assert clock.now() is None


def test_the_estimate_is_the_last_date_moved_on_by_the_monotonic_clock() -> None:
    ticks = Ticks()
    clock = ServerClock(ticks)
    clock.saw("Tue, 01 Dec 2026 16:00:00 GMT")
    ticks.now += 7.5
    assert clock.now() == datetime(2026, 12, 1, 16, 0, 7, 500000, tzinfo=UTC)


def test_a_date_behind_the_estimate_never_moves_it_back_and_a_later_one_moves_it_on() -> None:
    ticks = Ticks()
    clock = ServerClock(ticks)
    clock.saw("Tue, 01 Dec 2026 16:00:00 GMT")
    ticks.now += 2.6
    clock.saw("Tue, 01 Dec 2026 16:00:02 GMT")  # whole seconds: behind the estimate
    assert clock.now() == datetime(2026, 12, 1, 16, 0, 2, 600000, tzinfo=UTC)
    clock.saw("Tue, 01 Dec 2026 16:05:00 GMT")  # the server's clock was set forward
    assert clock.now() == datetime(2026, 12, 1, 16, 5, tzinfo=UTC)
    ticks.now += 1
    assert clock.now() == datetime(2026, 12, 1, 16, 5, tzinfo=UTC) + timedelta(seconds=1)
