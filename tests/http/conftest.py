"""Fixtures for the receiver's HTTP layer tests."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from http_support import RecordingPipeline, make_settings

from nodefence.http.app import build_app
from nodefence.observability.logging import configure_logging


@pytest.fixture
def pipeline() -> RecordingPipeline:
    return RecordingPipeline()


@pytest.fixture(autouse=True)
def _logging_left_as_found(restore_logging: None) -> None:
    """Every receiver test may configure logging: ``restore_logging`` undoes it."""


@pytest.fixture
def log_stream() -> io.StringIO:
    stream = io.StringIO()
    configure_logging("json", "debug", stream=stream)
    return stream


ClientFactory = Callable[..., Coroutine[Any, Any, TestClient[Any, Any]]]


@pytest.fixture
async def make_client(
    pipeline: RecordingPipeline, log_stream: io.StringIO
) -> AsyncIterator[ClientFactory]:
    clients: list[TestClient[Any, Any]] = []

    async def factory(**overrides: Any) -> TestClient[Any, Any]:
        app = build_app(make_settings(**overrides), pipeline)
        client: TestClient[Any, Any] = TestClient(TestServer(app))
        await client.start_server()
        clients.append(client)
        return client

    yield factory
    for client in clients:
        await client.close()


@pytest.fixture
async def client(make_client: ClientFactory) -> TestClient[Any, Any]:
    return await make_client()
