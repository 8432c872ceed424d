"""Idempotent, preconditioned writes for fence, purge and unfence.

Every write carries the precondition the decision was made on: the node is replaced (PUT) with
the uid and resourceVersion it was decided from (a concurrent change is a 409, and the caller
re-reads and re-decides); a pod is deleted with grace 0 and a UID precondition (S6), so a pod
re-created under the same name is never touched. Repeating an action after success is harmless:
an already-deleted pod is a 404, an already-applied taint makes the engine decide no fence.
"""

from __future__ import annotations

import asyncio
import copy
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from nodefence.engine.action_kinds import (
    FENCED,
    NODE_RELEASED,
    PURGED,
    UNFENCED,
    VOLUME_RELEASED,
)
from nodefence.engine.model import (
    OUT_OF_SERVICE_KEY,
    OUT_OF_SERVICE_VALUE,
    FenceAction,
    PurgePodAction,
    ReleaseFenceAction,
    UnfenceAction,
)
from nodefence.engine.wording import instant, parse_instant
from nodefence.kube.client import Deadline, Json, KubeClient, KubeError


class Outcome(StrEnum):
    DONE = "done"
    ALREADY = "already"  # the desired state was there already: idempotent success
    CONFLICT = "conflict"  # the precondition no longer holds: re-read and re-decide
    SKIPPED = "skipped"  # the target changed identity or vanished: nothing to do, by design
    FAILED = "failed"


@dataclass(frozen=True)
class ActionResult:
    action: str
    target: str
    outcome: Outcome
    detail: str = ""

    def as_dict(self) -> dict[str, str]:
        return {
            "action": self.action,
            "target": self.target,
            "outcome": self.outcome.value,
            "detail": self.detail,
        }


def _put_body(node: Json, uid: str, resource_version: str, taints: list[Any], notes: Json) -> Json:
    """The node as read, with new taints and annotations, carrying the uid and resourceVersion
    the decision was made on: the API server refuses it with 409 if either changed. The
    managedFields are left out, which tells the server to keep its own."""
    body = copy.deepcopy(node)
    meta = body.setdefault("metadata", {})
    meta.pop("managedFields", None)
    meta["uid"] = uid
    meta["resourceVersion"] = resource_version
    meta["annotations"] = notes
    body.setdefault("spec", {})["taints"] = taints
    return body


def fence_body(node: Json, action: FenceAction) -> Json:
    taints: list[Any] = [
        t for t in node.get("spec", {}).get("taints") or [] if t.get("key") != OUT_OF_SERVICE_KEY
    ]
    taint: Json = {
        "key": OUT_OF_SERVICE_KEY,
        "value": OUT_OF_SERVICE_VALUE,
        "effect": action.effect,
    }
    if action.time_added is not None:
        # S4: the stamp that tells this taint from one someone else applies the same way.
        taint["timeAdded"] = instant(action.time_added)
    taints.append(taint)
    annotations = dict(node.get("metadata", {}).get("annotations") or {})
    annotations.update(action.annotations)
    return _put_body(node, action.node_uid, action.resource_version, taints, annotations)


def taint_written(node: Json | None, effect: str) -> tuple[datetime | None, str]:
    """From a fence write's reply: the ``timeAdded`` the API server stored on nodefence's taint
    and the node's resourceVersion after the write, for the fence record (S4)."""
    if not node:
        return None, ""
    version = str((node.get("metadata") or {}).get("resourceVersion") or "")
    for taint in (node.get("spec") or {}).get("taints") or []:
        if is_own_taint(taint, effect):
            return parse_instant(taint.get("timeAdded")), version
    return None, version


def is_own_taint(taint: Json, effect: str) -> bool:
    """S4: exactly the taint nodefence wrote: key, value and the recorded effect."""
    return (
        taint.get("key") == OUT_OF_SERVICE_KEY
        and taint.get("value") == OUT_OF_SERVICE_VALUE
        and taint.get("effect") == effect
    )


