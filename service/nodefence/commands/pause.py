"""``nodefence pause --reason TEXT`` and ``nodefence resume``: the cluster-wide pause switch.

The switch is the annotation ``nodefence.io/paused: "true"`` on the ConfigMap
``nodefence-control`` in nodefence's namespace, which every replica follows
(``kube/pause_watch.py``) and may never write; these commands write it with the operator's
credentials, beside who paused (``nodefence.io/paused-by``), why
(``nodefence.io/paused-reason``) and when (``nodefence.io/paused-at``, the ``Date`` of the API
server's reply read just before the write: its clock, not this machine's). A pause set by hand
with ``kubectl annotate`` is read the same way and dated by the API server's stamp on the write
that set it.

Every write carries the resourceVersion it was computed from (or is a create), so two operators
pausing at once cannot lose each other's change: the loser reads again and writes again. Pausing
when already paused with the same reason by the same person writes nothing; resuming when not
paused writes nothing. Each change is also an Event on the ConfigMap, so ``kubectl describe``
keeps the history the annotations (which hold only the latest word) do not.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

from nodefence.commands.common import namespace_event
from nodefence.commands.failures import CommandRefusedError
from nodefence.engine.model import PREFIX
from nodefence.engine.printable import printable, printable_lines
from nodefence.engine.wording import instant
from nodefence.kube import pause_watch
from nodefence.kube.client import Dated, Deadline, Json, KubeClient, KubeError
from nodefence.kube.pause_watch import CONTROL_CONFIGMAP, PAUSED, PAUSED_AT, PAUSED_REASON

PAUSED_BY = PREFIX + "paused-by"
PAUSE_KEYS = (PAUSED, PAUSED_REASON, PAUSED_BY, PAUSED_AT)
MAX_ATTEMPTS = 5


@dataclasses.dataclass(frozen=True)
class PauseState:
    paused: bool
    reason: str = ""
    by: str = ""
    # On the API server's clock.
    at: datetime | None = None
    where: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "paused": self.paused,
            "reason": self.reason or None,
            "by": self.by or None,
            "at": instant(self.at) if self.at is not None else None,
            "switch": self.where,
        }


def where(namespace: str) -> str:
    return f"ConfigMap {namespace}/{CONTROL_CONFIGMAP}, annotation {PAUSED}"


def pause_state(configmap: Json, namespace: str) -> PauseState:
    """The switch as a ConfigMap holds it (``{}`` for an absent one: not paused)."""
    notes = (configmap.get("metadata") or {}).get("annotations") or {}
    if str(notes.get(PAUSED, "")).strip().lower() != "true":
        return PauseState(False, where=where(namespace))
    return PauseState(
        True,
        reason=str(notes.get(PAUSED_REASON, "")).strip(),
        by=str(notes.get(PAUSED_BY, "")).strip(),
        # Dated as the receivers date it (their paused-since metric): paused-at, else the API
        # server's stamp on the write of the annotation, never by what a writer says.
        at=pause_watch.pause_state(configmap, namespace).since,
        where=where(namespace),
    )


async def read_switch(
    kube: KubeClient, namespace: str, deadline: Deadline
) -> tuple[Json | None, datetime | None]:
    """The control ConfigMap (None when absent) and the API server's clock at the read."""
    try:
        reply = await kube.get_configmap_dated(namespace, CONTROL_CONFIGMAP, deadline)
    except KubeError as exc:
        if exc.status != 404:
            raise
        return None, None
    return reply.body, reply.server_time


def _body(namespace: str, current: Json | None, annotations: dict[str, str]) -> Json:
    if current is None:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": CONTROL_CONFIGMAP,
                "namespace": namespace,
                "labels": {"app.kubernetes.io/name": "nodefence"},
                "annotations": annotations,
            },
        }
    meta = dict(current.get("metadata") or {})
    meta.pop("managedFields", None)
    meta["annotations"] = annotations
    return {**current, "metadata": meta}


async def _write(
    kube: KubeClient,
    namespace: str,
    current: Json | None,
    notes: dict[str, str],
    deadline: Deadline,
) -> Dated | None:
    """Create, or replace on the resourceVersion read; None when someone else wrote first."""
    body = _body(namespace, current, notes)
    try:
        if current is None:
            return await kube.create_configmap(namespace, body, deadline)
        return await kube.replace_configmap(namespace, CONTROL_CONFIGMAP, body, deadline)
    except KubeError as exc:
        if exc.status == 409:
            return None
        raise


