"""The pause switch (ConfigMap ``nodefence-control``), followed by a watch instead of polled.

The ConfigMap is absent until someone pauses nodefence, and on most clusters it stays absent:
polling it every few seconds meant a 404 every few seconds from every replica, in the API
server's audit log and in every error-rate dashboard. A serving receiver lists it once by name
(a field selector on ``metadata.name``, which the Role can grant for that name alone) and then
follows a watch from the list's resourceVersion, as the node index does: a pause reaches every
replica as soon as the API server delivers the change, and a cluster nobody pauses costs one
long-lived request per replica, renewed every ``WATCH_SECONDS``.

Freshness is stated, not assumed: ``fresh`` answers only while the watch heard from the API
server within ``MAX_AGE_SECONDS``; past that the reader falls back to reading the ConfigMap
itself, as before.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import aiohttp
import structlog

from nodefence.engine.model import PREFIX
from nodefence.engine.wording import parse_instant
from nodefence.errors import ClusterUnavailableError
from nodefence.kube.client import Deadline, Json, KubeClient, KubeError
from nodefence.kube.convert import power_proof
from nodefence.kube.watch_events import follow, parts

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
BACKOFF_SECONDS = (0.5, 30.0)


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


class PauseWatch:
    def __init__(
        self,
        kube: KubeClient,
        namespace: str,
        *,
        on_change: Callable[[PauseState], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.on_change = on_change
        self.clock = clock
        self.state: PauseState | None = None
        self.resource_version = ""
        self.heard_at: float | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def fresh(self) -> PauseState | None:
        """The switch, if the watch heard from the API server within ``MAX_AGE_SECONDS``."""
        if self.state is None or self.heard_at is None:
            return None
        if self.clock() - self.heard_at > MAX_AGE_SECONDS:
            return None
        return self.state

    def start(self) -> None:
        if self._task is None and not self._stopping:
            self._task = asyncio.create_task(self._follow(), name="pause-watch")

    async def stop(self) -> None:
        self._stopping = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task}, timeout=5.0)

    def _set(self, state: PauseState) -> None:
        changed = state != self.state
        self.state = state
        self.heard_at = self.clock()
        if changed:
            log.info("pause_switch", paused=state.paused, reason=state.reason)
            if self.on_change is not None:
                self.on_change(state)

    async def _follow(self) -> None:
        failures = 0
        while not self._stopping:
            try:
                if not self.resource_version:
                    await self._list()
                await self._watch()
                failures = 0
            except (ClusterUnavailableError, KubeError, aiohttp.ClientError, OSError) as exc:
                if isinstance(exc, KubeError):
                    self.resource_version = ""
                failures += 1
                pause = min(BACKOFF_SECONDS[1], BACKOFF_SECONDS[0] * 2 ** (failures - 1))
                pause *= 0.5 + random.random()  # noqa: S311 - jitter, not security
                forbidden = isinstance(exc, KubeError) and exc.status == 403
                log.warning(
                    "pause_watch_interrupted",
                    error=str(exc) or type(exc).__name__,
                    retry_in=round(pause, 2),
                    # An install whose Role predates the watch: the switch is still read with
                    # a GET, as before, until the Role is applied.
                    detail=f"nodefence's Role needs list and watch on configmaps/"
                    f"{CONTROL_CONFIGMAP} in namespace {self.namespace}"
                    if forbidden
                    else None,
                )
                await asyncio.sleep(pause)

    async def _list(self) -> None:
        body = await self.kube.list_configmap_named(
            self.namespace, CONTROL_CONFIGMAP, Deadline(LIST_DEADLINE_SECONDS)
        )
        items = [i for i in body.get("items") or [] if _named(i)]
        self.resource_version = str((body.get("metadata") or {}).get("resourceVersion") or "")
        self._set(pause_state(items[0], self.namespace) if items else NOT_PAUSED)

    async def _watch(self) -> None:
        stream = await self.kube.watch_configmap_named(
            self.namespace,
            CONTROL_CONFIGMAP,
            self.resource_version,
            WATCH_SECONDS,
            idle_seconds=IDLE_SECONDS,
        )
        await follow(stream, self._apply)
        # Ended by the server at its timeout: everything until now was delivered.
        self.heard_at = self.clock()

    def _apply(self, event: dict[str, Any]) -> None:
        kind, obj, version = parts(event)
        if version:
            self.resource_version = version
        if kind in ("ADDED", "MODIFIED") and _named(obj):
            self._set(pause_state(obj, self.namespace))
        elif kind == "DELETED" and _named(obj):
            self._set(NOT_PAUSED)
        else:
            # A bookmark: the stream is alive and the switch unchanged.
            self.heard_at = self.clock()


def _named(obj: Json) -> bool:
    return (obj.get("metadata") or {}).get("name") == CONTROL_CONFIGMAP
