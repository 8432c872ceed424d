"""The Slack Web API calls nodefence makes, through slack_sdk's ``AsyncWebClient``.

Every failure (Slack down, an API error, a timeout) becomes ``ApprovalChannelUnavailableError``,
whose message names the call and Slack's error code only: the bot token never appears in an
error, a log line or a response.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import aiohttp
from pydantic import SecretStr
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from nodefence.errors import ClusterUnavailableError

Json = dict[str, Any]


class ApprovalChannelUnavailableError(ClusterUnavailableError):
    """Slack could not be reached or refused the call.

    In approval mode nothing may be fenced without the question being asked, so the alert is
    answered 503 and Alertmanager delivers it again later.
    """

    problem_kind = "approval-channel-unavailable"
    public_detail = "Slack, where fences are approved, is unavailable; retry later."


@dataclass(frozen=True)
class PostedMessage:
    channel: str
    ts: str


def _problem(call: str, exc: BaseException) -> ApprovalChannelUnavailableError:
    if isinstance(exc, SlackApiError):
        code = exc.response.get("error") if exc.response is not None else None
        detail = f"Slack answered {code or 'an error'}"
    elif isinstance(exc, TimeoutError):
        detail = "Slack did not answer in time"
    else:
        detail = f"Slack is unreachable ({type(exc).__name__})"
    return ApprovalChannelUnavailableError(f"Slack {call} failed: {detail}")


_FAILURES = (SlackClientError, aiohttp.ClientError, OSError, TimeoutError)


class SlackClient:
    def __init__(
        self, token: SecretStr, *, base_url: str | None = None, timeout: float = 5.0
    ) -> None:
        options: Json = {"token": token.get_secret_value(), "timeout": max(1, round(timeout))}
        if base_url:
            options["base_url"] = base_url if base_url.endswith("/") else base_url + "/"
        self.web = AsyncWebClient(**options)
        self.timeout = timeout

    async def _call(self, call: str, method: str, **arguments: Any) -> Json:
        try:
            async with asyncio.timeout(self.timeout):
                response = await self.web.api_call(method, json=arguments)
        except _FAILURES as exc:
            raise _problem(call, exc) from None
        data = response.data
        return dict(data) if isinstance(data, dict) else {}

    async def post_message(self, channel: str, text: str, blocks: list[Json]) -> PostedMessage:
        body = await self._call(
            "chat.postMessage", "chat.postMessage", channel=channel, text=text, blocks=blocks
        )
        return PostedMessage(str(body.get("channel") or channel), str(body.get("ts") or ""))

    async def update_message(self, channel: str, ts: str, text: str, blocks: list[Json]) -> None:
        await self._call(
            "chat.update", "chat.update", channel=channel, ts=ts, text=text, blocks=blocks
        )

    async def group_members(self, group: str) -> frozenset[str]:
        try:
            async with asyncio.timeout(self.timeout):
                response = await self.web.usergroups_users_list(usergroup=group)
        except _FAILURES as exc:
            raise _problem("usergroups.users.list", exc) from None
        users = response.get("users") or []
        return frozenset(str(user) for user in users)

    async def respond(self, response_url: str, body: Json) -> None:
        """Answer through the interaction's ``response_url`` (no token: the URL is the grant)."""
        try:
            async with (
                asyncio.timeout(self.timeout),
                aiohttp.ClientSession() as session,
                session.post(response_url, json=body) as response,
            ):
                await response.read()
                if response.status >= 400:
                    raise ApprovalChannelUnavailableError(
                        f"Slack response_url answered {response.status}"
                    )
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise _problem("response_url", exc) from None