def unfence_body(node: Json, action: UnfenceAction) -> Json:
    """Remove only nodefence's own taint; any other taint, of the same key included, stays."""
    taints = [
        t for t in node.get("spec", {}).get("taints") or [] if not is_own_taint(t, action.effect)
    ]
    annotations = dict(node.get("metadata", {}).get("annotations") or {})
    for key in action.remove_annotations:
        annotations.pop(key, None)
    annotations.update(action.annotations)
    return _put_body(node, action.node_uid, action.resource_version, taints, annotations)


def _escape(key: str) -> str:
    """An annotation key as a JSON pointer segment (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def release_patch(node: Json, action: ReleaseFenceAction) -> list[Json]:
    """The JSON patch of an operator's release: it tests the uid and resourceVersion the
    release was decided on, then takes off exactly nodefence's taint (S4: the first with its
    key, value and recorded effect; any other stays) and the listed mirror annotations. Empty
    when nothing on the node is nodefence's any more."""
    if not action.touches_node:
        return []
    meta = node.get("metadata") or {}
    ops: list[Json] = [
        {"op": "test", "path": "/metadata/uid", "value": action.node_uid},
        {"op": "test", "path": "/metadata/resourceVersion", "value": action.resource_version},
    ]
    if action.effect:
        taints = list((node.get("spec") or {}).get("taints") or [])
        own = next((i for i, t in enumerate(taints) if is_own_taint(t, action.effect)), None)
        if own is not None:
            kept = taints[:own] + taints[own + 1 :]
            ops.append({"op": "replace", "path": "/spec/taints", "value": kept})
    notes = meta.get("annotations") or {}
    ops.extend(
        {"op": "remove", "path": f"/metadata/annotations/{_escape(k)}"}
        for k in action.remove_annotations
        if k in notes
    )
    return ops


@dataclass(frozen=True)
class Written:
    """A node write's result and the API server's clock when it took effect."""

    result: ActionResult
    server_time: datetime | None
    body: Json | None = None


