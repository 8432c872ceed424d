"""The pause switch (ConfigMap ``nodefence-control``), followed by a watch instead of polled.

The ConfigMap is absent until someone pauses nodefence, and on most clusters it stays absent:
polling it every few seconds meant a 404 every few seconds from every replica, in the API
server's audit log and in every error-rate dashboard. A serving receiver lists it once by name
(a field selector on ``metadata.name``, which the Role can grant for that name alone) and then
follows a watch from the list's resourceVersion (``kube.informer``), as the node index does: a
pause reaches every replica as soon as the API server delivers the change, and a cluster nobody
pauses costs one long-lived request per replica, renewed every ``WATCH_SECONDS``.

Freshness is stated, not assumed: ``fresh`` answers only while the watch heard from the API
server within ``MAX_AGE_SECONDS``; past that the reader falls back to reading the ConfigMap
itself, as before.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog

from nodefence.engine.model import PREFIX
from nodefence.engine.wording import parse_instant
from nodefence.kube.backoff import Backoff
from nodefence.kube.client import Deadline, Json, KubeClient, KubeError, Stream
from nodefence.kube.convert import power_proof
from nodefence.kube.informer import Informer
from nodefence.kube.watch_events import parts

log = structlog.get_logger(__name__)

CONTROL_CONFIGMAP = "nodefence-control"
PAUSED = PREFIX + "paused"
PAUSED_REASON = PREFIX + "paused-reason"
# Written by ``nodefence pause`` beside the switch (the API server's Date before its write);
# a pause set by hand is dated by the API server's stamp on the write of the annotation.
PAUSED_AT = PREFIX + "paused-at"
WATCH_SECONDS = 60
IDLE_SECONDS = WATCH_SECONDS + 15.0
MAX_AGE_SECONDS = WATCH_SECONDS + 30.0
LIST_DEADLINE_SECONDS = 10.0
BACKOFF = Backoff(0.5, 30.0)


@dataclass(frozen=True)
class PauseState:
    """``reason`` is None when not paused; ``since`` is when the pause began, as far as the
    ConfigMap says."""

    reason: str | None
    since: datetime | None = None

    @property
    def paused(self) -> bool:
        return self.reason is not None


NOT_PAUSED = PauseState(None)


def pause_state(configmap: Json, namespace: str) -> PauseState:
    """The switch as one ConfigMap (``{}`` for an absent one) sets it: annotation
    ``nodefence.io/paused: "true"``, with an optional reason."""
    notes = (configmap.get("metadata") or {}).get("annotations") or {}
    if str(notes.get(PAUSED, "")).strip().lower() != "true":
        return NOT_PAUSED
    why = str(notes.get(PAUSED_REASON, "")).strip()
    where = f"ConfigMap {namespace}/{CONTROL_CONFIGMAP} has {PAUSED}=true"
    since = parse_instant(notes.get(PAUSED_AT)) or power_proof(configmap, PAUSED, "").at
    return PauseState(f"{where} ({why})" if why else where, since)


class PauseWatch(Informer):
    name = "pause-watch"

    def __init__(
        self,
        kube: KubeClient,
        namespace: str,
        *,
        on_change: Callable[[PauseState], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(BACKOFF, clock)
        self.kube = kube
        self.namespace = namespace
        self.on_change = on_change
        self.state: PauseState | None = None

    def fresh(self) -> PauseState | None:
        """The switch, if the watch heard from the API server within ``MAX_AGE_SECONDS``."""
        age = self.age
        if self.state is None or age is None or age > MAX_AGE_SECONDS:
            return None
        return self.state

    def _set(self, state: PauseState) -> None:
        changed = state != self.state
        self.state = state
        if changed:
            log.info("pause_switch", paused=state.paused, reason=state.reason)
            if self.on_change is not None:
                self.on_change(state)

    def failure_detail(self, exc: Exception) -> str | None:
        if isinstance(exc, KubeError) and exc.status == 403:
            # An install whose Role predates the watch: the switch is still read with a GET,
            # as before, until the Role is applied.
            return (
                f"nodefence's Role needs list and watch on configmaps/{CONTROL_CONFIGMAP} "
                f"in namespace {self.namespace}"
            )
        return None

    async def list(self) -> str:
        body = await self.kube.list_configmap_named(
            self.namespace, CONTROL_CONFIGMAP, Deadline(LIST_DEADLINE_SECONDS)
        )
        items = [i for i in body.get("items") or [] if _named(i)]
        self._set(pause_state(items[0], self.namespace) if items else NOT_PAUSED)
        return str((body.get("metadata") or {}).get("resourceVersion") or "")

    async def watch(self, resource_version: str) -> Stream:
        return await self.kube.watch_configmap_named(
            self.namespace,
            CONTROL_CONFIGMAP,
            resource_version,
            WATCH_SECONDS,
            idle_seconds=IDLE_SECONDS,
        )

    def apply(self, event: dict[str, Any]) -> str:
        # Anything else is a bookmark: the stream is alive and the switch unchanged.
        kind, obj, version = parts(event)
        if kind in ("ADDED", "MODIFIED") and _named(obj):
            self._set(pause_state(obj, self.namespace))
        elif kind == "DELETED" and _named(obj):
            self._set(NOT_PAUSED)
        return version


def _named(obj: Json) -> bool:
    return (obj.get("metadata") or {}).get("name") == CONTROL_CONFIGMAP
