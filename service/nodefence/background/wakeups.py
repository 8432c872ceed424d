"""Decide again when a wait ends, and when the watch sees a node turn NotReady or Ready.

A refusal that names when its wait ends (``Reason.until``: the NotReady minimum, the Lease
window, the fallback's wait for an alert, the healthy delay, a flap window) would otherwise be
acted on only at the next delivery (Alertmanager's repeat) or reconcile pass, up to minutes
later, although the decision itself said when it could act. So a serving receiver arms one
wake-up per node at the earliest end its last refusal named, and judges the node again then
(``Fencer.judge_node``); the watch-fed node index starts a decision at once when a node turns
NotReady (the fallback's judgement before its window, which the machine's power state may end:
``engine.power_waits``) or Ready again (an unfence's gate). Alerts stay a trigger, the reconcile
pass stays the safety net; a wake-up is only an earlier look, with every guard, so silences,
exclusion and pause hold it exactly as they hold the alert path.

The time is the API server's (``until`` was judged on its clock; the delay is the difference to
the server's time as this process last read it), plus a random delay of up to
``JITTER_SECONDS`` so that replicas armed by the same refusal do not all decide at the same
instant. Armed wake-ups are bounded (``MAX_ARMED``, one per node, the newest refusal's); a
node past the bound waits for the next delivery or pass, as before. Nothing here survives a
restart, and nothing needs to: every replica's next pass sees the same refusals.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from datetime import datetime

import structlog

from nodefence.engine.model import Decision
from nodefence.errors import ClusterUnavailableError
from nodefence.http.decisions import DecisionLog, observe_decisions
from nodefence.kube.client import KubeError
from nodefence.observability.metrics import Metrics

log = structlog.get_logger(__name__)

MAX_ARMED = 1000
JITTER_SECONDS = 2.0
# A wait that has already ended is looked at again after this, not at once: a decision that
# still names it (a clock read a moment early) never spins. Each such arm in a row for the same
# node doubles it, up to PAST_DELAY_CAP_SECONDS, so a refusal that keeps naming a past end costs
# a judgement a minute at most.
MIN_DELAY_SECONDS = 1.0
PAST_DELAY_CAP_SECONDS = 60.0
# Longer waits (a flap window of hours) are left to the reconcile pass.
MAX_DELAY_SECONDS = 3600.0
# How long one judgement may take, as a multiple of the request deadline.
OVERRUN = 1.5
# Judgements at once: a power outage turns hundreds of nodes NotReady in the same seconds, and
# each judgement reads the fence record; the rest wait their turn.
CONCURRENT = 8

Judge = Callable[[str], Awaitable[Decision | None]]


def earliest_end(decision: Decision) -> datetime | None:
    """The earliest end any blocking guard named: deciding then either acts or learns the next
    end. None when the decision acted, or nothing holding it back ends on its own."""
    if decision.actions or decision.node is None:
        return None
    ends = [r.until for r in decision.reasons if not r.passed and r.until is not None]
    return min(ends) if ends else None


class Wakeups:
    """The armed wake-ups of one receiver, and the judgements they started."""

    name = "wake-ups"

    def __init__(
        self,
        judge: Judge,
        metrics: Metrics,
        server_now: Callable[[], datetime | None],
        *,
        deadline_seconds: float,
        decisions: DecisionLog | None = None,
        max_armed: int = MAX_ARMED,
    ) -> None:
        self.judge = judge
        self.metrics = metrics
        self.server_now = server_now
        self.deadline_seconds = deadline_seconds
        self.decisions = decisions
        self.max_armed = max_armed
        self.armed: dict[str, asyncio.TimerHandle] = {}
        self.running: dict[str, asyncio.Task[None]] = {}
        # A trigger that came while the node was being judged: judged again once that ends.
        self.again: set[str] = set()
        # Arms in a row at an end already past, per node (``PAST_DELAY_CAP_SECONDS``).
        self.past: dict[str, int] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._turns = asyncio.Semaphore(CONCURRENT)

    def describe(self) -> str:
        return f"at the end of a refusal's wait and on a node's Ready change (≤ {self.max_armed})"

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()

    async def stop(self) -> None:
        for handle in self.armed.values():
            handle.cancel()
        self.armed.clear()
        self.again.clear()
        self.past.clear()
        tasks = list(self.running.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._loop = None

    def after(self, decision: Decision) -> None:
        """Arm a wake-up for the decision's node at the earliest end of what holds it back."""
        end = earliest_end(decision)
        if end is not None and decision.node is not None:
            self.arm(decision.node, end)

    def arm(self, node: str, at: datetime) -> bool:
        """Judge ``node`` again at ``at`` (the API server's clock), replacing any wake-up armed
        for it; False when none is armed (not started, a wait too long, or the bound reached)."""
        now = self.server_now()
        if self._loop is None or now is None:
            return False
        delay = (at - now).total_seconds()
        if delay > MAX_DELAY_SECONDS:
            return False
        if delay < MIN_DELAY_SECONDS:
            times = self.past[node] = self.past.get(node, 0) + 1
            delay = min(PAST_DELAY_CAP_SECONDS, MIN_DELAY_SECONDS * 2 ** (times - 1))
        else:
            self.past.pop(node, None)
        if node not in self.armed and len(self.armed) >= self.max_armed:
            log.warning("wakeup_not_armed", node=node, armed=len(self.armed))
            return False
        self._cancel(node)
        delay += random.uniform(0, JITTER_SECONDS)  # noqa: S311
        self.armed[node] = self._loop.call_later(delay, self.now, node)
        self.metrics.wakeups_armed.set(len(self.armed))
        return True

    def now(self, node: str) -> None:
        """Judge ``node`` at once (the watch saw it change, or its wake-up came)."""
        self._cancel(node)
        if self._loop is None:
            return
        if node in self.running:
            self.again.add(node)
            return
        self.running[node] = self._loop.create_task(self._judge(node))

    def _cancel(self, node: str) -> None:
        handle = self.armed.pop(node, None)
        if handle is not None:
            handle.cancel()
        self.metrics.wakeups_armed.set(len(self.armed))

    async def _judge(self, node: str) -> None:
        try:
            async with self._turns, asyncio.timeout(self.deadline_seconds * OVERRUN):
                decision = await self.judge(node)
        except (ClusterUnavailableError, KubeError, TimeoutError) as exc:
            log.warning("wakeup_unavailable", node=node, error=str(exc) or type(exc).__name__)
            self.metrics.wakeup("unavailable")
            decision = None
        except Exception:
            log.exception("wakeup_failed", node=node)
            self.metrics.wakeup("error")
            decision = None
        else:
            self.metrics.wakeup("ok" if decision is not None else "nothing")
        finally:
            self.running.pop(node, None)
        if decision is not None:
            observe_decisions(self.metrics, self.decisions, [decision], "wake-up")
        if node in self.again:
            self.again.discard(node)
            self.now(node)
