"""The read-only background probe of ``nodefence serve``: whether each inventory node's proof path
works, known before the node dies.

Every ``NODEFENCE_FENCING_PROBE_INTERVAL`` seconds (jittered, so replicas drift apart) each node's
power state is read through its entry's driver, a bounded number at a time; a read is a
``status`` and nothing else, never a power action. ``nodefence_fencing_ready{node,driver}`` is 1
when the node's BMC or agent answered On or Off and 0 otherwise, and
``nodefence_fencing_probe_timestamp_seconds{node,driver}`` says when it was last read, so the
shipped alert ``NodefenceFencingUnavailable`` can tell a failing path from a probe that stopped.
Each round is also written to the ConfigMap ``nodefence-fencing-probes`` (``probe_record``), each
answer dated on the API server's clock, so ``nodefence status`` shows every node's last probe.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable

import structlog
from prometheus_client import CollectorRegistry, Gauge

from nodefence.background.periodic import Periodic
from nodefence.fencing import probe_record
from nodefence.fencing.check import NodeCheck, read_node
from nodefence.fencing.inventory import Inventory
from nodefence.kube.backoff import jittered
from nodefence.kube.client import Deadline, KubeClient

log = structlog.get_logger(__name__)

JITTER = 0.1
PROBE_CONCURRENCY = 4
PROBE_TIMEOUT_SECONDS = 30.0
# The first round comes soon after the start, not a whole interval later: a replica that starts
# with a wrong password says so within minutes.
FIRST_ROUND_SECONDS = (5.0, 60.0)


class ProbeMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.ready = Gauge(
            "nodefence_fencing_ready",
            "1 when the node's BMC or fence agent answered the last read-only power-state probe "
            "(proof can be had), 0 when it did not",
            ["node", "driver"],
            registry=registry,
        )
        self.timestamp = Gauge(
            "nodefence_fencing_probe_timestamp_seconds",
            "Unix time of the last read-only power-state probe of the node",
            ["node", "driver"],
            registry=registry,
        )

    def observe(self, checks: list[NodeCheck], now: float) -> None:
        for check in checks:
            driver = check.driver or "none"
            self.ready.labels(check.node, driver).set(1 if check.answered else 0)
            self.timestamp.labels(check.node, driver).set(now)


class FencingProbe:
    name = "fencing-probe"

    def __init__(
        self,
        inventory: Inventory | None,
        metrics: ProbeMetrics,
        *,
        interval: float,
        concurrency: int = PROBE_CONCURRENCY,
        timeout: float = PROBE_TIMEOUT_SECONDS,
        wall_clock: Callable[[], float] = time.time,
        first_round: tuple[float, float] = FIRST_ROUND_SECONDS,
        kube: KubeClient | None = None,
        namespace: str = "nodefence",
        identity: str = "",
        deadline_seconds: float = 30.0,
    ) -> None:
        self.inventory = inventory
        self.metrics = metrics
        self.interval = interval
        self.concurrency = concurrency
        self.timeout = timeout
        self.wall_clock = wall_clock
        self.first_round = first_round
        # Where each round is recorded for ``status``; None (dry-run, S8): nowhere.
        self.kube = kube
        self.namespace = namespace
        self.identity = identity
        self.deadline_seconds = deadline_seconds
        self.rounds = 0
        self.last: list[NodeCheck] = []
        self.periodic = Periodic(self.name, self.probe_once, self.next_delay, period=interval)

    @property
    def enabled(self) -> bool:
        return self.interval > 0 and self.inventory is not None and bool(self.inventory.nodes)

    async def probe_once(self) -> list[NodeCheck]:
        """One round over every inventory node: status reads only."""
        if self.inventory is None:
            return []
        answers = await self._read_all(self.inventory)
        checks = [check for check, _ in answers]
        self.metrics.observe(checks, self.wall_clock())
        self.rounds += 1
        self.last = checks
        for check in checks:
            if not check.answered:
                log.warning(
                    "fencing_probe_failed",
                    node=check.node,
                    driver=check.driver,
                    target=check.target,
                    error=check.error,
                )
        log.info(
            "fencing_probe",
            nodes=len(checks),
            answered=sum(1 for c in checks if c.answered),
        )
        await self._record(answers)
        return checks

    async def _read_all(self, inventory: Inventory) -> list[tuple[NodeCheck, float]]:
        """Every node read, a bounded number at a time, each with the monotonic time its answer
        came (mapped onto the API server's clock when the round is recorded)."""
        limit = asyncio.Semaphore(max(1, self.concurrency))
        timeout = min(self.timeout, max(1.0, self.interval))

        async def one(node: str) -> tuple[NodeCheck, float]:
            async with limit:
                check = await read_node(inventory, node, timeout)
                return check, time.monotonic()

        return list(await asyncio.gather(*(one(node) for node in sorted(inventory.nodes))))

    async def _record(self, answers: list[tuple[NodeCheck, float]]) -> None:
        """The round in the cluster for ``status``; a failed write is logged and the next round
        writes again (the metrics above already hold this round)."""
        if self.kube is None:
            return
        try:
            await probe_record.write_round(
                self.kube,
                self.namespace,
                answers,
                interval_seconds=self.interval,
                by=self.identity,
                inventory=self.inventory,
                deadline=Deadline(self.deadline_seconds),
            )
        except Exception as exc:
            log.warning(
                "fencing_probe_not_recorded",
                configmap=f"{self.namespace}/{probe_record.CONFIGMAP}",
                error=str(exc) or type(exc).__name__,
            )

    def describe(self) -> str:
        return self.periodic.describe() if self.enabled else "off"

    def start(self) -> None:
        if self.enabled:
            self.periodic.start()

    async def stop(self) -> None:
        """A round in progress is cut: it only reads, and the next round reads again."""
        await self.periodic.stop()

    def next_delay(self, first: bool) -> float:
        if first:
            low, high = self.first_round
            return random.uniform(min(low, self.interval), min(high, self.interval))  # noqa: S311
        return jittered(self.interval, JITTER)
