"""Whether this receiver can ask Alertmanager's API, as its reconcile passes found it.

The fallback (``engine.fallback``) depends on it: with Alertmanager reachable, a silence stops
nodefence; without it, nodefence cannot know of one and judges a NotReady node on the cluster's
facts alone. So losing Alertmanager is said where an operator looks: the metric
``nodefence_alertmanager_up`` (the shipped alert ``NodefenceAlertmanagerUnreachable`` is built on
it), a Warning Event in nodefence's namespace when it is lost, and a log line each time.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import structlog

from nodefence.engine import fallback
from nodefence.kube.events import EventRecorder
from nodefence.observability.metrics import Metrics

log = structlog.get_logger(__name__)

# What the namespace Events are about: the fence record, the one object every install has.
INVOLVED = {"apiVersion": "v1", "kind": "ConfigMap", "name": "nodefence-fences"}


def _utcnow() -> datetime:
    return datetime.now(UTC)


class Reachability:
    def __init__(
        self,
        metrics: Metrics,
        events: EventRecorder,
        namespace: str,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        self.metrics = metrics
        self.events = events
        self.namespace = namespace
        self.clock = clock
        # None until the first request; then whether the last one was answered.
        self.reachable: bool | None = None
        self.unreachable_since: datetime | None = None
        self.error = ""

    def answered(self) -> None:
        self.reachable = True
        self.unreachable_since = None
        self.error = ""
        self.metrics.alertmanager_up.set(1)
        self.metrics.alertmanager_last_success.set(self.clock().timestamp())

    async def failed(self, error: str) -> None:
        """A failed request: the first of a run is a Warning Event in nodefence's namespace."""
        lost = self.reachable is not False
        self.reachable = False
        self.error = error
        self.metrics.alertmanager_up.set(0)
        log.warning("alertmanager_unavailable", error=error)
        if lost:
            self.unreachable_since = self.clock()
            await self.events.namespace_event(
                namespace=self.namespace,
                involved=INVOLVED,
                reason="AlertmanagerUnreachable",
                message=(
                    f"{error}. Alerts Alertmanager still holds are not re-judged, and NotReady "
                    "nodes past cluster.fallback_after_seconds are judged without knowing of "
                    "silences until it answers again"
                ),
                warning=True,
            )

    def silence(self) -> fallback.Silence:
        """Why no alert is taken to be held, in the fallback's words."""
        if self.reachable is False:
            return fallback.unreachable(self.unreachable_since, self.error)
        return fallback.holds_none()
