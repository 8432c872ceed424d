"""Whether the cluster will release a fenced node's volumes itself, and if not, which
VolumeAttachments nodefence may delete (pure, like the rest of the engine).

The out-of-service taint makes Kubernetes force-detach volumes only from 1.26 on (beta, on by
default; GA in 1.28), or on 1.24-1.25 with the ``NodeOutOfServiceVolumeDetach`` gate, which the
API does not reveal. Without it, a ReadWriteOnce volume stays attached to the dead node and the
replacement StatefulSet pod hangs in ``Init``/``ContainerCreating`` with a Multi-Attach error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nodefence.engine.model import Facts, Reason

AUTOMATIC_DETACH_FROM = (1, 26)


@dataclass(frozen=True)
class VolumeAttachmentFacts:
    name: str
    node_name: str
    persistent_volume: str
    attached: bool


@dataclass(frozen=True)
class VolumePlan:
    delete: tuple[VolumeAttachmentFacts, ...]
    reason: Reason


def server_minor(version: str) -> tuple[int, int] | None:
    match = re.match(r"v?(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else None


def plan_volume_release(
    facts: Facts,
    attachments: tuple[VolumeAttachmentFacts, ...],
    *,
    cleanup_allowed: bool,
) -> VolumePlan:
    """Only attachments of this node, and only once no pod on the node still uses a claim."""
    node = facts.node
    if node is None:
        return VolumePlan((), Reason("volumes", True, "no node, no volumes to release"))
    mine = tuple(a for a in attachments if a.node_name == node.name)
    version = facts.cluster.server_version or "an unknown version"
    minor = server_minor(facts.cluster.server_version)
    if minor is not None and minor >= AUTOMATIC_DETACH_FROM:
        return VolumePlan(
            (),
            Reason(
                "volumes",
                True,
                f"Kubernetes {version} detaches the volumes of an out-of-service node itself",
            ),
        )
    if not mine:
        return VolumePlan((), Reason("volumes", True, f"no volume is attached to {node.name}"))
    names = ", ".join(a.persistent_volume for a in mine[:5]) + (" ..." if len(mine) > 5 else "")
    if not cleanup_allowed:
        return VolumePlan(
            (),
            Reason(
                "volumes",
                False,
                f"Kubernetes {version} releases volumes of an out-of-service node only with the "
                f"NodeOutOfServiceVolumeDetach gate; {len(mine)} volume(s) ({names}) may stay "
                "attached to the dead node and block their pods elsewhere; the policy does not "
                "allow nodefence to delete VolumeAttachments (volume_attachment_cleanup)",
            ),
        )
    still_used = [p for p in facts.pods if p.has_pvc and p.node_name == node.name]
    if still_used:
        return VolumePlan(
            (),
            Reason(
                "volumes",
                False,
                f"{len(still_used)} pod(s) with volumes are still on {node.name}; its "
                "VolumeAttachments are released once they are gone",
            ),
        )
    return VolumePlan(
        mine,
        Reason(
            "volumes",
            True,
            f"Kubernetes {version} may not detach volumes of an out-of-service node; deleting "
            f"{len(mine)} VolumeAttachment(s) of {node.name} ({names}) now that its pods are gone",
        ),
    )
