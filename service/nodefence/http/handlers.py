"""Route handlers. Bad input is answered here with a 4xx and never reaches the fencer."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from nodefence.alerts.events import extract_events
from nodefence.alerts.webhook import WebhookPayload
from nodefence.engine.model import Decision
from nodefence.engine.render import decision_to_dict
from nodefence.errors import ClusterUnavailableError
from nodefence.http.decisions import DECISIONS, observe_decisions
from nodefence.http.fencer_api import FencerApi
from nodefence.http.middleware import LOG_FIELDS
from nodefence.http.problems import Problem, validation_problem
from nodefence.observability.logging import get_logger
from nodefence.observability.metrics import CONTENT_TYPE, Metrics
from nodefence.settings import Settings

# When the deadline passes the work is abandoned; every action is idempotent, so the retry
# Alertmanager makes after this delay finishes it without doing anything twice.
DEADLINE_RETRY_AFTER_SECONDS = 5
_READ_CHUNK = 64 * 1024

log = get_logger("nodefence.http")


@dataclass
class ServiceState:
    shutting_down: bool = False


SETTINGS = web.AppKey("settings", Settings)
FENCER = web.AppKey("fencer", FencerApi)
METRICS = web.AppKey("metrics", Metrics)
STATE = web.AppKey("state", ServiceState)


def _require_json(request: web.Request) -> None:
    if request.content_type != "application/json":
        raise Problem(
            415,
            kind="unsupported-media-type",
            detail="The body must be an Alertmanager webhook sent as application/json.",
            headers={"Accept-Post": "application/json"},
        )


def _too_large(limit: int) -> Problem:
    return Problem(
        413,
        kind="body-too-large",
        detail=f"The body exceeds the limit of {limit} bytes.",
        close_connection=True,
    )


async def read_bounded(request: web.Request, limit: int) -> bytes:
    """The body, refusing it as soon as it is known to exceed ``limit`` bytes.

    A declared ``Content-Length`` over the limit is refused before anything is read; a chunked
    body is counted while it streams in, so memory use stays bounded by the limit either way.
    """
    if request.content_length is not None and request.content_length > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_chunked(_READ_CHUNK):
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def _parse_json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError as exc:
        raise Problem(400, kind="malformed-json", detail="The body is not valid JSON.") from exc
    except RecursionError as exc:
        # Nesting deeper than the parser's recursion limit: no webhook looks like that.
        raise Problem(
            400, kind="malformed-json", detail="The body nests JSON too deeply to be a webhook."
        ) from exc


async def _within_deadline(request: web.Request, work: Awaitable[list[Decision]]) -> list[Decision]:
    settings = request.app[SETTINGS]
    try:
        async with asyncio.timeout(settings.request_deadline_seconds):
            return await work
    except ClusterUnavailableError as exc:
        log.warning("cluster_unavailable", path=request.path, error=str(exc))
        raise Problem(
            503,
            kind=exc.problem_kind,
            detail=exc.public_detail,
            headers={"Retry-After": str(exc.retry_after_seconds)},
        ) from exc
    except TimeoutError as exc:
        log.warning(
            "request_deadline_exceeded",
            path=request.path,
            deadline_seconds=settings.request_deadline_seconds,
        )
        raise Problem(
            503,
            kind="deadline-exceeded",
            detail="The request did not finish in time; retry later.",
            headers={"Retry-After": str(DEADLINE_RETRY_AFTER_SECONDS)},
        ) from exc


def _decisions_response(request: web.Request, decisions: list[Decision]) -> web.Response:
    observe_decisions(request.app[METRICS], request.app.get(DECISIONS), decisions, request.path)
    return web.json_response({"decisions": [decision_to_dict(d) for d in decisions]})


async def post_alerts(request: web.Request) -> web.Response:
    settings = request.app[SETTINGS]
    fencer = request.app[FENCER]
    _require_json(request)
    document = _parse_json(await read_bounded(request, settings.max_body_bytes))
    try:
        payload = WebhookPayload.model_validate(document)
    except ValidationError as exc:
        raise validation_problem(
            exc, detail="The body is not an Alertmanager webhook payload of version 4."
        ) from exc
    events = extract_events(payload, alert_names=fencer.alert_names, node_labels=fencer.node_labels)
    # Said in the request's own log line (``http.middleware``), with its status and duration.
    request[LOG_FIELDS] = {
        "receiver": payload.receiver,
        "group_key": payload.group_key,
        "alerts": len(payload.alerts),
        "events": len(events),
    }
    if payload.truncated_alerts:
        log.warning(
            "webhook_truncated",
            truncated_alerts=payload.truncated_alerts,
            detail="Alertmanager dropped alerts from this notification (max_alerts); "
            "the reconcile pass covers their nodes",
        )
    metrics = request.app[METRICS]
    for event in events:
        metrics.alert_received(event.alertname, event.status.value)
    decisions = await _within_deadline(request, fencer.handle_events(events))
    return _decisions_response(request, decisions)


async def post_reconcile(request: web.Request) -> web.Response:
    decisions = await _within_deadline(request, request.app[FENCER].reconcile())
    return _decisions_response(request, decisions)


async def get_healthz(_: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def get_readyz(request: web.Request) -> web.Response:
    if request.app[STATE].shutting_down:
        raise Problem(503, kind="not-ready", detail="The service is shutting down.")
    try:
        async with asyncio.timeout(request.app[SETTINGS].request_deadline_seconds):
            ready, reason = await request.app[FENCER].ready()
    except Exception:
        log.exception("readiness_check_failed")
        ready, reason = False, "the readiness check failed; see the service log"
    if not ready:
        raise Problem(503, kind="not-ready", detail=reason)
    return web.json_response({"status": "ready", "reason": reason})


async def get_metrics(request: web.Request) -> web.Response:
    return web.Response(
        body=request.app[METRICS].exposition(), headers={"Content-Type": CONTENT_TYPE}
    )
