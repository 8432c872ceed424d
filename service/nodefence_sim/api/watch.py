"""``?watch=true``: a chunked stream of ``{"type": ..., "object": ...}`` lines.

As on a real server the response is always 200 once the stream starts; a resourceVersion too
old for the retained history arrives as an ``ERROR`` event carrying a 410 ``Status``, which is
what informers and ``kubectl get -w`` expect.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

from nodefence_sim.api.paths import Target
from nodefence_sim.errors import ApiError
from nodefence_sim.simulation import Simulation

# A real server closes watches after a random 30-60 minutes when the client sets no timeout.
DEFAULT_TIMEOUT = 1800.0
_POLL = 0.5

Render = Callable[[str, dict[str, Any]], dict[str, Any]]


def _line(event_type: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": event_type, "object": obj}, separators=(",", ":")).encode() + b"\n"


async def serve_watch(
    request: web.Request,
    sim: Simulation,
    target: Target,
    render: Render,
) -> web.StreamResponse:
    query = request.query
    field_selector = query.get("fieldSelector") or ""
    if target.name:
        name_field = f"metadata.name={target.name}"
        field_selector = f"{field_selector},{name_field}" if field_selector else name_field
    timeout = float(query.get("timeoutSeconds") or DEFAULT_TIMEOUT)
    events = sim.store.watch(
        target.resource,
        target.namespace,
        query.get("labelSelector"),
        field_selector or None,
        query.get("resourceVersion"),
    )
    response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
    response.enable_chunked_encoding()
    await response.prepare(request)

    async def pump() -> None:
        try:
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
