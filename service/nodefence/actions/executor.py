"""Idempotent, preconditioned writes for fence, purge and unfence.

Every write carries the precondition the decision was made on: the node patch tests the
resourceVersion and uid it was decided from (a concurrent change makes it fail, and the caller
re-reads and re-decides); a pod is deleted with grace 0 and a UID precondition (S6), so a pod
re-created under the same name is never touched. Repeating an action after success is harmless:
an already-deleted pod is a 404, an already-applied taint makes the engine decide no fence.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from nodefence.engine.model import (
    OUT_OF_SERVICE_KEY,
    OUT_OF_SERVICE_VALUE,
    FenceAction,
    PurgePodAction,
    UnfenceAction,
)
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


def _pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _node_preconditions(action_uid: str, action_rv: str) -> list[Json]:
    return [
        {"op": "test", "path": "/metadata/uid", "value": action_uid},
        {"op": "test", "path": "/metadata/resourceVersion", "value": action_rv},
    ]


def fence_patch(node: Json, action: FenceAction) -> list[Json]:
    """Taint and ledger in one JSON patch, guarded by ``test`` ops on uid and resourceVersion."""
    taints: list[Any] = list(node.get("spec", {}).get("taints") or [])
    taints = [t for t in taints if t.get("key") != OUT_OF_SERVICE_KEY]
    taints.append(
        {"key": OUT_OF_SERVICE_KEY, "value": OUT_OF_SERVICE_VALUE, "effect": action.effect}
    )
    annotations = dict(node.get("metadata", {}).get("annotations") or {})
    annotations.update(action.annotations)
    ops = _node_preconditions(action.node_uid, action.resource_version)
    ops.append({"op": "add", "path": "/spec/taints", "value": taints})
    ops.append({"op": "add", "path": "/metadata/annotations", "value": annotations})
    return ops


def unfence_patch(node: Json, action: UnfenceAction, effect: str | None) -> list[Json]:
    """Remove only the out-of-service taint nodefence applied (same effect as the ledger)."""
    taints = [
        t
        for t in node.get("spec", {}).get("taints") or []
        if not (
            t.get("key") == OUT_OF_SERVICE_KEY and (effect is None or t.get("effect") == effect)
        )
    ]
    annotations = dict(node.get("metadata", {}).get("annotations") or {})
    for key in action.remove_annotations:
        annotations.pop(key, None)
    annotations.update(action.annotations)
    ops = _node_preconditions(action.node_uid, action.resource_version)
    ops.append({"op": "add", "path": "/spec/taints", "value": taints})
    ops.append({"op": "add", "path": "/metadata/annotations", "value": annotations})
    return ops


class Executor:
    def __init__(self, kube: KubeClient, *, purge_concurrency: int = 16) -> None:
        self.kube = kube
        self.purge_concurrency = purge_concurrency

    async def _patch_node(
        self, kind: str, name: str, ops: list[Json], deadline: Deadline
    ) -> ActionResult:
        try:
            await self.kube.patch_node_json(name, ops, deadline)
        except KubeError as exc:
            # These patches are built from the object just read, so a 422 can only be a failed
            # uid or resourceVersion ``test``: the node changed under us.
            if exc.is_conflict or exc.status == 422:
                return ActionResult(kind, name, Outcome.CONFLICT, str(exc))
            if exc.status == 404:
                return ActionResult(kind, name, Outcome.SKIPPED, "node no longer exists")
            return ActionResult(kind, name, Outcome.FAILED, str(exc))
        return ActionResult(kind, name, Outcome.DONE)

    async def fence(self, node: Json, action: FenceAction, deadline: Deadline) -> ActionResult:
        return await self._patch_node("fence", action.node, fence_patch(node, action), deadline)

    async def unfence(
        self, node: Json, action: UnfenceAction, effect: str | None, deadline: Deadline
    ) -> ActionResult:
        ops = unfence_patch(node, action, effect)
        return await self._patch_node("unfence", action.node, ops, deadline)

    async def purge_pod(self, action: PurgePodAction, deadline: Deadline) -> ActionResult:
        target = f"{action.namespace}/{action.name}"
        try:
            remaining = await self.kube.delete_pod(
                action.namespace, action.name, action.uid, deadline
            )
        except KubeError as exc:
            if exc.status == 404:
                return ActionResult("purge", target, Outcome.ALREADY, "pod already gone")
            if exc.status == 409:
                return ActionResult(
                    "purge", target, Outcome.SKIPPED, "pod was replaced (UID changed); untouched"
                )
            return ActionResult("purge", target, Outcome.FAILED, str(exc))
        meta = remaining.get("metadata", {}) if remaining.get("kind") == "Pod" else {}
        held_by = list(meta.get("finalizers") or [])
        if not held_by:
            return ActionResult("purge", target, Outcome.DONE, "deleted with grace 0")
        strip = [f for f in held_by if f in action.strip_finalizers]
        if not strip:
            return ActionResult(
                "purge",
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
                return ActionResult("purge", target, Outcome.DONE, "deleted")
            if exc.is_conflict or exc.status == 422:
                return ActionResult("purge", target, Outcome.CONFLICT, str(exc))
            return ActionResult("purge", target, Outcome.FAILED, str(exc))
        detail = f"deleted; stripped finalizers {', '.join(strip)}"
        if keep:
            detail += f"; {', '.join(keep)} still hold it"
        return ActionResult("purge", target, Outcome.DONE, detail)

    async def release_volume(self, name: str, deadline: Deadline) -> ActionResult:
        try:
            await self.kube.delete_volume_attachment(name, deadline)
        except KubeError as exc:
            if exc.status == 404:
                return ActionResult("release-volume", name, Outcome.ALREADY, "already gone")
            return ActionResult("release-volume", name, Outcome.FAILED, str(exc))
        return ActionResult("release-volume", name, Outcome.DONE, "VolumeAttachment deleted")

    async def purge(self, actions: list[PurgePodAction], deadline: Deadline) -> list[ActionResult]:
        """Bounded concurrency: a thousand stuck pods must not become a thousand open sockets."""
        semaphore = asyncio.Semaphore(self.purge_concurrency)

        async def one(action: PurgePodAction) -> ActionResult:
            async with semaphore:
                return await self.purge_pod(action, deadline)

        return list(await asyncio.gather(*(one(a) for a in actions)))
