"""Replies the Kubernetes client reads as the status they carry, and never beyond a stated size.

An API server that does not serve a group (Knative's, where Knative is not installed) answers
with a plain-text ``404 page not found``: that is a 404, said at once, not a parse error retried
as an outage until the deadline. A load balancer's HTML 503 is a 503, retried as one. A reply
that never ends (a broken or hostile server streaming a NodeList) is cut at
``MAX_REPLY_BYTES`` with an error naming the cap, and a watch line that never ends is a broken
stream. The server here is a plain aiohttp application answering exactly that, on loopback.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from nodefence.commands.failures import failure_line
from nodefence.errors import ClusterUnavailableError
from nodefence.kube.client import (
    MAX_EVENT_BYTES,
    MAX_REPLY_BYTES,
    Deadline,
    KubeError,
    ReplyTooLargeError,
    load_api_client,
)
from nodefence.kube.operator_reads import OperatorReads
from nodefence_sim.kubeconfig import write_kubeconfig

KNATIVE = "/apis/serving.knative.dev/v1/namespaces/nodefence/services"
# What kube-apiserver answers a path it serves nothing at (Go's http.NotFound).
NOT_FOUND_TEXT = "404 page not found\n"
CHUNK = b'{"metadata":{"name":"' + b"n" * 4000 + b'"}},'


@dataclass
class Hostile:
    """What the server was asked, and how many bytes its endless replies got out."""

    paths: list[str] = field(default_factory=list)
    sent: int = 0


def _not_found(_request: web.Request) -> web.Response:
    return web.Response(
        status=404,
        text=NOT_FOUND_TEXT,
        content_type="text/plain",
        charset="utf-8",
        headers={"X-Content-Type-Options": "nosniff"},
    )


def _app(seen: Hostile) -> web.Application:
    async def record(request: web.Request) -> web.StreamResponse:
        seen.paths.append(request.path_qs)
        return await route(request)

    async def route(request: web.Request) -> web.StreamResponse:
        path = request.path
        if path.startswith("/apis/serving.knative.dev"):
            return _not_found(request)
        if path == "/api/v1/namespaces/nodefence/configmaps/behind-a-proxy":
            return web.Response(status=503, text="<html><body>Service Unavailable</body></html>\n")
        if path == "/api/v1/namespaces/nodefence/configmaps/declared-huge":
            response = web.StreamResponse(status=200)
            response.content_type = "application/json"
            response.content_length = MAX_REPLY_BYTES + 1
            await response.prepare(request)
            return await endless(response, b"")
        if path == "/api/v1/nodes":
            response = web.StreamResponse(status=200)
            response.content_type = "application/json"
            await response.prepare(request)
            if request.query.get("watch") == "true":
                # One event line that never ends.
                return await endless(response, b'{"type":"ADDED","object":')
            return await endless(response, b'{"kind":"NodeList","items":[')
        return _not_found(request)

    async def endless(response: web.StreamResponse, start: bytes) -> web.StreamResponse:
        """Write until the client goes away."""
        try:
            await response.write(start)
            while True:
                await response.write(CHUNK)
                seen.sent += len(CHUNK)
        except (ConnectionError, aiohttp.ClientConnectionResetError):
            return response

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    return app


@pytest.fixture
async def hostile(tmp_path: Path) -> AsyncIterator[tuple[OperatorReads, Hostile]]:
    seen = Hostile()
    runner = web.AppRunner(_app(seen), shutdown_timeout=1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{port}")
    kube = OperatorReads(await load_api_client(str(kubeconfig)))
    try:
        yield kube, seen
    finally:
        await kube.close()
        await runner.cleanup()


async def test_a_plain_text_404_is_a_404_at_once_never_an_outage(
    hostile: tuple[OperatorReads, Hostile],
) -> None:
    kube, seen = hostile
    with pytest.raises(KubeError) as refused:
        await kube.get_configmap("nodefence", "absent", Deadline(10))
    assert refused.value.status == 404
    assert refused.value.message == "404 page not found"
    assert refused.value.reason == "Not Found"
    assert seen.paths == ["/api/v1/namespaces/nodefence/configmaps/absent"], "not retried"
    assert "404 Not Found: 404 page not found" in str(failure_line(refused.value))


async def test_a_group_the_server_does_not_serve_is_never_listed(
    hostile: tuple[OperatorReads, Hostile],
) -> None:
    kube, seen = hostile
    assert not await kube.serves("serving.knative.dev/v1", "services", Deadline(10))
    assert seen.paths == ["/apis/serving.knative.dev/v1"]
    # Its objects are none, asked once, whatever the path answers.
    assert await kube.labelled(KNATIVE, "nodefence", Deadline(10)) == []


async def test_an_error_page_that_is_not_json_is_an_error_of_its_status(
    hostile: tuple[OperatorReads, Hostile],
) -> None:
    kube, seen = hostile
    with pytest.raises(ClusterUnavailableError) as unavailable:
        await kube.get_configmap("nodefence", "behind-a-proxy", Deadline(1.5))
    # Retried as the 503 it is, and said as one.
    assert "503 <html><body>Service Unavailable</body></html>" in str(unavailable.value)
    assert "JSONDecodeError" not in str(unavailable.value)
    assert len(seen.paths) > 1


async def test_an_endless_list_reply_is_cut_at_the_stated_cap(
    hostile: tuple[OperatorReads, Hostile],
) -> None:
    kube, seen = hostile
    with pytest.raises(ReplyTooLargeError) as refused:
        await kube.list_nodes(Deadline(120))
    message = str(refused.value)
    assert "GET /api/v1/nodes" in message
    assert f"larger than {MAX_REPLY_BYTES // 2**20} MiB" in message
    # Not retried: the same request streams the same.
    assert seen.paths == ["/api/v1/nodes?limit=500"]
    # Read no further than the cap (and what the sockets' buffers held when it stopped).
    assert seen.sent < MAX_REPLY_BYTES + 16 * 2**20, seen.sent
    assert "reply too large to read" in str(failure_line(refused.value))


async def test_a_reply_declaring_more_than_the_cap_is_not_read_at_all(
    hostile: tuple[OperatorReads, Hostile],
) -> None:
    kube, seen = hostile
    with pytest.raises(ReplyTooLargeError, match="declared-huge was larger than 64 MiB"):
        await kube.get_configmap("nodefence", "declared-huge", Deadline(120))
    assert seen.sent < MAX_REPLY_BYTES // 2, seen.sent


async def test_an_endless_watch_line_is_a_broken_stream(
    hostile: tuple[OperatorReads, Hostile],
) -> None:
    kube, seen = hostile
    stream = await kube.watch_nodes("1", 60, idle_seconds=60)
    try:
        with pytest.raises(aiohttp.ClientPayloadError, match="watch event longer than"):
            await asyncio.wait_for(stream.next_line(), 120)
    finally:
        stream.close()
    assert seen.sent < MAX_EVENT_BYTES + 16 * 2**20, seen.sent
