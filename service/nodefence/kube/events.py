"""Kubernetes Events on the Node, so ``kubectl describe node`` tells what nodefence did and why.

A refusal or a wait said again on every pass of every replica would bury a node's history in
identical lines, and Event exporters page on each new object. So, as client-go's event
correlator does, a repeat is the same Event object whose ``count`` and ``lastTimestamp`` grow:
within ``REPEAT_SUPPRESSION_SECONDS`` a repeat is only counted here, after that the count is
written onto the Event the first occurrence created (a patch), with the latest message.

A recorder of a dry run writes nothing (S8: zero writes, Events included): it logs the Event it
would have written instead.
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import structlog

from nodefence.errors import ClusterUnavailableError
from nodefence.kube.client import Deadline, KubeClient, KubeError

COMPONENT = "nodefence"
# Node events live in the default namespace, where the kubelet and node controller put theirs.
NODE_EVENT_NAMESPACE = "default"
MAX_MESSAGE = 1024
# A repeat within this long is counted without a write; later ones are written onto the Event.
REPEAT_SUPPRESSION_SECONDS = 60.0
# A repeat after this long without one starts a new Event (the API server keeps Events an hour).
AGGREGATION_SECONDS = 1800.0

log = structlog.get_logger(__name__)

Key = tuple[str, str, str, str]


@dataclass
class _Recorded:
    """The Event object a repeated refusal is counted on, as this replica wrote it."""

    name: str
    # Occurrences so far, and when the Event was last written and the repeat last seen.
    count: int
    written_at: float
    seen_at: float


class EventRecorder:
    def __init__(
        self,
        kube: KubeClient,
        identity: str,
        *,
        suppression_seconds: float = REPEAT_SUPPRESSION_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        dry_run: bool = False,
    ) -> None:
        self.kube = kube
        self.identity = identity
        self.dry_run = dry_run
        self.suppression_seconds = suppression_seconds
        self.clock = clock
        # Oldest repeat first, so the expired entries are dropped from the front without a
        # pass over every node refused in the window (a thousand in a storm).
        self._recent: OrderedDict[Key, _Recorded] = OrderedDict()

    def _expire(self, now: float) -> None:
        while self._recent:
            oldest = next(iter(self._recent.values()))
            if now - oldest.seen_at < AGGREGATION_SECONDS:
                break
            self._recent.popitem(last=False)

    async def namespace_event(
        self,
        *,
        namespace: str,
        involved: dict[str, str],
        reason: str,
        message: str,
        warning: bool,
        deadline: Deadline | None = None,
    ) -> bool:
        """An Event about nodefence itself, in its own namespace (``kubectl get events -n``),
        on ``involved`` (apiVersion, kind, name), an object of that namespace: the API server
        refuses (422) an Event whose involved object's namespace is not the Event's own, so
        it is set here. Best effort, as every Event."""
        name = involved.get("name", COMPONENT)
        created = await self._create(
            namespace,
            name,
            {**involved, "namespace": namespace},
            reason=reason,
            message=message,
            warning=warning,
            deadline=deadline,
            subject=name,
        )
        return bool(created)

    async def node_event(
        self,
        *,
        node: str,
        node_uid: str,
        reason: str,
        message: str,
        warning: bool = False,
        deadline: Deadline | None = None,
        dedupe_key: str | None = None,
    ) -> bool:
        """Best effort: a lost Event must not undo or block the action it describes.

        ``dedupe_key`` marks a refusal or a wait: repeated for the same node object, it is
        counted on one Event (see the module's docstring) instead of creating another.
        """
        involved = {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}

        async def create() -> str:
            return await self._create(
                NODE_EVENT_NAMESPACE,
                node,
                involved,
                reason=reason,
                message=message,
                warning=warning,
                deadline=deadline,
                subject=node,
            )

        if dedupe_key is None:
            return bool(await create())
        now = self.clock()
        self._expire(now)
        key = (node, node_uid, reason, dedupe_key)
        held = self._recent.get(key)
        if held is not None:
            held.count += 1
            held.seen_at = now
            self._recent.move_to_end(key)
            if now - held.written_at < self.suppression_seconds:
                return False
            if await self._count(held, message, deadline):
                return True
            del self._recent[key]
        name = await create()
        if name:
            self._recent[key] = _Recorded(name, 1, now, now)
        return bool(name)

    async def _count(self, held: _Recorded, message: str, deadline: Deadline | None) -> bool:
        """Write the repeats onto the Event; False when it is gone (expired or deleted), and a
        new one is then created."""
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        patch = {"count": held.count, "lastTimestamp": stamp, "message": message[:MAX_MESSAGE]}
        try:
            await self.kube.patch_event(NODE_EVENT_NAMESPACE, held.name, patch, deadline)
        except KubeError as exc:
            if exc.status != 404:
                log.warning("event_not_counted", name=held.name, error=str(exc))
            return exc.status != 404
        except ClusterUnavailableError as exc:
            log.warning("event_not_counted", name=held.name, error=str(exc))
            return True
        held.written_at = self.clock()
        return True

    async def _create(
        self,
        namespace: str,
        prefix: str,
        involved: dict[str, str],
        *,
        reason: str,
        message: str,
        warning: bool,
        deadline: Deadline | None,
        subject: str,
    ) -> str:
        """The new Event's name; empty when it could not be written (or, in a dry run, was
        not)."""
        if self.dry_run:
            log.info("event_not_written", subject=subject, reason=reason, dry_run=True)
            return ""
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        name = f"{prefix}.nodefence.{uuid.uuid4().hex[:12]}"
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message[:MAX_MESSAGE],
            "type": "Warning" if warning else "Normal",
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.identity,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            await self.kube.create_event(namespace, event, deadline)
        except (KubeError, ClusterUnavailableError) as exc:
            log.warning("event_not_recorded", subject=subject, reason=reason, error=str(exc))
            return ""
        return name
