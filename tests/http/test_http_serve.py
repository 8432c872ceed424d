"""Serving for real on a TCP port: PORT from the environment and graceful shutdown on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Awaitable, Callable

import aiohttp
import pytest
from bench.processes import free_port
from http_support import TOKEN, RecordingPipeline, bearer, load_payload

from nodefence.http.app import run
from nodefence.settings import Settings


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached before the deadline")
        await asyncio.sleep(0.02)


async def answers(url: str) -> bool:
    """Whether a new connection gets a 200; one accepted during shutdown may never be served.
    The limit is generous: a slow answer on a busy machine must not pass for a refusal."""
    try:
        async with (
            aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(force_close=True),
                timeout=aiohttp.ClientTimeout(total=5),
            ) as session,
            session.get(url) as response,
        ):
            return response.status == 200
    except (aiohttp.ClientConnectionError, TimeoutError):
        return False


async def test_sigterm_drains_in_flight_request_then_closes_pipeline(
    monkeypatch: pytest.MonkeyPatch, pipeline: RecordingPipeline
) -> None:
    port = free_port()
    monkeypatch.setenv("PORT", str(port))
    monkeypatch.setenv("NODEFENCE_ALERT_TOKEN", TOKEN)
    monkeypatch.setenv("NODEFENCE_HOST", "127.0.0.1")
    settings = Settings()
    assert settings.port == port
    base = f"http://127.0.0.1:{port}"
    pipeline.gate = asyncio.Event()

    server = asyncio.create_task(run(settings, pipeline))
    await eventually(lambda: answers(base + "/healthz"))

    async with aiohttp.ClientSession() as session:
        in_flight = asyncio.create_task(
            session.post(base + "/alerts", json=load_payload("am_firing.json"), headers=bearer())
        )
        await asyncio.wait_for(pipeline.entered.wait(), 60)

        os.kill(os.getpid(), signal.SIGTERM)
        await eventually(lambda: _refused(base + "/healthz"))
        assert not pipeline.closed
        assert not server.done()

        pipeline.gate.set()
        response = await asyncio.wait_for(in_flight, 60)
        assert response.status == 200
        assert len((await response.json())["decisions"]) == 2

    await asyncio.wait_for(server, 60)
    assert pipeline.closed


async def _refused(url: str) -> bool:
    return not await answers(url)


async def test_stop_event_ends_serving(pipeline: RecordingPipeline) -> None:
    port = free_port()
    settings = Settings(alert_token=TOKEN, host="127.0.0.1", port=port)
    stop = asyncio.Event()
    server = asyncio.create_task(run(settings, pipeline, stop=stop))
    await eventually(lambda: answers(f"http://127.0.0.1:{port}/readyz"))

    stop.set()
    await asyncio.wait_for(server, 60)
    assert pipeline.closed
    assert not await answers(f"http://127.0.0.1:{port}/healthz")