async def pause(
    kube: KubeClient,
    *,
    namespace: str,
    reason: str,
    by: str,
    identity: str,
    deadline: Deadline,
    force: bool = False,
) -> dict[str, Any]:
    """Pause, or refuse to replace another pause (its who, when and why would be lost, and the
    alert on a long pause would start again) unless ``force``."""
    reason = reason.strip()
    if not reason:
        raise CommandRefusedError("--reason must say why nodefence is paused")
    for _attempt in range(MAX_ATTEMPTS):
        current, server_time = await read_switch(kube, namespace, deadline)
        state = pause_state(current or {}, namespace)
        if state.paused and state.reason == reason and state.by == by:
            return {"changed": False, **state.as_dict()}
        if state.paused and not force:
            raise CommandRefusedError(
                f"nodefence is already {describe(state.as_dict())}; --force replaces that "
                "pause (who, when and why) with yours, or `nodefence resume` lifts it"
            )
        notes = {
            str(k): str(v)
            for k, v in ((current or {}).get("metadata", {}).get("annotations") or {}).items()
        }
        notes.update({PAUSED: "true", PAUSED_REASON: reason, PAUSED_BY: by})
        notes.pop(PAUSED_AT, None)
        if server_time is not None:
            notes[PAUSED_AT] = instant(server_time)
        written = await _write(kube, namespace, current, notes, deadline)
        if written is None:
            continue
        now = pause_state(written.body, namespace)
        verb = "updated the pause" if state.paused else "paused nodefence"
        await _event(
            kube,
            written.body,
            namespace,
            reason="NodefencePaused",
            message=f"{by} {verb}: {reason}",
            identity=identity,
            deadline=deadline,
        )
        return {"changed": True, **now.as_dict()}
    raise CommandRefusedError("the pause switch kept changing while nodefence wrote it; try again")


async def resume(
    kube: KubeClient, *, namespace: str, by: str, identity: str, deadline: Deadline
) -> dict[str, Any]:
    for _attempt in range(MAX_ATTEMPTS):
        current, _server_time = await read_switch(kube, namespace, deadline)
        state = pause_state(current or {}, namespace)
        if current is None or not state.paused:
            return {"changed": False, **state.as_dict()}
        notes = {
            str(k): str(v)
            for k, v in (current.get("metadata", {}).get("annotations") or {}).items()
            if k not in PAUSE_KEYS
        }
        written = await _write(kube, namespace, current, notes, deadline)
        if written is None:
            continue
        was = f"paused by {state.by or 'someone'}" + (f": {state.reason}" if state.reason else "")
        await _event(
            kube,
            written.body,
            namespace,
            reason="NodefenceResumed",
            message=f"{by} resumed nodefence (it was {was})",
            identity=identity,
            deadline=deadline,
        )
        return {
            "changed": True,
            "resumedBy": by,
            "was": state.as_dict(),
            **pause_state(written.body, namespace).as_dict(),
        }
    raise CommandRefusedError("the pause switch kept changing while nodefence wrote it; try again")


async def _event(
    kube: KubeClient,
    configmap: Json,
    namespace: str,
    *,
    reason: str,
    message: str,
    identity: str,
    deadline: Deadline,
) -> None:
    await namespace_event(
        kube,
        namespace=namespace,
        kind="ConfigMap",
        name=CONTROL_CONFIGMAP,
        uid=str((configmap.get("metadata") or {}).get("uid") or ""),
        reason=reason,
        message=message,
        identity=identity,
        deadline=deadline,
    )


def describe(state: dict[str, Any]) -> str:
    """The switch in one line, for ``status`` and the commands' own output."""
    if not state["paused"]:
        return "not paused"
    by = state["by"] or "someone (no nodefence.io/paused-by)"
    at = state["at"] or "an unknown time"
    why = state["reason"] or "no reason given"
    return f"paused by {by} at {at}: {why}"


def pause_text(report: dict[str, Any]) -> str:
    if not report["changed"]:
        return printable(f"already {describe(report)} (nothing written)")
    return printable_lines(
        [
            f"nodefence is {describe(report)}",
            "No node is fenced, purged or unfenced until `nodefence resume`; every replica "
            "sees the switch within seconds.",
        ]
    )


def resume_text(report: dict[str, Any]) -> str:
    if not report["changed"]:
        return "nodefence is not paused (nothing written)"
    return printable(f"resumed by {report['resumedBy']}; it was {describe(report['was'])}")
