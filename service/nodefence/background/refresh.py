"""What a serving replica keeps fresh in the background, off the request path: the pause switch,
and now and then which nodes nodefence has fenced (from the fence record, so a restarted replica
reports them too)."""

from __future__ import annotations

import structlog

from nodefence.background.periodic import Periodic
from nodefence.engine import record as fence_record
from nodefence.errors import ClusterUnavailableError
from nodefence.kube.client import Deadline, KubeError
from nodefence.kube.facts import PAUSE_REFRESH_SECONDS, FactsReader
from nodefence.observability.metrics import Metrics
from nodefence.shell.volume_gauge import publish_unreleased_volumes

log = structlog.get_logger(__name__)

FENCED_GAUGE_SECONDS = 60.0


class BackgroundRefresh:
    """The pause switch every ``PAUSE_REFRESH_SECONDS`` (from the watch while it is fresh, so
    most rounds cost no request), the fence gauges every ``FENCED_GAUGE_SECONDS``."""

    name = "background-refresh"

    def __init__(self, reader: FactsReader, metrics: Metrics) -> None:
        self.reader = reader
        self.metrics = metrics
        self._since_gauges = FENCED_GAUGE_SECONDS
        # The first round at once: a restarted replica reports what is fenced right away.
        self.periodic = Periodic(
            self.name,
            self.round,
            lambda first: 0.0 if first else PAUSE_REFRESH_SECONDS,
            period=PAUSE_REFRESH_SECONDS,
        )

    def describe(self) -> str:
        return f"{self.periodic.describe()}, fence gauges every {FENCED_GAUGE_SECONDS:g} s"

    def start(self) -> None:
        self.periodic.start()

    async def stop(self) -> None:
        await self.periodic.stop()

    async def round(self) -> None:
        try:
            if self._since_gauges >= FENCED_GAUGE_SECONDS:
                self._since_gauges = 0.0
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
        finally:
            self._since_gauges += PAUSE_REFRESH_SECONDS

    async def _publish_fenced(self, deadline: Deadline) -> None:
        held = await self.reader.read_fence_record(deadline)
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
