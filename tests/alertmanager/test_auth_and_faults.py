"""Authentication, TLS and every way asking Alertmanager can fail: a clear error that names the
URL and the cause, and never a credential."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from bench.processes import free_port

from nodefence.alertmanager.client import AlertmanagerUnavailableError, active_alerts
from nodefence.alertmanager.config import AlertmanagerConfig
from nodefence.policy import DEFAULT_ALERT_NAMES

from .conftest import PASSWORD, USER, RealAlertmanager, Served, Starter, alert, poll

NAMES = list(DEFAULT_ALERT_NAMES)
TOKEN = "s3cr3t-bearer-token-of-the-tests"
Serve = Callable[[web.Application], Any]


async def nodes(config: AlertmanagerConfig) -> list[str]:
    return sorted(e.node for e in await active_alerts(config, NAMES, ["node"]) if e.node)


async def failure(config: AlertmanagerConfig) -> str:
    with pytest.raises(AlertmanagerUnavailableError) as caught:
        await active_alerts(config, NAMES, ["node"])
    message = str(caught.value)
    assert config.alerts_url in message
    for secret in (TOKEN, PASSWORD):
        assert secret not in message
    return message


async def test_basic_auth_of_alertmanager_itself(start_alertmanager: Starter) -> None:
    am = start_alertmanager(basic_auth=True)
    await am.post_alerts(alert("KubeNodeNotReady", node="n1"))
    good = AlertmanagerConfig(url=am.url, basic_user=USER, basic_password=PASSWORD)
    assert await nodes(good) == ["n1"]

    wrong = AlertmanagerConfig(url=am.url, basic_user=USER, basic_password=PASSWORD + "x")
    assert "refused the credentials (HTTP 401)" in await failure(wrong)
    assert "refused the credentials (HTTP 401)" in await failure(AlertmanagerConfig(url=am.url))


async def test_tls_verified_against_the_ca_bundle(start_alertmanager: Starter) -> None:
    am = start_alertmanager(tls=True, basic_auth=True)
    assert am.tls is not None
    await am.post_alerts(alert("KubeNodeNotReady", node="n1"))
    auth: dict[str, Any] = {"basic_user": USER, "basic_password": PASSWORD}
    assert await nodes(AlertmanagerConfig(url=am.url, ca_file=am.tls.cert, **auth)) == ["n1"]
    # Not in the system CAs: refused unless verification is explicitly off.
    assert "certificate" in (await failure(AlertmanagerConfig(url=am.url, **auth))).lower()
    assert await nodes(AlertmanagerConfig(url=am.url, insecure=True, **auth)) == ["n1"]


async def test_an_unreadable_ca_bundle_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "missing-ca.pem"
    config = AlertmanagerConfig(url="https://127.0.0.1:1", ca_file=missing, bearer_token=TOKEN)
    assert str(missing) in await failure(config)


def bearer_proxy(am: RealAlertmanager, prefix: str) -> web.Application:
    """A reverse proxy that serves Alertmanager under ``prefix`` and demands the bearer token,
    as an authenticating ingress in front of Alertmanager does."""

    async def forward(request: web.Request) -> web.StreamResponse:
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return web.Response(status=401, text="missing or wrong bearer token")
        path = request.path.removeprefix(prefix)
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{am.url}{path}", params=request.query) as upstream,
        ):
            return web.Response(
                status=upstream.status,
                body=await upstream.read(),
                content_type=upstream.content_type,
            )

    app = web.Application()
    app.router.add_get(prefix + "/{tail:.*}", forward)
    return app


async def test_bearer_token_through_a_proxy_under_a_path_prefix(
    start_alertmanager: Starter, serve: Serve
) -> None:
    am = start_alertmanager()
    await am.post_alerts(alert("KubeNodeNotReady", node="n1"), alert("KubeNodeNotReady"))
    proxy: Served = await serve(bearer_proxy(am, "/monitoring/alertmanager"))
    url = f"{proxy.url}/monitoring/alertmanager/"
    assert await nodes(AlertmanagerConfig(url=url, bearer_token=TOKEN)) == ["n1"]
    wrong = AlertmanagerConfig(url=url, bearer_token=TOKEN[::-1])
    message = await failure(wrong)
    assert "HTTP 401" in message
    assert TOKEN[::-1] not in message


async def test_unreachable() -> None:
    config = AlertmanagerConfig(url=f"http://127.0.0.1:{free_port()}", bearer_token=TOKEN)
    assert "unreachable" in await failure(config)


def answering(status: int, body: bytes, content_type: str = "application/json") -> web.Application:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(status=status, body=body, content_type=content_type)

    app = web.Application()
    app.router.add_get("/api/v2/alerts", handler)
    return app


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (200, b"<html>login</html>", "not a list of alerts"),
        (200, b'{"alerts": []}', "not a list of alerts"),
        (200, b'[{"labels": {"alertname": 7}}]', "not a list of alerts: alerts.0.labels"),
        (500, b"internal error", "answered HTTP 500: 'internal error'"),
        (302, b"", "answered HTTP 302"),
    ],
)
async def test_a_wrong_answer_is_an_error(
    serve: Serve, status: int, body: bytes, expected: str
) -> None:
    served: Served = await serve(answering(status, body))
    config = AlertmanagerConfig(url=served.url, bearer_token=TOKEN)
    assert expected in await failure(config)


async def test_a_secret_echoed_back_is_scrubbed(serve: Serve) -> None:
    """A proxy that repeats the request's header in its error page does not leak the token."""

    async def echo(request: web.Request) -> web.Response:
        return web.Response(status=400, text=request.headers["Authorization"])

    app = web.Application()
    app.router.add_get("/api/v2/alerts", echo)
    served: Served = await serve(app)
    message = await failure(AlertmanagerConfig(url=served.url, bearer_token=TOKEN))
    assert "HTTP 400" in message
    assert "Bearer ********" in message


