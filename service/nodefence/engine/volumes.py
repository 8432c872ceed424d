"""Whether the cluster will release a fenced node's volumes itself, and if not, which
VolumeAttachments nodefence may delete (pure, like the rest of the engine).

The out-of-service taint makes Kubernetes force-detach volumes only from 1.26 on (beta, on by
default; GA in 1.28), or on 1.24-1.25 with the ``NodeOutOfServiceVolumeDetach`` gate, which the
API does not reveal. Without it, a ReadWriteOnce volume stays attached to the dead node and the
replacement StatefulSet pod hangs in ``Init``/``ContainerCreating`` with a Multi-Attach error.

What becomes of the volumes is decided like everything else: in the decisions on a node
nodefence holds fenced and has just found down by S1 and S2 (``decided``), from the node's
VolumeAttachments read live for them (``Facts.attachments``; on a server that detaches them
itself nothing is read), as a reason and the deletes (``ReleaseVolumeAttachmentAction``). A
fence request reports its fence decision with what became of the volumes by the time the loop
settled: the pods it purged are gone only after the fence decision was made, so the shell
decides the fence again on its own facts and what each turn after it decided of the volumes
(``seen``, ``Facts.settled_volumes``), and that reason stands in the plan's place.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from nodefence.engine.guard_kinds import VOLUMES as GUARD
from nodefence.engine.model import (
    Decision,
    Facts,
    NodeFacts,
    Reason,
    ReleaseVolumeAttachmentAction,
    VolumeAttachmentFacts,
    VolumesTurn,
)

AUTOMATIC_DETACH_FROM = (1, 26)


@dataclass(frozen=True)
class VolumePlan:
    delete: tuple[VolumeAttachmentFacts, ...]
    reason: Reason
    # Attachments that stay on the dead node after this step: named in the decision and the
    # Event, counted by ``nodefence_volumes_unreleased``.
    kept: tuple[VolumeAttachmentFacts, ...] = ()


SHOWN = 5
# The longest command that names the attachments one by one; past it, the command selects them
# by node. Either way it is whole in the first sentence of the reason, which is what the Event
# of a fence carries of it (``headline``): an Event's message is cut at 1,024 characters.
COMMAND_LIMIT = 240
# Where the reason of volumes left attached turns from what to do to why.
_WHY = " Why: "


def release_command(node: str, attachments: tuple[VolumeAttachmentFacts, ...]) -> str:
    """The command an operator runs to release ``attachments`` of ``node`` by hand: their
    names, or, when that would be long, every VolumeAttachment whose spec names the node."""
    named = "kubectl delete volumeattachment " + " ".join(a.name for a in attachments)
    if len(named) <= COMMAND_LIMIT:
        return named
    return (
        "kubectl get volumeattachments -o jsonpath='{range .items[?(@.spec.nodeName==\""
        + node
        + '")]}{.metadata.name}{"\\n"}{end}\' | xargs -r kubectl delete volumeattachment'
    )


def headline(reason: Reason) -> str:
    """What to do about volumes left attached, without why: the part of the reason an Event
    carries (``nodefence status`` and the decision keep the whole)."""
    return reason.message.split(_WHY, 1)[0]


def _listed(attachments: tuple[VolumeAttachmentFacts, ...]) -> str:
    named = ", ".join(f"{a.name} ({a.persistent_volume})" for a in attachments[:SHOWN])
    return named + (f" and {len(attachments) - SHOWN} more" if len(attachments) > SHOWN else "")


def unreleased(reasons: tuple[Reason, ...]) -> Reason | None:
    """The volumes reason of a decision that acted, when its volumes were not released: a fence
    that leaves them attached is not a plain success, and its Event says so first."""
    return next((r for r in reasons if r.guard == GUARD and not r.passed), None)


def server_minor(version: str) -> tuple[int, int] | None:
    match = re.match(r"v?(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else None


def detached_by_cluster(version: str) -> bool:
    """The API server's version says it detaches an out-of-service node's volumes itself; an
    unknown version is taken to be one that may not."""
    minor = server_minor(version)
    return minor is not None and minor >= AUTOMATIC_DETACH_FROM


def decided(decision: Decision, facts: Facts, *, cleanup_allowed: bool) -> Decision:
    """``decision``, made on a node nodefence holds fenced and found down just now (S1 and S2
    checked on the same facts), with what becomes of the node's volumes: the reason, and the
    VolumeAttachments nodefence deletes where the rule allows it. Without the attachments read,
    on a server that may not detach them itself, the decision only says it needs them; a dry
    run says nothing of volumes (S8: it would delete nothing)."""
    node = facts.node
    if decision.dry_run or not decision.node_confirmed_down or node is None:
        return decision
    if facts.attachments is None and not detached_by_cluster(facts.cluster.server_version):
        return dataclasses.replace(decision, needs_attachments=True)
    plan = plan_volume_release(facts, facts.attachments or (), cleanup_allowed=cleanup_allowed)
    deletes = tuple(
        ReleaseVolumeAttachmentAction(node.name, node.uid, a.name, a.persistent_volume, a.uid)
        for a in plan.delete
        if not a.deleting
    )
    reason = settled(plan.reason, bool(deletes), facts.settled_volumes or ())
    return dataclasses.replace(
        decision,
        reasons=(*decision.reasons, reason),
        actions=(*decision.actions, *deletes),
        needs_attachments=False,
    )


def seen(decision: Decision) -> VolumesTurn:
    """What ``decision``, a turn of the loop after a fence, decided of the node's volumes: its
    last volumes reason, and whether it deletes VolumeAttachments (``Facts.settled_volumes``)."""
    reason = next((r for r in reversed(decision.reasons) if r.guard == GUARD), None)
    deletes = any(isinstance(a, ReleaseVolumeAttachmentAction) for a in decision.actions)
    return VolumesTurn(reason, deletes)


def settled(own: Reason, deletes: bool, turns: tuple[VolumesTurn, ...]) -> Reason:
    """The volumes reason of a decision whose own is ``own`` (``deletes``: it deletes
    VolumeAttachments), once the loop's turns after it (``turns``, in order) found what became of
    the node's volumes: the reason of the last turn that deleted VolumeAttachments (the turns
    after it only find them gone), else of the last turn that said anything of volumes, else its
    own."""
    said = [(own, deletes), *((t.reason, t.deleted) for t in turns if t.reason is not None)]
    deleted = [reason for reason, deleting in said if deleting]
    return (deleted or [reason for reason, _ in said])[-1]


def plan_volume_release(
    facts: Facts,
    attachments: tuple[VolumeAttachmentFacts, ...],
    *,
    cleanup_allowed: bool,
) -> VolumePlan:
    """Only attachments of this node, and only once no pod on the node still uses a claim."""
    node = facts.node
    if node is None:
        return VolumePlan((), Reason(GUARD, True, "no node, no volumes to release"))
    mine = tuple(a for a in attachments if a.node_name == node.name)
    version = facts.cluster.server_version or "an unknown version"
    if detached_by_cluster(facts.cluster.server_version):
        return VolumePlan(
            (),
            Reason(
                GUARD,
                True,
                f"Kubernetes {version} detaches the volumes of an out-of-service node itself",
            ),
        )
    if not mine:
        return VolumePlan((), Reason(GUARD, True, f"no volume is attached to {node.name}"))
    names = ", ".join(a.persistent_volume for a in mine[:5]) + (" ..." if len(mine) > 5 else "")
    if not cleanup_allowed:
        return _not_allowed(node, mine, version)
    still_used = [p for p in facts.pods if p.has_pvc and p.node_name == node.name]
    if still_used:
        return VolumePlan(
            (),
            Reason(
                GUARD,
                False,
                f"{len(mine)} VolumeAttachment(s) stay attached to {node.name} for now "
                f"({_listed(mine)}): {len(still_used)} pod(s) with volumes are still on it; "
                "they are deleted once those pods are gone (a later reconcile pass)",
            ),
            kept=mine,
        )
    return VolumePlan(
        mine,
        Reason(
            GUARD,
            True,
            f"Kubernetes {version} may not detach volumes of an out-of-service node; deleting "
            f"{len(mine)} VolumeAttachment(s) of {node.name} ({names}) now that its pods are gone",
        ),
    )


def _not_allowed(
    node: NodeFacts, mine: tuple[VolumeAttachmentFacts, ...], version: str
) -> VolumePlan:
    """What to do first, whole: the command survives wherever the message is cut."""
    return VolumePlan(
        (),
        Reason(
            GUARD,
            False,
            f"VOLUMES NOT RELEASED: {len(mine)} VolumeAttachment(s) are still attached to "
            f"{node.name}; once its machine is known to be off, release them: "
            f"`{release_command(node.name, mine)}`.{_WHY}they are {_listed(mine)}. "
            f"Kubernetes {version} detaches the volumes of an out-of-service node only with "
            "the NodeOutOfServiceVolumeDetach feature gate, which the API does not show: "
            "unless it is on, pods that use them cannot start on another node (Multi-Attach "
            "errors) until they go (nodefence_volumes_unreleased shows whether they do). The "
            "policy does not let nodefence delete them (volume_attachment_cleanup: true "
            "would, once the node's pods are gone)",
        ),
        kept=mine,
    )
