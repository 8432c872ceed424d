"""What a serving replica keeps fresh in the background, off the request path: the pause switch,
and now and then which nodes nodefence has fenced (from the fence record, so a restarted replica
reports them too)."""

from __future__ import annotations

import asyncio

import structlog

from nodefence.engine import record as fence_record
from nodefence.errors import ClusterUnavailableError
from nodefence.kube.client import Deadline, KubeError
from nodefence.kube.facts import PAUSE_REFRESH_SECONDS, FactsReader
from nodefence.observability.metrics import Metrics
from nodefence.shell.volume_gauge import publish_unreleased_volumes

log = structlog.get_logger(__name__)

FENCED_GAUGE_SECONDS = 60.0
CLOSE_WAIT_SECONDS = 5.0


async def read_fence_record(reader: FactsReader, deadline: Deadline) -> fence_record.FenceRecord:
    return fence_record.from_configmap((await reader.record(deadline)).body)[0]


class BackgroundRefresh:
    def __init__(self, reader: FactsReader, metrics: Metrics) -> None:
        self.reader = reader
        self.metrics = metrics
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    def start(self) -> None:
        """Once; never again after ``stop``."""
        if self._task is not None or self._closing:
            return
        self._task = asyncio.create_task(self._refresh(), name="background-refresh")

    async def stop(self) -> None:
        """The loop also checks ``_closing``: Python 3.11's ``wait_for`` can swallow a cancel
        that races a reply, so cancelling alone could leave it running and shutdown waiting."""
        self._closing = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait({self._task}, timeout=CLOSE_WAIT_SECONDS)

    async def _refresh(self) -> None:
        since_gauges = FENCED_GAUGE_SECONDS
        while not self._closing:
            try:
                if since_gauges >= FENCED_GAUGE_SECONDS:
                    since_gauges = 0.0
                    await self._publish_fenced(Deadline(PAUSE_REFRESH_SECONDS))
                    await publish_unreleased_volumes(
                        self.reader.kube, self.reader.namespace, self.metrics
                    )
                await self.reader.refresh_pause(Deadline(PAUSE_REFRESH_SECONDS))
                since = self.reader.pause.since
                self.metrics.pause_is(
                    (since.timestamp() if since else 0.0) if self.reader.pause.paused else None
                )
            except (ClusterUnavailableError, KubeError) as exc:
                log.warning("background_refresh_failed", error=str(exc))
            await asyncio.sleep(PAUSE_REFRESH_SECONDS)
            since_gauges += PAUSE_REFRESH_SECONDS

    async def _publish_fenced(self, deadline: Deadline) -> None:
        held = await read_fence_record(self.reader, deadline)
        self.metrics.fenced_nodes_are(
            {
                e.node: e.fenced_at.timestamp()
                for e in held.entries
                if e.phase is fence_record.Phase.FENCED and e.fenced_at is not None
            }
        )
        # Held for a person while the record says so, by whichever replica found it.
        self.metrics.contradicted_nodes_are(
            {
                e.node: e.proof_contradicted_at.timestamp()
                for e in held.entries
                if e.proof_contradicted_at is not None
            }
        )
