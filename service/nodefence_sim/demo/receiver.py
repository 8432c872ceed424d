"""The receiver the demos talk to: the real app on a loopback port, torn down with its
fencer when the story ends."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web

from nodefence.http.app import build_app
from nodefence.settings import Settings
from nodefence.shell.fencer import Fencer
from nodefence.slack.routes import NO_SLACK, SlackIntegration


@asynccontextmanager
async def serving(
    settings: Settings, fencer: Fencer, slack: SlackIntegration = NO_SLACK
) -> AsyncIterator[str]:
    """Yield the receiver's base URL."""
    runner = web.AppRunner(build_app(settings, fencer, metrics=fencer.metrics, slack=slack))
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()
        await fencer.close()
