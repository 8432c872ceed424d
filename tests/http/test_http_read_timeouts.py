"""Read timeouts on the real listener (``http.app.run``): connections that drip their headers
(slowloris) are closed at the header timeout, a body that does not arrive in time gets a 408,
and neither limit touches a kept-alive connection between requests or a prompt client."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from bench.processes import free_port
from http_support import TOKEN, RecordingPipeline, make_settings

from nodefence.http.app import run

HEADER_TIMEOUT = 1.0
BODY_TIMEOUT = 1.0
SLOW_CLIENTS = 40
# Generous for a loaded machine; each wait ends as soon as the server acts.
DEADLINE = 30.0


@pytest.fixture
async def port(pipeline: RecordingPipeline) -> AsyncIterator[int]:
    chosen = free_port()
    settings = make_settings(
        host="127.0.0.1",
        port=chosen,
        header_timeout_seconds=HEADER_TIMEOUT,
        body_timeout_seconds=BODY_TIMEOUT,
        idle_timeout_seconds=600,
    )
    stop = asyncio.Event()
    server = asyncio.create_task(run(settings, pipeline, stop=stop))
    deadline = asyncio.get_running_loop().time() + DEADLINE
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", chosen)
        except OSError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.02)
            continue
        writer.close()
        break
    yield chosen
    stop.set()
    await asyncio.wait_for(server, 60)


async def _get(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str) -> bytes:
    """One keep-alive GET on an open connection: the status line and headers of its answer,
    whose body is read by its Content-Length."""
    writer.write(f"GET {path} HTTP/1.1\r\nHost: nodefence\r\n\r\n".encode())
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), DEADLINE)
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    await asyncio.wait_for(reader.readexactly(length), DEADLINE)
    return head


async def _closed(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sends until it closes the connection."""
    received = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := await reader.read(65536):
            received += chunk
    return received


async def test_slowloris_connections_are_closed_at_the_header_timeout(
    port: int, pipeline: RecordingPipeline
) -> None:
    # A kept-alive connection that finished a request before the attack: it stays idle longer
    # than the header timeout while the attack runs, and must still be served afterwards.
    kept_reader, kept_writer = await asyncio.open_connection("127.0.0.1", port)
    assert (await _get(kept_reader, kept_writer, "/healthz")).startswith(b"HTTP/1.1 200")

    slow = [await asyncio.open_connection("127.0.0.1", port) for _ in range(SLOW_CLIENTS)]
    for _, writer in slow:
        writer.write(b"POST /alerts HTTP/1.1\r\nHost: nodefence\r\n")
        await writer.drain()

    async def drip() -> None:
        # One more header line on every connection every 0.2 s, as slowloris does: each
        # connection always looks active, and never finishes its headers.
        line = 0
        while True:
            line += 1
            for _, writer in slow:
                if not writer.is_closing():
                    with contextlib.suppress(ConnectionError):
                        writer.write(f"X-Drip-{line}: {line}\r\n".encode())
            await asyncio.sleep(0.2)

    dripping = asyncio.create_task(drip())
    try:
        answers = await asyncio.wait_for(
            asyncio.gather(*(_closed(reader) for reader, _ in slow)), DEADLINE
        )
    finally:
        dripping.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await dripping
        for _, writer in slow:
            writer.close()
    # Closed without an answer: there was no request to answer.
    assert answers == [b""] * SLOW_CLIENTS
    assert pipeline.received == []

    # The kept-alive connection and a new one are both served.
    assert (await _get(kept_reader, kept_writer, "/healthz")).startswith(b"HTTP/1.1 200")
    kept_writer.close()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    assert (await _get(reader, writer, "/readyz")).startswith(b"HTTP/1.1 200")
    writer.close()


async def test_a_connection_that_sends_nothing_is_closed_at_the_header_timeout(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    assert await asyncio.wait_for(_closed(reader), DEADLINE) == b""
    writer.close()


async def test_a_body_that_does_not_arrive_in_time_gets_a_408_problem_and_a_close(
    port: int, pipeline: RecordingPipeline
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        (
            "POST /alerts HTTP/1.1\r\nHost: nodefence\r\n"
            f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
            "Content-Length: 4096\r\n\r\n"
            '{"version": "4", '
        ).encode()
    )
    await writer.drain()
    answer = await asyncio.wait_for(_closed(reader), DEADLINE)
    writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), answer
    assert b"content-type: application/problem+json" in head.lower()
    assert b"urn:nodefence:problem:body-timeout" in body
    assert pipeline.received == []


async def test_a_prompt_request_is_served_as_before(port: int, pipeline: RecordingPipeline) -> None:
    body = b'{"version": "4", "status": "firing", "alerts": []}'
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        (
            "POST /alerts HTTP/1.1\r\nHost: nodefence\r\n"
            f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode()
        + body
    )
    await writer.drain()
    answer = await asyncio.wait_for(_closed(reader), DEADLINE)
    writer.close()
    assert not answer.startswith(b"HTTP/1.1 408"), answer
    assert answer.startswith(b"HTTP/1.1 "), answer
