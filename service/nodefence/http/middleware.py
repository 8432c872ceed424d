"""Per-request observation: one structured log line and the HTTP metrics for every request.

It is the outermost middleware, so it sees the status after errors became problem responses.
Only method, route, status and timing are recorded, never headers or bodies, which may carry
credentials; a handler may add what it learned of the request (``LOG_FIELDS``: an alert
webhook's receiver, group key and counts), so a webhook is one line, not two, on the path that
must stay cheapest.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import time
from typing import Any

import structlog
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from nodefence.observability.logging import get_logger
from nodefence.observability.metrics import Metrics

REQUEST_ID_HEADER = "X-Request-Id"
# Nginx's convention for "client closed the connection before the response".
CLIENT_CLOSED = 499
_QUIET_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
_SAFE_REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
LOG_FIELDS = web.RequestKey("nodefence.log_fields", dict[str, Any])

log = get_logger("nodefence.http")


def route_label(request: web.Request) -> str:
    """The route template, so metrics stay bounded whatever paths callers probe."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


def _request_id(request: web.Request) -> str:
    given = request.headers.get(REQUEST_ID_HEADER, "")
    # 32 hex digits, as long as a UUID's, from the same random source.
    return given if _SAFE_REQUEST_ID.fullmatch(given) else secrets.token_hex(16)


def observe_middleware(metrics: Metrics) -> Middleware:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        request_id = _request_id(request)
        started = time.perf_counter()
        status = 500
        with structlog.contextvars.bound_contextvars(request_id=request_id):
            try:
                response = await handler(request)
                status = response.status
                response.headers[REQUEST_ID_HEADER] = request_id
                return response
            except web.HTTPException as exc:
                status = exc.status
                raise
            except asyncio.CancelledError:
                status = CLIENT_CLOSED
                raise
            finally:
                elapsed = time.perf_counter() - started
                metrics.http_request(route_label(request), request.method, status, elapsed)
                quiet = request.path in _QUIET_PATHS and status < 400
                emit = log.debug if quiet else log.info
                emit(
                    "http_request",
                    method=request.method,
                    path=request.path,
                    status=status,
                    duration_ms=round(elapsed * 1000, 2),
                    **request.get(LOG_FIELDS, {}),
                )

    return middleware
