"""``?watch=true``: a chunked stream of ``{"type": ..., "object": ...}`` lines.

As on a real server the response is always 200 once the stream starts; a resourceVersion too
old for the retained history arrives as an ``ERROR`` event carrying a 410 ``Status``, which is
what informers and ``kubectl get -w`` expect.

A streaming list (``sendInitialEvents=true&resourceVersionMatch=NotOlderThan``, what client-go
and kubectl send with the WatchList feature) opens with an ``ADDED`` event per matching object
and, when bookmarks are allowed, the ``BOOKMARK`` annotated ``k8s.io/initial-events-end`` at the
resourceVersion of that state; clients wait for that bookmark before they trust their cache.
A watch from resourceVersion ``""`` or ``"0"`` naming neither option is defaulted to one, as a
real server does. ``sendInitialEvents=false`` sends no state: it replays from the requested
resourceVersion, or starts at the current one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

from nodefence_sim.api.listoptions import ListOptions, list_options
from nodefence_sim.api.paths import Target
from nodefence_sim.errors import ApiError
from nodefence_sim.resources import ResourceType
from nodefence_sim.simulation import Simulation
from nodefence_sim.store import Obj, Store

# A real server closes watches after a random 30-60 minutes when the client sets no timeout.
DEFAULT_TIMEOUT = 1800.0
_POLL = 0.5

INITIAL_EVENTS_END = "k8s.io/initial-events-end"

Render = Callable[[str, dict[str, Any]], dict[str, Any]]


def _line(event_type: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": event_type, "object": obj}, separators=(",", ":")).encode() + b"\n"


def initial_events_end(rt: ResourceType, resource_version: str) -> Obj:
    """The bookmark that closes the initial events: an empty object of the watched type at the
    resourceVersion of the state just sent. What clients read of it is its kind and metadata;
    the zero-valued ``spec`` and ``status`` a real server's encoder adds are left out."""
    return {
        "kind": rt.kind,
        "apiVersion": rt.group_version,
        "metadata": {
            "resourceVersion": resource_version,
            "annotations": {INITIAL_EVENTS_END: "true"},
        },
    }


def opening(
    store: Store,
    target: Target,
    options: ListOptions,
    label_selector: str | None,
    field_selector: str | None,
) -> tuple[list[tuple[str, Obj]], str]:
    """The events a watch starts with and the resourceVersion its live events follow.

    With initial events the state is read now, in one step, and live events follow its
    resourceVersion, whatever version was asked for: ``NotOlderThan`` lets a real watch cache
    serve any state at least as new. Without them the watch replays from the requested
    resourceVersion, or starts at the current one when that is ``""`` or ``"0"``.
    """
    if options.send_initial_events:
        objects, current = store.select(
            target.resource, target.namespace, label_selector, field_selector
        )
        events = [("ADDED", obj) for obj in objects]
        if options.allow_watch_bookmarks:
            events.append(("BOOKMARK", initial_events_end(target.resource, current)))
        return events, current
    since = options.resource_version
    return [], store.resource_version if since in ("", "0") else since


async def serve_watch(
    request: web.Request,
    sim: Simulation,
    target: Target,
    render: Render,
) -> web.StreamResponse:
    query = request.query
    options = list_options(query, watch=True)
    field_selector = query.get("fieldSelector") or ""
    if target.name:
        name_field = f"metadata.name={target.name}"
        field_selector = f"{field_selector},{name_field}" if field_selector else name_field
    timeout = float(query.get("timeoutSeconds") or DEFAULT_TIMEOUT)
    labels = query.get("labelSelector")
    first, since = opening(sim.store, target, options, labels, field_selector or None)
    events = sim.store.watch(
        target.resource, target.namespace, labels, field_selector or None, since
    )
    response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
    response.enable_chunked_encoding()
    await response.prepare(request)

    async def pump() -> None:
        try:
            for event_type, obj in first:
                await response.write(_line(event_type, render(event_type, obj)))
            async for event in events:
                await response.write(_line(event.type, render(event.type, event.object)))
        except ApiError as exc:
            await response.write(_line("ERROR", exc.status()))

    task = asyncio.create_task(pump())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(timeout, 0.0)
    try:
        while not task.done():
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            await asyncio.wait({task}, timeout=min(_POLL, remaining))
            transport = request.transport
            if transport is None or transport.is_closing():
                break
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionError):
            await task
    with contextlib.suppress(ConnectionError):
        await response.write_eof()
    return response
