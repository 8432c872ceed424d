"""A TCP proxy between one replica and the API server that can hold that replica's requests.

The slow replica of a race: while the gate is shut, what the replica sends waits in the proxy
(the replies already on their way still reach it), as a congested link or a paused process
would; opening the gate lets it through, in order. The gate is a real socket hop, so the
replica's own timeouts and retries run as they would against a slow network.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from nodefence_sim.kubeconfig import write_kubeconfig


class HoldingProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.gate = asyncio.Event()
        self.gate.set()
        self.held = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0

    def hold(self) -> None:
        self.gate.clear()

    def release(self) -> None:
        self.gate.set()

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, gated: bool
    ) -> None:
        try:
            while data := await reader.read(65536):
                if gated and not self.gate.is_set():
                    self.held += 1
                    await self.gate.wait()
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        for task in (
            asyncio.create_task(self._pump(reader, up_writer, gated=True)),
            asyncio.create_task(self._pump(up_reader, writer, gated=False)),
        ):
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def start(self) -> HoldingProxy:
        self._server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        self.release()
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


@contextlib.asynccontextmanager
async def holding_proxy(upstream_port: int, tmp: Path) -> AsyncIterator[tuple[HoldingProxy, Path]]:
    """The proxy and a kubeconfig that reaches the API server through it."""
    proxy = await HoldingProxy(upstream_port).start()
    try:
        yield proxy, write_kubeconfig(tmp / "held-kubeconfig", f"http://127.0.0.1:{proxy.port}")
    finally:
        await proxy.stop()
