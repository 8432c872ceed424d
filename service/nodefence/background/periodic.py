"""One round of work every period, for the background loops that are not watches.

A round never overlaps the previous one (the next wait starts when a round ends); the wait is
cut short by ``stop``, so shutdown never waits out a period; a round that raises is logged and
the loop goes on, since the next round may well succeed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import structlog

log = structlog.get_logger(__name__)

# How long ``stop`` waits for a round it cancelled.
CANCEL_WAIT_SECONDS = 5.0


class Periodic:
    """``round`` after ``delay(True)`` seconds, then again ``delay(False)`` seconds after each
    round ends, until ``stop``."""

    def __init__(
        self,
        name: str,
        round_: Callable[[], Awaitable[object]],
        delay: Callable[[bool], float],
        *,
        period: float,
        grace: float = 0.0,
    ) -> None:
        self.name = name
        self.round = round_
        self.delay = delay
        self.period = period
        # How long ``stop`` lets a round in progress finish before cancelling it.
        self.grace = grace
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    @property
    def enabled(self) -> bool:
        return self.period > 0

    def describe(self) -> str:
        return f"every {self.period:g} s" if self.enabled else "off"

    def start(self) -> None:
        """Once; nothing when the period is 0."""
        if self.enabled and self._task is None and not self._stopping.is_set():
            self._task = asyncio.create_task(self._run(), name=self.name)

    async def stop(self, grace: float | None = None) -> None:
        """Let a round in progress finish (up to ``grace``, default the loop's own), then
        cancel it."""
        self._stopping.set()
        task, self._task = self._task, None
        if task is None:
            return
        wait = self.grace if grace is None else grace
        done, _ = await asyncio.wait({task}, timeout=wait) if wait > 0 else (set(), set())
        if not done:
            task.cancel()
            await asyncio.wait({task}, timeout=CANCEL_WAIT_SECONDS)

    async def _run(self) -> None:
        first = True
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.delay(first)):
                    await self._stopping.wait()
            first = False
            if self._stopping.is_set():
                return
            try:
                await self.round()
            except Exception:
                log.exception("background_round_failed", worker=self.name)
