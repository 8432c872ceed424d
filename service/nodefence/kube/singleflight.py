"""One read for many: concurrent GETs of the same object share one request in flight.

In a storm, fifty webhooks at once each want the fence record ConfigMap, the pause switch, or
the same node; the answer the API server would give each of them within the same round trip is
the same answer. The first caller's request is run as its own task, so a caller that gives up
(its webhook's client went away) does not cancel it for the others; every caller gets its own
deep copy of the body, so no caller can change what another reads. Only GETs are shared, keyed
by their URL and query: a write is never merged with another.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass
class FlightStats:
    """How many callers were served by a request another caller had already sent."""

    started: int = 0
    joined: int = 0


class SingleFlight(Generic[T]):
    def __init__(self) -> None:
        self._flights: dict[str, asyncio.Future[T]] = {}
        self._written: dict[str, asyncio.Event] = {}
        # When (monotonic) a write of each object last returned.
        self.last_write: dict[str, float] = {}
        self.stats = FlightStats()

    async def run(self, key: str, read: Callable[[], Awaitable[T]]) -> T:
        flight = self._flights.get(key)
        if flight is None:
            self.stats.started += 1
            flight = asyncio.ensure_future(read())
            self._flights[key] = flight
            flight.add_done_callback(functools.partial(self._land, key))
        else:
            self.stats.joined += 1
        return copy.deepcopy(await asyncio.shield(flight))

    def forget(self, key: str) -> None:
        """Callers from now on send a request of their own (the object is being written);
        those already waiting keep the request they joined."""
        self._flights.pop(key, None)

    def written(self, key: str) -> asyncio.Event:
        """Set once the next write of the object behind ``key`` has returned."""
        return self._written.setdefault(key, asyncio.Event())

    def wrote(self, key: str) -> None:
        """A write of the object behind ``key`` returned: later reads send their own request,
        and whoever waits for it is woken."""
        self.forget(key)
        self.last_write[key] = time.monotonic()
        event = self._written.pop(key, None)
        if event is not None:
            event.set()

    def _land(self, key: str, flight: asyncio.Future[T]) -> None:
        if self._flights.get(key) is flight:
            del self._flights[key]
        if not flight.cancelled():
            # Retrieved here so that a failure nobody waited for any more is not logged as
            # "exception was never retrieved"; the callers still waiting get it from ``shield``.
            flight.exception()
