"""Every background loop of a serving receiver, started and stopped together.

The workers are named, so the start-up log line says what runs and how often; ``stop`` stops
them side by side, each with its own grace (a reconcile pass in progress may finish, a probe
round is cut).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol

import structlog

log = structlog.get_logger(__name__)


class Worker(Protocol):
    """A background loop."""

    @property
    def name(self) -> str:
        """What the log calls it."""

    def describe(self) -> str:
        """How often it works, in words (``every 60 s``, ``list, then watch``, ``off``)."""

    def start(self) -> None:
        """Begin in the background; at most once."""

    async def stop(self) -> None:
        """End; whatever it was doing is redone by its next start or another replica."""


class Runner:
    def __init__(self, workers: Sequence[Worker]) -> None:
        self.workers = tuple(workers)

    def start(self) -> None:
        for worker in self.workers:
            worker.start()
        log.info("background_started", workers={w.name: w.describe() for w in self.workers})

    async def stop(self) -> None:
        await asyncio.gather(*(worker.stop() for worker in self.workers))
