"""The simulator's control surface: take nodes down and up (``/sim/v1``).

This is how tests and the demo make a node die "20 minutes ago" without waiting: the body's
``sinceSeconds`` backdates the kubelet's last sign of life, and the controllers derive the rest
(NotReady, taints, evictions) before the answer is sent. Errors are JSON problem documents.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any

from aiohttp import web

from nodefence.sim.errors import ApiError
from nodefence.sim.simulation import Simulation

PREFIX = "/sim/v1/nodes"
PROBLEM_TYPE = "application/problem+json"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def problem(status: int, detail: str) -> web.Response:
    body = {
        "type": "about:blank",
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
    }
    return web.Response(status=status, text=json.dumps(body), content_type=PROBLEM_TYPE)


class _BadRequest(Exception):
    """A body the control surface refuses (answered 400)."""


async def _body(request: web.Request, allowed: frozenset[str]) -> dict[str, Any]:
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _BadRequest(f"the body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise _BadRequest("the body must be a JSON object")
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise _BadRequest(
            f"unknown fields: {', '.join(unknown)} (allowed: {', '.join(sorted(allowed))})"
        )
    since = body.get("sinceSeconds", 0)
    if isinstance(since, bool) or not isinstance(since, int | float) or since < 0:
        raise _BadRequest("sinceSeconds must be a non-negative number")
    if not isinstance(body.get("reboot", False), bool):
        raise _BadRequest("reboot must be true or false")
    return body


def _guarded(handler: Handler) -> Handler:
    async def wrapper(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except _BadRequest as exc:
            return problem(400, str(exc))
        except ApiError as exc:
            return problem(exc.code, exc.message)

    return wrapper


def add_control_routes(app: web.Application, sim: Simulation) -> None:
    async def list_nodes(_request: web.Request) -> web.StreamResponse:
        return web.json_response({"nodes": sim.node_states()})

    async def get_node(request: web.Request) -> web.StreamResponse:
        return web.json_response(sim.node_state(request.match_info["name"]))

    async def down(request: web.Request) -> web.StreamResponse:
        body = await _body(request, frozenset({"sinceSeconds"}))
        name = request.match_info["name"]
        return web.json_response(sim.node_down(name, since_seconds=body.get("sinceSeconds", 0)))

    async def up(request: web.Request) -> web.StreamResponse:
        body = await _body(request, frozenset({"sinceSeconds", "reboot"}))
        state = sim.node_up(
            request.match_info["name"],
            since_seconds=body.get("sinceSeconds", 0),
            reboot=body.get("reboot", False),
        )
        return web.json_response(state)

    async def recreate(request: web.Request) -> web.StreamResponse:
        await _body(request, frozenset())
        return web.json_response(sim.recreate_node(request.match_info["name"]))

    app.router.add_get(PREFIX, _guarded(list_nodes))
    app.router.add_get(PREFIX + "/{name}", _guarded(get_node))
    app.router.add_post(PREFIX + "/{name}/down", _guarded(down))
    app.router.add_post(PREFIX + "/{name}/up", _guarded(up))
    app.router.add_post(PREFIX + "/{name}/recreate", _guarded(recreate))
