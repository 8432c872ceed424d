"""The API server's clock between replies: the ``Date`` of the latest reply, moved on by this
process's monotonic clock.

A decision that reads nothing (a refusal from the cache) is still timed on the API server's
clock (S11), never on this machine's wall clock, which may be minutes off. ``Date`` has whole
seconds and is sent when the reply leaves, so the estimate is at most about a second behind the
server's: every cached guard errs towards refusing a little longer, never towards acting.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta
from email.utils import parsedate_to_datetime


class ServerClock:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._anchor: tuple[datetime, float] | None = None

    def saw(self, header: str | None) -> None:
        """A reply's ``Date`` header (any status: a 404 carries the server's clock too)."""
        if not header:
            return
        try:
            moment = parsedate_to_datetime(header)
        except (TypeError, ValueError):
            return
        if moment.tzinfo is None:
            return
        now = self.clock()
        if self._anchor is None or moment >= self.now_at(now):
            self._anchor = (moment, now)

    def now_at(self, mono: float) -> datetime:
        assert self._anchor is not None
        moment, at = self._anchor
        return moment + timedelta(seconds=mono - at)

    def now(self) -> datetime | None:
        """The API server's clock now, or None before any reply carried a ``Date``."""
        return None if self._anchor is None else self.now_at(self.clock())

    @property
    def anchored_at(self) -> float | None:
        """When (monotonic) the latest ``Date`` that moved the estimate arrived."""
        return None if self._anchor is None else self._anchor[1]
