"""A stand-in for the Slack Web API on loopback, for the demo and the tests.

It answers the calls nodefence makes (``chat.postMessage``, ``chat.update``,
``usergroups.users.list``) and the interactions' ``response_url``, records each one, and plays
Slack's other part: a button press sent back to the receiver as a signed ``block_actions``
payload, exactly as Slack signs it (v0 HMAC-SHA256 over ``v0:timestamp:body``).
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

Json = dict[str, Any]


@dataclass
class Call:
    method: str
    body: Json


@dataclass
class FakeSlack:
    token: str
    url: str = ""
    calls: list[Call] = field(default_factory=list)
    responses: list[Json] = field(default_factory=list)
    groups: dict[str, list[str]] = field(default_factory=dict)
    down: bool = False
    _ts: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    @property
    def api_url(self) -> str:
        return self.url + "/api/"

    def posted(self, method: str = "chat.postMessage") -> list[Json]:
        return [call.body for call in self.calls if call.method == method]

    def response_url(self, name: str = "1") -> str:
        return f"{self.url}/response/{name}"

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        if self.down:
            return web.json_response({"ok": False, "error": "service_unavailable"}, status=503)
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return web.json_response({"ok": False, "error": "invalid_auth"})
        body: Json = dict(request.query)
        if request.can_read_body:
            if request.content_type == "application/json":
                body.update(await request.json())
            else:
                body.update(dict(await request.post()))
        self.calls.append(Call(method, body))
        if method == "chat.postMessage":
            ts = f"{int(time.time())}.{next(self._ts):06d}"
            return web.json_response({"ok": True, "channel": body.get("channel"), "ts": ts})
        if method == "chat.update":
            return web.json_response({"ok": True, "channel": body.get("channel"), "ts": body["ts"]})
        if method == "usergroups.users.list":
            group = str(body.get("usergroup", ""))
            if group not in self.groups:
                return web.json_response({"ok": False, "error": "no_such_subteam"})
            return web.json_response({"ok": True, "users": self.groups[group]})
        return web.json_response({"ok": False, "error": "unknown_method"})

    async def _response(self, request: web.Request) -> web.Response:
        if self.down:
            return web.Response(status=503)
        body = await request.json()
        self.responses.append({"url": str(request.url), **body})
        return web.Response(text="ok")


@asynccontextmanager
async def running_fake_slack(token: str) -> AsyncIterator[FakeSlack]:
    fake = FakeSlack(token)
    app = web.Application()
    app.router.add_route("*", "/api/{method}", fake._api)
    app.router.add_post("/response/{name}", fake._response)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    fake.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield fake
    finally:
        await runner.cleanup()


def sign_request(secret: str, body: bytes, timestamp: int | None = None) -> dict[str, str]:
    """The headers Slack sends with a request to an app."""
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    base = b"v0:" + stamp.encode() + b":" + body
    digest = hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": f"v0={digest}",
        "Content-Type": "application/x-www-form-urlencoded",
    }


def button(message: Json, action_id: str) -> Json:
    """The button element with ``action_id`` in a posted message."""
    for block in message.get("blocks") or []:
        for element in block.get("elements") or []:
            if element.get("action_id") == action_id:
                return dict(element)
    raise LookupError(f"no button {action_id} in the message")


def interaction_body(
    *, user: str, channel: str, action_id: str, value: str, response_url: str
) -> bytes:
    """A ``block_actions`` payload as Slack form-encodes it."""
    payload = {
        "type": "block_actions",
        "user": {"id": user, "username": user.lower()},
        "channel": {"id": channel},
        "container": {"type": "message", "channel_id": channel},
        "response_url": response_url,
        "actions": [{"type": "button", "action_id": action_id, "value": value, "block_id": "b"}],
    }
    return urlencode({"payload": json.dumps(payload)}).encode()
