"""The process's client-side rate limit on the Kubernetes API, as client-go has one.

nodefence is called hardest when the cluster is weakest: a rack or zone outage sends one webhook
per dead node while the API server is busy with the node lifecycle controller's evictions. A
token bucket (``NODEFENCE_API_QPS`` requests a second, bursts of ``NODEFENCE_API_BURST``) bounds
what every request of the process together may send, and orders who goes first when they
queue:

1. ``FENCE``: the writes of a fence in progress (claim, power record, taint, confirm, purge,
   unfence, release). Once a fence has started, finishing it is what frees the node's pods, so
   it never waits behind reads. These are also the only requests with an allowance of their
   own (``NODEFENCE_API_FENCE_QPS``/``_BURST``), spent before the shared bucket: they are
   bounded by the fence budget (max fenced nodes, each fenced once), not by how many alerts
   arrive, a fence of a node with hundreds of stuck pods must not take minutes, and the reads
   it needs meanwhile must not find the shared bucket emptied by its deletes.
2. ``LIVE``: the live reads a decision that may act is made on.
3. ``REFUSAL``: what can only ever lead to a refusal or a report: the shared reads of the cached
   path, Events. They wait behind everything else.

A request that could not be served before its deadline is refused at once with
``ClusterUnavailableError``, the same 503 Alertmanager retries, instead of holding a webhook
until its deadline runs out. A 429 the API server sends back (with ``Retry-After``) is still
retried by ``KubeClient._dated`` after the time it asks for, each retry taking a token again.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import heapq
import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import IntEnum

from nodefence.errors import ClusterUnavailableError


class Priority(IntEnum):
    FENCE = 0
    LIVE = 1
    REFUSAL = 2


# The priority of the reads the current task sends (writes are classified by the client).
_READ_PRIORITY: contextvars.ContextVar[Priority] = contextvars.ContextVar(
    "nodefence_read_priority", default=Priority.LIVE
)


def read_priority() -> Priority:
    return _READ_PRIORITY.get()


@contextlib.contextmanager
def reads_at(priority: Priority) -> Iterator[None]:
    """Within the block, this task's reads (and the tasks it starts) queue at ``priority``."""
    token = _READ_PRIORITY.set(priority)
    try:
        yield
    finally:
        _READ_PRIORITY.reset(token)


@dataclass
class Bucket:
    rate: float
    capacity: float
    tokens: float
    stamp: float

    def refill(self, now: float) -> None:
        self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now

    def wait_for_one(self) -> float:
        """Seconds until a whole token is there (0 if one is)."""
        if self.tokens >= 1.0:
            return 0.0
        return (1.0 - self.tokens) / self.rate if self.rate > 0 else float("inf")


@dataclass(order=True)
class _Waiter:
    priority: int
    seq: int
    future: asyncio.Future[None] = field(compare=False)


@dataclass
class LimiterStats:
    """Counts for tests and metrics: how many requests waited, and how many were refused."""

    granted: int = 0
    queued: int = 0
    refused: int = 0
    fence_allowance_used: int = 0
    order: list[Priority] = field(default_factory=list)


class RateLimiter:
    """A token bucket shared by every request of the process, served in priority order."""

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        fence_qps: float = 0.0,
        fence_burst: int = 0,
        clock: Callable[[], float] = time.monotonic,
        keep_order: bool = False,
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("the API rate limit needs qps > 0 and burst >= 1")
        now = clock()
        self.qps = qps
        self.burst = burst
        self.shared = Bucket(qps, float(burst), float(burst), now)
        self.fence = Bucket(fence_qps, float(fence_burst), float(fence_burst), now)
        self.clock = clock
        self.stats = LimiterStats()
        self._keep_order = keep_order
        self._waiting: list[_Waiter] = []
        self._seq = itertools.count()
        self._pump: asyncio.Task[None] | None = None

    def _take(self, priority: Priority) -> bool:
        now = self.clock()
        self.shared.refill(now)
        self.fence.refill(now)
        if priority is Priority.FENCE and self.fence.tokens >= 1.0:
            # A fence's writes spend their own allowance first, so the reads it needs meanwhile
            # (the settle step's, other alerts') still find the shared bucket.
            self.fence.tokens -= 1.0
            self.stats.fence_allowance_used += 1
        elif self.shared.tokens >= 1.0:
            self.shared.tokens -= 1.0
        else:
            return False
        self.stats.granted += 1
        if self._keep_order:
            self.stats.order.append(priority)
        return True

    def _ahead_of(self, priority: Priority) -> int:
        return sum(1 for w in self._waiting if w.priority <= priority and not w.future.done())

    def _estimate(self, priority: Priority) -> float:
        """Seconds until a request queued now at ``priority`` would be served (lower bound)."""
        needed = self._ahead_of(priority) + 1 - self.shared.tokens
        if priority is Priority.FENCE:
            needed -= self.fence.tokens
            rate = self.qps + self.fence.rate
        else:
            rate = self.qps
        return max(0.0, needed / rate)

    async def acquire(self, priority: Priority, remaining: float | None = None) -> None:
        """Wait for a token; ``remaining`` is the seconds the caller may still wait. Raises
        ``ClusterUnavailableError`` when it cannot be served within them."""
        if not self._ahead_of(priority) and self._take(priority):
            return
        if remaining is not None and self._estimate(priority) > remaining:
            self.stats.refused += 1
            raise ClusterUnavailableError(
                f"Kubernetes API: nodefence's own rate limit ({self.qps:g} requests/s, "
                f"burst {self.burst}) cannot serve this request within its deadline"
            )
        self.stats.queued += 1
        waiter = _Waiter(int(priority), next(self._seq), asyncio.get_running_loop().create_future())
        heapq.heappush(self._waiting, waiter)
        self._wake()
        try:
            if remaining is None:
                await waiter.future
            else:
                async with asyncio.timeout(remaining):
                    await waiter.future
        except TimeoutError:
            self.stats.refused += 1
            raise ClusterUnavailableError(
                f"Kubernetes API: no slot under nodefence's own rate limit ({self.qps:g} "
                f"requests/s, burst {self.burst}) before the deadline"
            ) from None
        finally:
            if not waiter.future.done():
                waiter.future.cancel()

    def _wake(self) -> None:
        if self._pump is None or self._pump.done():
            self._pump = asyncio.get_running_loop().create_task(self._serve())

    async def _serve(self) -> None:
        """Hand tokens to the waiters, highest priority first, as the buckets refill."""
        while self._waiting:
            head = self._waiting[0]
            if head.future.done():  # gave up (deadline or cancel)
                heapq.heappop(self._waiting)
                continue
            priority = Priority(head.priority)
            if self._take(priority):
                heapq.heappop(self._waiting)
                head.future.set_result(None)
                continue
            pause = self.shared.wait_for_one()
            if priority is Priority.FENCE:
                pause = min(pause, self.fence.wait_for_one())
            await asyncio.sleep(max(pause, 0.001))


def build_limiter(qps: float, burst: int, fence_qps: float, fence_burst: int) -> RateLimiter | None:
    """The limiter for the settings; ``qps`` 0 means unlimited (no limiter at all)."""
    if qps <= 0:
        return None
    return RateLimiter(qps, burst, fence_qps=fence_qps, fence_burst=fence_burst)
