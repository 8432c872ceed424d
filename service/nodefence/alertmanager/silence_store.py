"""The silences last read from Alertmanager, kept where every replica finds them.

A silence set before Alertmanager went down still means "leave this node alone" while it cannot
be asked: its end time is known. So each answer is kept, filtered to the silences that could
hold a node of this cluster (``engine.silences.could_hold``) and bounded, in the ConfigMap
``nodefence-silences`` in nodefence's namespace, which only nodefence writes (S12). A replica
that starts while Alertmanager is down reads it there; ``status`` shows it. It is written only
when the answer changed, never in dry-run (S8), and never trusted beyond each silence's own end.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog

from nodefence.alertmanager.client import silences_from_json, silences_to_json
from nodefence.engine.silences import MAX_KEPT, Silence, could_hold
from nodefence.engine.wording import instant
from nodefence.errors import ClusterUnavailableError
from nodefence.kube.client import Deadline, KubeClient, KubeError

log = structlog.get_logger(__name__)

NAME = "nodefence-silences"
KEY = "silences.json"
# How old the record's reading time may grow while the silences stay the same: one write per
# this period at most, for a time that a replica started during an outage can trust that much.
REFRESH = timedelta(minutes=10)


@dataclass(frozen=True)
class Known:
    """The silences nodefence holds to, and where they come from: ``live`` when Alertmanager
    answered in this pass, otherwise as it answered at ``read_at`` (None: never)."""

    silences: tuple[Silence, ...]
    read_at: datetime | None
    live: bool

    def source(self) -> str:
        """Completes "… holds it": said in the decision, so a person sees how fresh it is."""
        if self.live:
            return ""
        when = instant(self.read_at) if self.read_at is not None else "an unknown time"
        return (
            f" (as Alertmanager answered at {when}; it cannot be asked now, and the silences "
            "last read hold until they end)"
        )


NOTHING = Known((), None, live=False)


def relevant(
    silences: Sequence[Silence],
    alertnames: Sequence[str],
    node_labels: Sequence[str],
    cluster: dict[str, str],
) -> tuple[Silence, ...]:
    """The silences that could hold a node of this cluster, the ones ending last first, at
    most ``MAX_KEPT`` of them (a bound on what Alertmanager's answer may make nodefence keep)."""
    mine = [s for s in silences if could_hold(s, alertnames, node_labels, cluster)]
    ordered = sorted(mine, key=lambda s: (s.ends_at, s.id), reverse=True)
    if len(ordered) > MAX_KEPT:
        log.warning("silences_over_limit", kept=MAX_KEPT, dropped=len(ordered) - MAX_KEPT)
    return tuple(ordered[:MAX_KEPT])


class SilenceStore:
    def __init__(self, kube: KubeClient, namespace: str, *, dry_run: bool) -> None:
        self.kube = kube
        self.namespace = namespace
        self.dry_run = dry_run
        # The last answer this process read or found, so an outage does not cost a read.
        self.last: Known = NOTHING
        # What the shared record holds as far as this process knows, and its reading time.
        self.stored: Known | None = None
        self.stored_at = datetime.min.replace(tzinfo=UTC)

    async def keep(
        self, silences: tuple[Silence, ...], read_at: datetime, deadline: Deadline
    ) -> None:
        """Alertmanager's answer, as read now: held in memory, and written to the shared record
        when it differs from what is there, or when the record's reading time is older than
        ``REFRESH`` (so that a replica started during an outage says truthfully when
        Alertmanager last answered, give or take that much). A failed write is logged and left
        to the next pass: this replica still holds to what it read."""
        self.last = Known(silences, read_at, live=True)
        fresh = self.stored is not None and self.stored.silences == silences
        if self.dry_run or (fresh and read_at - self.stored_at < REFRESH):
            return
        body = {"readAt": read_at.isoformat(), "silences": silences_to_json(silences)}
        data = {KEY: json.dumps(body, sort_keys=True, separators=(",", ":"))}
        try:
            current = await self._read(deadline)
            there = _parse(current) if current is not None else None
            if there is not None and there.silences == silences and there.read_at is not None:
                self.stored, self.stored_at = there, there.read_at
                if read_at - there.read_at < REFRESH:
                    return
            if current is None:
                configmap = {"metadata": {"name": NAME, "namespace": self.namespace}, "data": data}
                await self.kube.create_configmap(self.namespace, configmap, deadline)
            else:
                updated = {**current, "data": data}
                await self.kube.replace_configmap(self.namespace, NAME, updated, deadline)
            self.stored, self.stored_at = Known(silences, read_at, live=False), read_at
        except (ClusterUnavailableError, KubeError) as exc:
            log.warning("silences_not_kept", error=str(exc))

    async def recalled(self, now: datetime, deadline: Deadline) -> Known:
        """While Alertmanager cannot be asked: the newer of what this process read and what the
        shared record holds (another replica's answer, or one read before this one started),
        the silences that have ended left out."""
        stored = NOTHING
        try:
            current = await self._read(deadline)
        except (ClusterUnavailableError, KubeError) as exc:
            log.warning("silences_not_read", error=str(exc))
            current = None
        if current is not None:
            stored = _parse(current)
        newest = max(
            (self.last, stored),
            key=lambda k: k.read_at.timestamp() if k.read_at is not None else float("-inf"),
        )
        self.last = Known(newest.silences, newest.read_at, live=False)
        # Judged on their times alone now: Alertmanager's word that one was in force is old.
        recalled = (_on_times(s, newest.read_at, now) for s in newest.silences)
        return Known(tuple(s for s in recalled if s.ends_at > now), newest.read_at, live=False)

    async def _read(self, deadline: Deadline) -> dict[str, Any] | None:
        try:
            return await self.kube.get_configmap(self.namespace, NAME, deadline)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise


def _on_times(silence: Silence, read_at: datetime | None, now: datetime) -> Silence:
    """A silence as recalled, judged on its times alone. One Alertmanager said was in force when
    read had started by that reading, so by any moment after it: its start is taken no later
    than ``read_at`` nor than ``now``. Alertmanager stamps a silence's start on its own clock (to
    the millisecond), and nodefence's clock is the API server's as each replica estimates it from
    whole-second ``Date`` headers: the replica recalling may read a ``now`` up to a second before
    the reading time another replica recorded, though the reading came first."""
    start = silence.starts_at
    if silence.in_force and read_at is not None:
        start = min(start, read_at, now)
    return dataclasses.replace(silence, in_force=False, starts_at=start)


def _parse(configmap: dict[str, Any]) -> Known:
    """The shared record as written by ``keep``; one that cannot be read holds nothing and is
    said in the log (only nodefence writes it, so this is damage, not a person's choice)."""
    try:
        body = json.loads((configmap.get("data") or {})[KEY])
        read_at = datetime.fromisoformat(body["readAt"])
        return Known(tuple(silences_from_json(body["silences"])), read_at, live=False)
    except (KeyError, TypeError, ValueError) as exc:
        log.warning("silences_record_unreadable", error=str(exc))
        return NOTHING
