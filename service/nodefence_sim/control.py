"""The simulator's control surface: take nodes down, NotReady and up, skew a kubelet's clock
(``/sim/v1``).

This is how tests and the demo make a node die "20 minutes ago" without waiting: the body's
``sinceSeconds`` backdates the kubelet's last sign of life, and the controllers derive the rest
(NotReady, taints, evictions) before the answer is sent. Errors are JSON problem documents.

- ``POST /sim/v1/nodes/{name}/down`` ``{"sinceSeconds": N}`` (optional): the kubelet died N
  seconds ago. Its last Lease renewal (renewTime and the server's managedFields time) and status
  post are at that moment; Unknown, the unreachable taints and the pods' Ready=False follow from
  it. Taking a dead node down again keeps its death or moves it further back.
- ``POST /sim/v1/nodes/{name}/up`` ``{"sinceSeconds": S, "reboot": true}`` (both optional): the
  kubelet is back (or healthy again after ``notready``), Ready since S seconds ago but never
  since before it died; ``reboot`` gives a new bootID and restarts the pods.
- ``POST /sim/v1/nodes/{name}/notready`` ``{"reason": "ContainerRuntimeDown", "sinceSeconds":
  600}`` (both optional; reason defaults to ``KubeletNotReady``, a condition reason: letters,
  digits, ``_``, ``,`` and ``:``, starting with a letter): the kubelet is alive but its runtime,
  CNI or PLEG is not. It keeps renewing its Lease (the server's managedFields time is now) and
  posting status, with Ready=False for that reason since S seconds ago (stamped from its own,
  possibly skewed, clock; never since before it died). The server recorded that post S seconds
  ago, and the not-ready taints, the pods' Ready=False and, past their toleration, evictions
  follow from that moment. Its pods stay Running, their containers writing to their volumes;
  evicted ones stay ``Terminating`` (the kubelet cannot stop them). Calling it again changes the
  reason and keeps the transition unless S moves it further back; ``up`` ends it.
- ``POST /sim/v1/nodes/{name}/clock`` ``{"skewSeconds": -600}``: from now on the node's kubelet
  reads a clock that far off the API server's and stamps everything it writes from it (renewTime,
  heartbeats, transitions, pod times) while it keeps renewing; ``0`` sets it right. Times the
  server stamps (managedFields, ``Date``) stay on the server's clock.
- ``POST /sim/v1/nodes/{name}/recreate``: delete the Node and register it anew (new UID).
- ``GET /sim/v1/nodes`` and ``GET /sim/v1/nodes/{name}``: the nodes as the control surface sees
  them (kubelet up or down, clock skew, Ready and since when, lease renewal, taints).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any

from aiohttp import web

from nodefence_sim.controllers.kubelet import NOT_READY_REASON
from nodefence_sim.errors import ApiError
from nodefence_sim.simulation import Simulation

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


# The API server's rule for a condition's reason (metav1.Condition validation).
CONDITION_REASON = re.compile(r"[A-Za-z](?:[A-Za-z0-9_,:]{0,1022}[A-Za-z0-9_])?")
# Ten years: any further and a moment falls off the calendar the timestamps can express.
MAX_SECONDS = 10 * 365 * 86400


def _seconds(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


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
    skew = body.get("skewSeconds", 0)
    if not _seconds(skew) or abs(skew) > MAX_SECONDS:
        raise _BadRequest(f"skewSeconds must be a number of seconds between ±{MAX_SECONDS}")
    since = body.get("sinceSeconds", 0)
    if not _seconds(since) or not 0 <= since <= MAX_SECONDS:
        raise _BadRequest(f"sinceSeconds must be a number of seconds from 0 to {MAX_SECONDS}")
    if not isinstance(body.get("reboot", False), bool):
        raise _BadRequest("reboot must be true or false")
    reason = body.get("reason", NOT_READY_REASON)
    if not isinstance(reason, str) or not CONDITION_REASON.fullmatch(reason):
        raise _BadRequest(
            "reason must be a condition reason in CamelCase (letters, digits, '_', ',' or ':',"
            " starting with a letter, at most 1024 characters), e.g. ContainerRuntimeDown"
        )
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

    async def not_ready(request: web.Request) -> web.StreamResponse:
        body = await _body(request, frozenset({"sinceSeconds", "reason"}))
        state = sim.node_not_ready(
            request.match_info["name"],
            since_seconds=body.get("sinceSeconds", 0),
            reason=body.get("reason", NOT_READY_REASON),
        )
        return web.json_response(state)

    async def clock(request: web.Request) -> web.StreamResponse:
        body = await _body(request, frozenset({"skewSeconds"}))
        if "skewSeconds" not in body:
            raise _BadRequest("skewSeconds is required (0 sets the clock right)")
        name = request.match_info["name"]
        return web.json_response(sim.node_clock(name, skew_seconds=body["skewSeconds"]))

    async def recreate(request: web.Request) -> web.StreamResponse:
        await _body(request, frozenset())
        return web.json_response(sim.recreate_node(request.match_info["name"]))

    app.router.add_get(PREFIX, _guarded(list_nodes))
    app.router.add_get(PREFIX + "/{name}", _guarded(get_node))
    app.router.add_post(PREFIX + "/{name}/down", _guarded(down))
    app.router.add_post(PREFIX + "/{name}/up", _guarded(up))
    app.router.add_post(PREFIX + "/{name}/notready", _guarded(not_ready))
    app.router.add_post(PREFIX + "/{name}/clock", _guarded(clock))
    app.router.add_post(PREFIX + "/{name}/recreate", _guarded(recreate))
