"""``nodefence_volumes_unreleased``: the VolumeAttachments still attached to each node the fence
record holds fenced, read from the cluster, so every serving replica exports the same gauge,
it survives a restart of the replica that fenced, and it clears itself when the attachments go
(deleted by hand, by ``volume_attachment_cleanup``, or detached by the cluster). The list of
VolumeAttachments is made only while something is fenced."""

from __future__ import annotations

import structlog

from nodefence.engine import record as fence_record
from nodefence.engine.model import VolumeAttachmentFacts
from nodefence.errors import ClusterUnavailableError
from nodefence.kube.client import Deadline, KubeClient, KubeError
from nodefence.kube.convert import volume_attachment_facts
from nodefence.observability.metrics import Metrics

log = structlog.get_logger(__name__)

DEADLINE_SECONDS = 10.0


async def attached_volumes(
    kube: KubeClient, nodes: set[str], deadline: Deadline
) -> dict[str, list[VolumeAttachmentFacts]]:
    """The VolumeAttachments still attached to each of ``nodes`` (none listed when empty)."""
    attached: dict[str, list[VolumeAttachmentFacts]] = {}
    if nodes:
        for raw in await kube.list_volume_attachments(deadline):
            va = volume_attachment_facts(raw)
            if va.node_name in nodes and va.attached:
                attached.setdefault(va.node_name, []).append(va)
    return attached


async def publish_unreleased_volumes(kube: KubeClient, namespace: str, metrics: Metrics) -> None:
    """Replace the gauge with what the cluster shows now; leave it as it was when the API does
    not answer (a guess is worse than a stale count the next refresh corrects)."""
    deadline = Deadline(DEADLINE_SECONDS)
    try:
        try:
            body = (
                await kube.get_configmap_dated(namespace, fence_record.CONFIGMAP, deadline)
            ).body
        except KubeError as exc:
            if exc.status != 404:
                raise
            body = {}
        held = fence_record.from_configmap(body)[0]
        fenced = {e.node for e in held.entries if e.phase is fence_record.Phase.FENCED}
        attached = await attached_volumes(kube, fenced, deadline)
    except (ClusterUnavailableError, KubeError) as exc:
        log.warning("volumes_unreleased_unknown", error=str(exc))
        return
    metrics.volumes_unreleased_are({node: len(vas) for node, vas in attached.items()})