async def test_a_silent_server_times_out(serve: Serve) -> None:
    release = asyncio.Event()

    async def hang(request: web.Request) -> web.Response:
        await release.wait()
        return web.Response(text="[]")

    app = web.Application()
    app.router.add_get("/api/v2/alerts", hang)
    served: Served = await serve(app)
    try:
        config = AlertmanagerConfig(url=served.url, bearer_token=TOKEN, timeout=0.5)
        assert "did not answer within 0.5s" in await failure(config)
    finally:
        release.set()


def query_ignoring_proxy(am: RealAlertmanager) -> web.Application:
    """A proxy in front of the real Alertmanager that drops the query's filters (``active``,
    ``silenced``, ``inhibited``): it answers with every alert Alertmanager holds."""

    async def forward(request: web.Request) -> web.StreamResponse:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{am.url}/api/v2/alerts") as upstream,
        ):
            return web.Response(
                status=upstream.status,
                body=await upstream.read(),
                content_type="application/json",
            )

    app = web.Application()
    app.router.add_get("/api/v2/alerts", forward)
    return app


async def test_a_suppressed_alert_is_never_returned_whatever_the_api_does_with_the_query(
    start_alertmanager: Starter, serve: Serve
) -> None:
    """Attack 7: behind a proxy that ignores ``silenced=false``, the silenced alert comes back
    with ``status.state`` suppressed; only the active, unsilenced, uninhibited one is kept."""
    am = start_alertmanager()
    await am.post_alerts(alert("KubeNodeNotReady", node="n1"), alert("KubeNodeNotReady", node="n2"))
    await am.silence(node="n2")
    proxy: Served = await serve(query_ignoring_proxy(am))

    async def both_listed() -> bool:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{proxy.url}/api/v2/alerts") as reply,
        ):
            listed = await reply.json()
        states = {a["labels"].get("node"): a["status"]["state"] for a in listed}
        return states == {"n1": "active", "n2": "suppressed"}

    await poll(both_listed, within=30, what="Alertmanager listing the silenced alert too")
    assert await nodes(AlertmanagerConfig(url=proxy.url)) == ["n1"]
