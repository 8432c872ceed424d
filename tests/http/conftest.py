"""Fixtures for the receiver's HTTP layer tests."""

from __future__ import annotations

import io
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from http_support import RecordingPipeline, make_settings

from nodefence.http.app import build_app
from nodefence.observability.logging import configure_logging, reset_logging


@pytest.fixture
def pipeline() -> RecordingPipeline:
    return RecordingPipeline()


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """Leave structlog and the root logger as found, for the tests of other packages."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    reset_logging()
    root.handlers = handlers
    root.setLevel(level)


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