class Executor:
    def __init__(self, kube: KubeClient, *, purge_concurrency: int = 16) -> None:
        self.kube = kube
        self.purge_concurrency = purge_concurrency

    async def _put_node(self, kind: str, name: str, body: Json, deadline: Deadline) -> Written:
        try:
            reply = await self.kube.replace_node(name, body, deadline)
        except KubeError as exc:
            if exc.is_conflict:
                return Written(ActionResult(kind, name, Outcome.CONFLICT, str(exc)), None)
            if exc.status == 404:
                return Written(
                    ActionResult(kind, name, Outcome.SKIPPED, "node no longer exists"), None
                )
            # A 422 is the API server finding the object invalid, not a lost race: retrying
            # the same write cannot succeed, so it is reported, not looped on.
            return Written(ActionResult(kind, name, Outcome.FAILED, str(exc)), None)
        return Written(ActionResult(kind, name, Outcome.DONE), reply.server_time, reply.body)

    async def fence(self, node: Json, action: FenceAction, deadline: Deadline) -> Written:
        return await self._put_node(FENCED.name, action.node, fence_body(node, action), deadline)

    async def unfence(self, node: Json, action: UnfenceAction, deadline: Deadline) -> Written:
        return await self._put_node(
            UNFENCED.name, action.node, unfence_body(node, action), deadline
        )

    async def release_node(
        self, node: Json, action: ReleaseFenceAction, deadline: Deadline
    ) -> ActionResult:
        """One JSON patch (``release_patch``). A failed test (409, 422) or a node gone (404)
        is a node that changed since it was read: read and decide again."""
        try:
            await self.kube.patch_node_json(action.node, release_patch(node, action), deadline)
        except KubeError as exc:
            if exc.status in (404, 409, 422):
                return ActionResult(NODE_RELEASED.name, action.node, Outcome.CONFLICT, str(exc))
            return ActionResult(NODE_RELEASED.name, action.node, Outcome.FAILED, str(exc))
        return ActionResult(NODE_RELEASED.name, action.node, Outcome.DONE)

    async def purge_pod(self, action: PurgePodAction, deadline: Deadline) -> ActionResult:
        target = f"{action.namespace}/{action.name}"
        try:
            remaining = await self.kube.delete_pod(
                action.namespace, action.name, action.uid, deadline
            )
        except KubeError as exc:
            if exc.status == 404:
                return ActionResult(PURGED.name, target, Outcome.ALREADY, "pod already gone")
            if exc.status == 409:
                return ActionResult(
                    PURGED.name,
                    target,
                    Outcome.SKIPPED,
                    "pod was replaced (UID changed); untouched",
                )
            return ActionResult(PURGED.name, target, Outcome.FAILED, str(exc))
        meta = remaining.get("metadata", {}) if remaining.get("kind") == "Pod" else {}
        held_by = list(meta.get("finalizers") or [])
        if not held_by:
            return ActionResult(PURGED.name, target, Outcome.DONE, "deleted with grace 0")
        strip = [f for f in held_by if f in action.strip_finalizers]
        if not strip:
            return ActionResult(
                PURGED.name,
                target,
                Outcome.DONE,
                f"deleted; finalizers {', '.join(held_by)} keep it (not allowed to strip)",
            )
        return await self._strip_finalizers(action, meta, held_by, strip, deadline)

    async def _strip_finalizers(
        self,
        action: PurgePodAction,
        meta: Json,
        held_by: list[str],
        strip: list[str],
        deadline: Deadline,
    ) -> ActionResult:
        """Only after the grace-0 delete, only the allowed finalizers, only on the same pod."""
        target = f"{action.namespace}/{action.name}"
        keep = [f for f in held_by if f not in strip]
        ops: list[Json] = [
            {"op": "test", "path": "/metadata/uid", "value": action.uid},
            {
                "op": "test",
                "path": "/metadata/resourceVersion",
                "value": meta.get("resourceVersion"),
            },
            {"op": "replace", "path": "/metadata/finalizers", "value": keep},
        ]
        try:
            await self.kube.patch_pod_json(action.namespace, action.name, ops, deadline)
        except KubeError as exc:
            if exc.status == 404:
                return ActionResult(PURGED.name, target, Outcome.DONE, "deleted")
            if exc.is_conflict or exc.status == 422:
                return ActionResult(PURGED.name, target, Outcome.CONFLICT, str(exc))
            return ActionResult(PURGED.name, target, Outcome.FAILED, str(exc))
        detail = f"deleted; stripped finalizers {', '.join(strip)}"
        if keep:
            detail += f"; {', '.join(keep)} still hold it"
        return ActionResult(PURGED.name, target, Outcome.DONE, detail)

    async def release_volume(self, name: str, uid: str, deadline: Deadline) -> ActionResult:
        try:
            await self.kube.delete_volume_attachment(name, uid, deadline)
        except KubeError as exc:
            if exc.status == 404:
                return ActionResult(VOLUME_RELEASED.name, name, Outcome.ALREADY, "already gone")
            if exc.status == 409:
                return ActionResult(
                    VOLUME_RELEASED.name,
                    name,
                    Outcome.SKIPPED,
                    "VolumeAttachment was replaced (UID changed); untouched",
                )
            return ActionResult(VOLUME_RELEASED.name, name, Outcome.FAILED, str(exc))
        return ActionResult(VOLUME_RELEASED.name, name, Outcome.DONE, "VolumeAttachment deleted")

    async def purge(self, actions: list[PurgePodAction], deadline: Deadline) -> list[ActionResult]:
        """Bounded concurrency: a thousand stuck pods must not become a thousand open sockets."""
        semaphore = asyncio.Semaphore(self.purge_concurrency)

        async def one(action: PurgePodAction) -> ActionResult:
            async with semaphore:
                return await self.purge_pod(action, deadline)

        return list(await asyncio.gather(*(one(a) for a in actions)))
