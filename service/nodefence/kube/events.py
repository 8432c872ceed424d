"""Kubernetes Events on the Node, so ``kubectl describe node`` tells what nodefence did and why."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import structlog

from nodefence.errors import ClusterUnavailableError
from nodefence.kube.client import Deadline, KubeClient, KubeError

COMPONENT = "nodefence"
# Node events live in the default namespace, where the kubelet and node controller put theirs.
NODE_EVENT_NAMESPACE = "default"
MAX_MESSAGE = 1024

log = structlog.get_logger(__name__)


class EventRecorder:
    def __init__(self, kube: KubeClient, identity: str) -> None:
        self.kube = kube
        self.identity = identity

    async def node_event(
        self,
        *,
        node: str,
        node_uid: str,
        reason: str,
        message: str,
        warning: bool = False,
        deadline: Deadline | None = None,
    ) -> bool:
        """Best effort: a lost Event must not undo or block the action it describes."""
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{node}.nodefence.{uuid.uuid4().hex[:12]}",
                "namespace": NODE_EVENT_NAMESPACE,
            },
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid},
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
            await self.kube.create_event(NODE_EVENT_NAMESPACE, event, deadline)
        except (KubeError, ClusterUnavailableError) as exc:
            log.warning("event_not_recorded", node=node, reason=reason, error=str(exc))
            return False
        return True
