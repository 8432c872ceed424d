"""Reading a watch stream, for every follower of the API (the node index, the pause switch).

Both resume from the last resourceVersion they saw, so a cut or garbled line is a broken stream
to reopen, never an event to guess at; and an ``ERROR`` event (a version the server no longer
holds, say) is the server's answer, raised as the status it carries.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import aiohttp

from nodefence.kube.client import KubeError, Stream

Event = dict[str, Any]


async def follow(stream: Stream, apply: Callable[[Event], None]) -> None:
    """Hand each event to ``apply`` until the server ends the stream; the stream is closed
    whatever happens."""
    try:
        while line := await stream.next_line():
            if line.strip():
                apply(json.loads(line))
    except ValueError as exc:
        raise aiohttp.ClientPayloadError(f"unreadable watch event: {exc}") from exc
    finally:
        stream.close()


def parts(event: Event) -> tuple[str, dict[str, Any], str]:
    """The event's type, object and the object's resourceVersion ("" when it has none)."""
    kind = str(event.get("type") or "")
    obj: dict[str, Any] = event.get("object") or {}
    if kind == "ERROR":
        raise KubeError(
            int(obj.get("code") or 500),
            str(obj.get("reason", "")),
            str(obj.get("message", "")),
            obj,
        )
    version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
    return kind, obj, version
