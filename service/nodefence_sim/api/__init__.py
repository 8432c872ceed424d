"""The Kubernetes REST API over the simulator's store."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
from collections.abc import Awaitable, Callable
from datetime import UTC
from email.utils import format_datetime

from aiohttp import web
from aiohttp.typedefs import Middleware

from nodefence_sim.api.discovery import add_discovery_routes
from nodefence_sim.api.fault_routes import add_fault_routes
from nodefence_sim.api.fieldvalidation import add_warning_headers
from nodefence_sim.api.handlers import ResourceHandlers
from nodefence_sim.api.health import add_health_routes
from nodefence_sim.api.openapi import add_openapi_routes
from nodefence_sim.api.paths import is_watch, not_served, verb_for
from nodefence_sim.errors import ApiError, NotServed
from nodefence_sim.faults import Fault, Faults, faults_of
from nodefence_sim.simulation import Simulation

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_KUBE_PREFIXES = ("/api", "/apis", "/version", "/openapi")


def is_kube_path(path: str) -> bool:
    """Kubernetes API paths (faults and the request log apply); not ``/sim/v1`` or metrics."""
    return any(path == p or path.startswith(p + "/") for p in _KUBE_PREFIXES)


def status_response(error: ApiError) -> web.Response:
    if isinstance(error, NotServed):
        return web.Response(
            status=404,
            text=NotServed.TEXT,
            content_type="text/plain",
            charset="utf-8",
            headers={"X-Content-Type-Options": "nosniff"},
        )
    headers = {}
    if error.retry_after is not None:
        headers["Retry-After"] = str(error.retry_after)
    return web.Response(
        status=error.code,
        body=json.dumps(error.status()).encode(),
        content_type="application/json",
        headers=headers,
    )


def _http_error(exc: web.HTTPException, path: str) -> ApiError:
    if exc.status == 404:
        if not_served(path):
            return NotServed()
        return ApiError(404, "NotFound", "the server could not find the requested resource")
    if exc.status == 405:
        return ApiError(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
    return ApiError(exc.status, "Unknown", exc.reason)


def _reset(request: web.Request) -> None:
    """Close the connection with a TCP RST, as a crashing server or a load balancer does."""
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


def _fault_error(fault: Fault, request: web.Request) -> ApiError:
    if fault.action == "conflict":
        return ApiError(
            409,
            "Conflict",
            fault.message
            or f"Operation cannot be fulfilled on {request.path}: the object has been modified; "
            "please apply your changes to the latest version and try again",
        )
    if fault.action == "down":
        return ApiError(
            503,
            "ServiceUnavailable",
            fault.message or "the server is currently unable to handle the request",
            retry_after=fault.retry_after,
        )
    if fault.action == "hang":
        return ApiError(504, "Timeout", "the server was unable to return a response in time")
    reasons = {
        429: "TooManyRequests",
        500: "InternalError",
        503: "ServiceUnavailable",
        504: "Timeout",
        409: "Conflict",
    }
    retry_after = fault.retry_after
    if fault.status == 429 and retry_after is None:
        retry_after = 1
    return ApiError(
        fault.status,
        reasons.get(fault.status, "Unknown"),
        fault.message or f"injected fault: {fault.status}",
        retry_after=retry_after,
    )


def _middleware(faults: Faults) -> Middleware:
    @web.middleware
    async def kube_api(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not is_kube_path(request.path):
            return await handler(request)
        verb = verb_for(request.method, request.path, is_watch(request.query))
        fault = faults.decide(verb, request.path)
        entry = faults.record(request.method, request.path, request.query_string, verb)
        status = 0
        try:
            if fault.latency > 0:
                await asyncio.sleep(fault.latency)
            if fault.action == "reset":
                _reset(request)
                return web.Response(status=500)
            if fault.action == "hang":
                await asyncio.sleep(fault.hang_seconds)
            if fault.action is not None:
                raise _fault_error(fault, request)
            response = await handler(request)
            status = response.status
            return response
        except ApiError as exc:
            status = exc.code
            return status_response(exc)
        except web.HTTPException as exc:
            error = _http_error(exc, request.path)
            status = error.code
            return status_response(error)
        finally:
            entry.status = status

    return kube_api


def add_date_header(app: web.Application, sim: Simulation) -> None:
    """Every response (API, control surface, metrics, errors, watches) carries ``Date`` from
    the simulated API server's clock, which is the clock a client may judge liveness on; the
    hook runs before the headers are sent, so it also covers streamed watch responses."""

    async def stamp(_request: web.Request, response: web.StreamResponse) -> None:
        response.headers["Date"] = format_datetime(sim.store.now().astimezone(UTC), usegmt=True)

    app.on_response_prepare.append(stamp)


def add_api_routes(app: web.Application, sim: Simulation) -> None:
    """Register discovery and resource routes for every served type, the fault-injection
    middleware in front of them, the ``/sim/v1`` fault and request-log routes, and the
    server's ``Date`` on every response of the application."""
    add_date_header(app, sim)
    add_warning_headers(app)
    faults = faults_of(sim)
    app.middlewares.append(_middleware(faults))
    add_fault_routes(app, faults)
    add_discovery_routes(app, sim)
    add_health_routes(app)
    add_openapi_routes(app)
    handlers = ResourceHandlers(sim)
    app.router.add_route("*", "/api/v1/{tail:.+}", handlers.dispatch)
    app.router.add_route("*", "/apis/{group}/{version}/{tail:.+}", handlers.dispatch)
