"""The reconcile pass every serving receiver runs on its own, every ``NODEFENCE_RECONCILE_INTERVAL``
seconds.

What a lost or failed webhook left (a half-written fence, pods still Terminating, a recovered node
still tainted, an alert refused for a passing reason) is finished here, on the replicas
Prometheus scrapes, so what reconcile does shows in their metrics. Every replica runs it: no
leader is elected, because every write a pass makes carries its own precondition (the fence
record's resourceVersion for a claim, the node's uid and resourceVersion for a taint, a pod's UID
for a delete), so two replicas passing at once do the work of one (S3, S7). The interval is
jittered so that replicas started together drift apart instead of racing each other on every
pass; a pass never overlaps the previous one of the same replica (``background.periodic``).

After each pass the loop also publishes how many VolumeAttachments are still attached to each
node nodefence holds fenced (``shell.volume_gauge``), so a fence that left them shows within a
pass; the background refresh of every serving receiver (also one that runs no pass) does the
same every minute.

A receiver that scales to zero (Knative) runs no loop while it has no pod; there the reconcile
CronJob (``nodefence reconcile``) does the same work.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from typing import Protocol

import structlog

from nodefence.background.periodic import Periodic
from nodefence.engine.model import Decision
from nodefence.errors import ClusterUnavailableError
from nodefence.http.decisions import DecisionLog, observe_decisions
from nodefence.kube.backoff import jittered
from nodefence.kube.client import KubeClient
from nodefence.observability.metrics import Metrics
from nodefence.shell.volume_gauge import publish_unreleased_volumes

log = structlog.get_logger(__name__)

JITTER = 0.2
OVERRUN = 1.5
# The first pass comes within the first interval, not at its end, so a replica started to
# replace a crashed one finishes what that one left without waiting a whole period.
FIRST_PASS_FRACTION = (0.2, 1.0)


class Reconciler(Protocol):
    async def reconcile(self) -> list[Decision]:
        """One pass; raises ClusterUnavailableError when the API stays unavailable."""


class ReconcileLoop:
    name = "reconcile-loop"

    def __init__(
        self,
        fencer: Reconciler,
        metrics: Metrics,
        *,
        interval: float,
        deadline_seconds: float,
        decisions: DecisionLog | None = None,
        kube: KubeClient | None = None,
        namespace: str = "nodefence",
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.fencer = fencer
        self.metrics = metrics
        self.interval = interval
        self.deadline_seconds = deadline_seconds
        self.decisions = decisions
        self.kube = kube
        self.namespace = namespace
        self.wall_clock = wall_clock
        self.passes = 0
        self.periodic = Periodic(
            self.name, self.run_once, self.next_delay, period=interval, grace=deadline_seconds
        )

    @property
    def enabled(self) -> bool:
        return self.periodic.enabled

    def describe(self) -> str:
        return self.periodic.describe()

    def start(self) -> None:
        self.metrics.reconcile_interval.set(self.interval)
        if not self.enabled:
            return
        # Before the first pass, the alert on a stalled loop counts from the loop's start.
        self.metrics.reconcile_last_success.set(self.wall_clock())
        self.periodic.start()
        log.info("reconcile_loop_started", interval_seconds=self.interval)

    async def stop(self, grace: float | None = None) -> None:
        """Let a pass in progress finish (up to ``grace``, default one pass's deadline), then
        cancel it: every write it makes is idempotent, the next pass of any replica redoes what
        was cut off."""
        await self.periodic.stop(grace)

    def next_delay(self, first: bool = False) -> float:
        if first:
            return self.interval * random.uniform(*FIRST_PASS_FRACTION)  # noqa: S311
        return jittered(self.interval, JITTER)

    async def run_once(self) -> str:
        """One pass, counted by its outcome: ``ok``, ``unavailable`` (the API stayed
        unavailable or the pass ran out of time) or ``error``."""
        self.passes += 1
        try:
            # The pass keeps its own deadline (the request deadline, as POST /reconcile); this
            # one only cuts a pass that hangs past it, so the loop goes on.
            async with asyncio.timeout(self.deadline_seconds * OVERRUN):
                decisions = await self.fencer.reconcile()
        except (ClusterUnavailableError, TimeoutError) as exc:
            log.warning("reconcile_pass_unavailable", error=str(exc) or type(exc).__name__)
            self.metrics.reconcile_pass("unavailable")
            return "unavailable"
        except Exception:
            log.exception("reconcile_pass_failed")
            self.metrics.reconcile_pass("error")
            return "error"
        observe_decisions(self.metrics, self.decisions, decisions, "reconcile-loop")
        self.metrics.reconcile_pass("ok", self.wall_clock())
        acted = [d for d in decisions if d.results]
        log.info("reconcile_pass", decisions=len(decisions), acted=len(acted))
        await self.publish_volumes()
        return "ok"

    async def publish_volumes(self) -> None:
        if self.kube is not None:
            await publish_unreleased_volumes(self.kube, self.namespace, self.metrics)
