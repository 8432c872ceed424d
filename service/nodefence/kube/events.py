"""Kubernetes Events on the Node, so ``kubectl describe node`` tells what nodefence did and why."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime

import structlog

from nodefence.errors import ClusterUnavailableError
from nodefence.kube.client import Deadline, KubeClient, KubeError

COMPONENT = "nodefence"
# Node events live in the default namespace, where the kubelet and node controller put theirs.
NODE_EVENT_NAMESPACE = "default"
MAX_MESSAGE = 1024
# The same refusal for the same node is recorded at most this often by one replica: retried or
# duplicated deliveries would otherwise bury the node's history in identical lines.
REPEAT_SUPPRESSION_SECONDS = 60.0

log = structlog.get_logger(__name__)


class EventRecorder:
    def __init__(self, kube: KubeClient, identity: str) -> None:
        self.kube = kube
        self.identity = identity
        self._recent: dict[tuple[str, str, str, str], float] = {}

    def _repeated(self, key: tuple[str, str, str, str]) -> bool:
        now = time.monotonic()
        # Entries are added in time order and never moved, so the expired ones are at the
        # front: dropped from there, without a pass over every node refused within the window
        # (a thousand in a storm) on each refusal.
        while self._recent:
            oldest = next(iter(self._recent))
            if now - self._recent[oldest] < REPEAT_SUPPRESSION_SECONDS:
                break
            del self._recent[oldest]
        if key in self._recent:
            return True
        self._recent[key] = now
        return False

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
        on ``involved`` (apiVersion, kind, name). Best effort, as every Event."""
        name = involved.get("name", COMPONENT)
        return await self._create(
            namespace,
            name,
            involved,
            reason=reason,
            message=message,
            warning=warning,
            deadline=deadline,
            subject=name,
        )

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

        ``dedupe_key`` marks a refusal: the same one for the same node object is recorded once
        per ``REPEAT_SUPPRESSION_SECONDS``.
        """
        if dedupe_key is not None and self._repeated((node, node_uid, reason, dedupe_key)):
            return False
        involved = {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}
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
    ) -> bool:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{prefix}.nodefence.{uuid.uuid4().hex[:12]}",
                "namespace": namespace,
            },
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
            return False
        return True
