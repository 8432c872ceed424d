"""One way to follow a kind of object: list once, then watch from the list's resourceVersion.

It is what client-go's informers do, reduced to what nodefence needs; the node index
(``kube.node_index``) and the pause switch (``kube.pause_watch``) are its two users, each saying
only how to list, how to open the watch and what an event changes.

Freshness is stated, not assumed: ``heard_at`` is when the API server last confirmed what the
follower holds (a finished list, an event or bookmark, or a watch the server ended at its
``timeoutSeconds``). A stream that breaks resumes from the last resourceVersion seen, the
server replaying what was missed; a version the server can no longer replay (410 Gone) or any
other error answer makes it list again, after a backoff (``kube.backoff``).
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import aiohttp
import structlog

from nodefence.errors import ClusterUnavailableError
from nodefence.kube.backoff import Backoff
from nodefence.kube.client import KubeError, Stream
from nodefence.kube.watch_events import follow

log = structlog.get_logger(__name__)

# How long ``stop`` waits for a follower it cancelled.
STOP_WAIT_SECONDS = 5.0


class Informer(ABC):
    """A list followed by watches, for ever, until ``stop``."""

    # The task's name, e.g. ``node-index``; its log events begin with it (``node_index_...``).
    name: str = "informer"

    def __init__(self, backoff: Backoff, clock: Callable[[], float] = time.monotonic) -> None:
        self.backoff = backoff
        self.clock = clock
        self.resource_version = ""
        self.heard_at: float | None = None
        self.relists = 0
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def age(self) -> float | None:
        """Seconds since the API server last confirmed what is held; None before the first
        list."""
        return None if self.heard_at is None else self.clock() - self.heard_at

    def describe(self) -> str:
        return "list, then watch"

    def start(self) -> None:
        """Once; never again after ``stop``."""
        if self._task is None and not self._stopping:
            self._task = asyncio.create_task(self._follow(), name=self.name)

    async def stop(self) -> None:
        """Cancel the follower; the loop also checks ``_stopping``, so a cancel lost in a race
        with a reply cannot keep it running (nor ``stop`` waiting on it for more than 5 s)."""
        self._stopping = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task}, timeout=STOP_WAIT_SECONDS)

    async def _follow(self) -> None:
        failures = 0
        while not self._stopping:
            try:
                if not self.resource_version:
                    started = self.clock()
                    self.resource_version = await self.list()
                    self.relists += 1
                    # A list is a snapshot taken when its first page was served.
                    self.heard_at = started
                await follow(await self.watch(self.resource_version), self._apply)
                # Ended by the server at its timeout: everything until now was delivered.
                self.heard_at = self.clock()
                failures = 0
            except (ClusterUnavailableError, KubeError, aiohttp.ClientError, OSError) as exc:
                # TimeoutError (a silent stream) is an OSError.
                if isinstance(exc, KubeError):
                    # 410: too old to replay; anything else the server refused: list afresh.
                    self.resource_version = ""
                failures += 1
                pause = self.backoff.delay(failures)
                log.warning(
                    f"{self.name.replace('-', '_')}_interrupted",
                    error=str(exc) or type(exc).__name__,
                    relist=not self.resource_version,
                    retry_in=round(pause, 2),
                    detail=self.failure_detail(exc),
                )
                await asyncio.sleep(pause)

    def _apply(self, event: dict[str, Any]) -> None:
        version = self.apply(event)
        if version:
            self.resource_version = version
        self.heard_at = self.clock()

    @abstractmethod
    async def list(self) -> str:
        """Replace what is held by a fresh list; return the list's resourceVersion."""

    @abstractmethod
    async def watch(self, resource_version: str) -> Stream:
        """The watch from ``resource_version``."""

    @abstractmethod
    def apply(self, event: dict[str, Any]) -> str:
        """What one watch event changes; return the event object's resourceVersion (``""``
        for none)."""

    def failure_detail(self, exc: Exception) -> str | None:
        """What an operator should know about a failure beyond its message (None: nothing)."""
        del exc
        return None
