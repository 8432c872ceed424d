"""Assembly of the receiver application and its serving loop with graceful shutdown."""

from __future__ import annotations

import asyncio
import signal

from aiohttp import web

from nodefence.background.runner import Runner
from nodefence.http import handlers, openapi
from nodefence.http.auth import Authenticator, auth_middleware, warn_if_disabled
from nodefence.http.decisions import DecisionLog, add_decision_routes
from nodefence.http.fencer_api import FencerApi
from nodefence.http.handlers import FENCER, METRICS, SETTINGS, STATE, ServiceState
from nodefence.http.limits import (
    ConnectionGuards,
    GuardedSite,
    ReadLimits,
    read_limits_middleware,
)
from nodefence.http.middleware import observe_middleware
from nodefence.http.problems import problem_middleware
from nodefence.http.tls import REASONS as TLS_REFUSALS
from nodefence.http.tls import TlsCertificates
from nodefence.observability.logging import get_logger
from nodefence.observability.metrics import Metrics
from nodefence.settings import Settings
from nodefence.slack.routes import NO_SLACK, SlackIntegration, add_slack_routes

__all__ = ["GUARDS", "PROTECTED_PATHS", "build_app", "run"]

PROTECTED_PATHS = frozenset({"/alerts", "/reconcile", "/decisions"})
# The read deadlines of the open connections (``http.limits``), shared by the middleware that
# ends a request's header deadline and the site that arms it.
GUARDS = web.AppKey("read_guards", ConnectionGuards)

log = get_logger("nodefence.http")


def build_app(
    settings: Settings,
    fencer: FencerApi,
    *,
    metrics: Metrics | None = None,
    slack: SlackIntegration = NO_SLACK,
    decisions: DecisionLog | None = None,
) -> web.Application:
    """The receiver. Pass ``metrics`` to share one registry with the fencer's own counters,
    ``slack`` (from ``runtime.build_service``) to answer Slack's approval buttons, and
    ``decisions`` to share ``GET /decisions``'s memory with the reconcile loop."""
    warn_if_disabled(settings)
    metrics = metrics if metrics is not None else Metrics()
    guards = ConnectionGuards(
        ReadLimits(
            header_seconds=settings.header_timeout_seconds,
            body_seconds=settings.body_timeout_seconds,
            idle_seconds=settings.idle_timeout_seconds,
        )
    )
    app = web.Application(
        # Also bounds bodies of routes that read them with aiohttp's own helpers.
        client_max_size=settings.max_body_bytes,
        middlewares=[
            observe_middleware(metrics),
            problem_middleware,
            read_limits_middleware(guards),
            auth_middleware(Authenticator(settings), PROTECTED_PATHS, metrics),
        ],
    )
    app[GUARDS] = guards
    app[SETTINGS] = settings
    app[FENCER] = fencer
    app[METRICS] = metrics
    app[STATE] = ServiceState()
    app.router.add_post("/alerts", handlers.post_alerts)
    metrics.http_errors_expected("/alerts", "POST")
    app.router.add_post("/reconcile", handlers.post_reconcile)
    app.router.add_get("/healthz", handlers.get_healthz)
    app.router.add_get("/readyz", handlers.get_readyz)
    app.router.add_get("/metrics", handlers.get_metrics)
    add_decision_routes(app, decisions or DecisionLog())
    app.router.add_get(openapi.OPENAPI_PATH, openapi.get_openapi)
    add_slack_routes(app, settings, slack)
    return app


async def run(
    settings: Settings,
    fencer: FencerApi,
    *,
    metrics: Metrics | None = None,
    stop: asyncio.Event | None = None,
    slack: SlackIntegration = NO_SLACK,
    decisions: DecisionLog | None = None,
    background: Runner | None = None,
) -> None:
    """Serve until SIGTERM or SIGINT (or ``stop`` is set), then shut down gracefully.

    On the signal the listener closes at once, ``/readyz`` turns 503, requests in flight get up
    to ``request_deadline_seconds`` to finish, and only then is the fencer closed, so no
    decision is cut off between its write to the cluster and its answer to Alertmanager.

    With ``tls_cert_file`` and ``tls_key_file`` the listener speaks HTTPS only, and the pair is
    re-read when the files change (``http.tls``); every connection has the read deadlines of
    ``http.limits``.

    ``background`` (``runtime.background_for``) runs while the listener serves; a pass in
    progress at shutdown finishes beside the requests in flight.
    """
    app = build_app(settings, fencer, metrics=metrics, slack=slack, decisions=decisions)
    tls: TlsCertificates | None = None
    if settings.tls_cert_file is not None and settings.tls_key_file is not None:
        served = app[METRICS]
        served.tls_reload_failures_expected(TLS_REFUSALS)
        tls = TlsCertificates(
            settings.tls_cert_file, settings.tls_key_file, refused=served.tls_reload_failed
        )
    background = background if background is not None else Runner([])
    runner = web.AppRunner(
        app,
        access_log=None,
        handle_signals=False,
        shutdown_timeout=settings.request_deadline_seconds,
        # How long a kept-alive connection may wait idle for its next request.
        keepalive_timeout=settings.idle_timeout_seconds,
    )
    stopping = stop if stop is not None else asyncio.Event()
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(signum, stopping.set)
        except (NotImplementedError, RuntimeError, ValueError):
            continue
        installed.append(signum)
    await runner.setup()
    try:
        site = GuardedSite(
            runner,
            settings.host,
            settings.port,
            guards=app[GUARDS],
            ssl_context=tls.listener if tls is not None else None,
        )
        await site.start()
        background.start()
        log.info(
            "listening",
            addresses=[str(address) for address in runner.addresses],
            identity=settings.identity,
            namespace=settings.namespace,
            dry_run=settings.dry_run,
            tls=tls is not None,
            header_timeout_seconds=settings.header_timeout_seconds,
            body_timeout_seconds=settings.body_timeout_seconds,
        )
        await stopping.wait()
        log.info("shutting_down", grace_seconds=settings.request_deadline_seconds)
        app[STATE].shutting_down = True
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)
        # A reconcile pass in progress and requests in flight finish side by side.
        await asyncio.gather(background.stop(), runner.cleanup())
        await fencer.close()
        log.info("stopped")
