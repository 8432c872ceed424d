"""Read timeouts on every connection: headers, body and idle keep-alive.

aiohttp's server waits for a request's headers and body as long as the client keeps the
connection open; only an idle kept-alive connection has a limit (``keepalive_timeout``). A
client that opens connections and sends a header line every few seconds (slowloris) holds each
of them, and the process's file descriptors, for ever. Production servers bound both reads (Go's
``ReadHeaderTimeout``, nginx's ``client_header_timeout`` and ``client_body_timeout``); here:

- headers: each connection is served through ``_Guard``, a protocol in front of aiohttp's
  ``RequestHandler`` that arms a timer when the connection opens (after the TLS handshake, which
  has the same limit through ``ssl_handshake_timeout``) and when the first byte of a later
  request arrives; the timer is cancelled when the request reaches the application (the
  middleware below), so only a request whose headers are still incomplete when it fires is cut,
  by closing the connection: there is no request yet to answer.
- body: the middleware gives the body ``body_timeout_seconds`` from the headers; if it has not
  arrived in full by then, the handler's next read fails, and the caller gets a 408 problem
  response and a closed connection.
- idle: aiohttp's own ``keepalive_timeout``, set from ``idle_timeout_seconds``.

The guard is transparent to aiohttp: it passes every protocol event on unchanged, and the
handler sees the real transport.
"""

from __future__ import annotations

import asyncio
import enum
import ssl
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web
from aiohttp.streams import StreamReader
from aiohttp.typedefs import Handler, Middleware
from aiohttp.web_protocol import RequestHandler

from nodefence.http.problems import Problem
from nodefence.observability.logging import get_logger

log = get_logger("nodefence.http.limits")


@dataclass(frozen=True)
class ReadLimits:
    header_seconds: float
    body_seconds: float
    idle_seconds: float


class BodyTimeoutError(Exception):
    """The request body did not arrive in full within the body timeout."""


class _Phase(enum.Enum):
    HEADERS = "headers"  # timer armed: the request's headers are awaited
    REQUEST = "request"  # the application has the request
    IDLE = "idle"  # between requests: aiohttp's keep-alive limit applies


class _Guard(asyncio.Protocol):
    """aiohttp's protocol for one connection, with a deadline on the headers of each request."""

    def __init__(self, inner: RequestHandler, guards: ConnectionGuards) -> None:
        self._inner = inner
        self._guards = guards
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.BaseTransport | None = None
        self._phase = _Phase.HEADERS
        self._timer: asyncio.TimerHandle | None = None

    # -- the deadline

    def _arm(self) -> None:
        self._disarm()
        self._phase = _Phase.HEADERS
        self._timer = self._loop.call_later(self._guards.limits.header_seconds, self._expired)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self) -> None:
        self._timer = None
        if self._phase is not _Phase.HEADERS or self._transport is None:
            return
        self._guards.closed_for_headers += 1
        peer = self._transport.get_extra_info("peername")
        log.info(
            "connection_closed_headers_timeout",
            peer=str(peer[0]) if isinstance(peer, tuple) else None,
            timeout_seconds=self._guards.limits.header_seconds,
        )
        # abort, not close: a TLS close would wait for the peer's close_notify, which a
        # client that drips bytes has no reason to send.
        transport = self._transport
        if isinstance(transport, asyncio.WriteTransport):
            transport.abort()
        else:
            transport.close()

    def started(self) -> None:
        self._disarm()
        self._phase = _Phase.REQUEST

    def finished(self) -> None:
        if self._phase is _Phase.REQUEST:
            self._phase = _Phase.IDLE

    # -- protocol events, passed on unchanged

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        self._guards.register(self._inner, self)
        self._arm()
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._phase is _Phase.IDLE:
            self._arm()
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        self._inner.eof_received()
        # aiohttp's protocol returns nothing: the transport closes itself on the peer's EOF.
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._transport = None
        self._guards.unregister(self._inner)
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()


class ConnectionGuards:
    """The guards of the open connections, found by aiohttp's protocol object, which is what a
    request knows of its connection (``request.protocol``)."""

    def __init__(self, limits: ReadLimits) -> None:
        self.limits = limits
        self._guards: dict[RequestHandler, _Guard] = {}
        self.closed_for_headers = 0

    def factory(self, make: Callable[[], RequestHandler]) -> Callable[[], asyncio.Protocol]:
        """A protocol factory for ``loop.create_server`` that guards aiohttp's protocols."""
        return lambda: _Guard(make(), self)

    def register(self, inner: RequestHandler, guard: _Guard) -> None:
        self._guards[inner] = guard

    def unregister(self, inner: RequestHandler) -> None:
        self._guards.pop(inner, None)

    def started(self, protocol: object) -> None:
        guard = self._guards.get(protocol) if isinstance(protocol, RequestHandler) else None
        if guard is not None:
            guard.started()

    def finished(self, protocol: object) -> None:
        guard = self._guards.get(protocol) if isinstance(protocol, RequestHandler) else None
        if guard is not None:
            guard.finished()


def _body_overdue(content: StreamReader) -> None:
    if not content.is_eof():
        content.set_exception(BodyTimeoutError())


def read_limits_middleware(guards: ConnectionGuards) -> Middleware:
    """Ends the header deadline of the request's connection and starts its body deadline.

    Placed inside the problem middleware, so the 408 leaves as a problem response."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        guards.started(request.protocol)
        loop = asyncio.get_running_loop()
        timer = loop.call_later(guards.limits.body_seconds, _body_overdue, request.content)
        try:
            return await handler(request)
        except BodyTimeoutError:
            raise Problem(
                408,
                kind="body-timeout",
                detail=(
                    "The request body did not arrive in full within "
                    f"{guards.limits.body_seconds:g} seconds of its headers."
                ),
                close_connection=True,
            ) from None
        finally:
            timer.cancel()
            guards.finished(request.protocol)

    return middleware


class GuardedSite(web.BaseSite):
    """aiohttp's TCP site with every connection behind a ``_Guard`` and the TLS handshake
    bounded by the header timeout."""

    __slots__ = ("_guards", "_host", "_port")

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        *,
        guards: ConnectionGuards,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context)
        self._host = host
        self._port = port
        self._guards = guards

    @property
    def name(self) -> str:
        scheme = "https" if self._ssl_context is not None else "http"
        return f"{scheme}://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        loop = asyncio.get_running_loop()
        handshake = self._guards.limits.header_seconds if self._ssl_context is not None else None
        self._server = await loop.create_server(
            self._guards.factory(server),
            self._host,
            self._port,
            ssl=self._ssl_context,
            ssl_handshake_timeout=handshake,
            backlog=self._backlog,
            reuse_address=True,
        )
