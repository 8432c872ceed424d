"""A real receiver and the simulated seed cluster on loopback, served from a background thread.

The fuzz tests drive them with blocking clients (raw sockets, ``http.client``, schemathesis'
``requests``), which would stall a receiver sharing their event loop; a thread of its own keeps
the servers answering while the test thread waits.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from pydantic import SecretStr
from tests.seeded_cluster import served

from nodefence.policy import parse_policy
from nodefence.runtime import build_fencer
from nodefence.settings import Settings
from nodefence_sim.faults import WRITE_VERBS, RequestRecord
from nodefence_sim.simulation import Simulation
from nodefence_sim.testing import SimulatorHandle, running_simulator

MAX_BODY_BYTES = 64 * 1024
BASIC_USER = "alertmanager"
BASIC_PASSWORD = "correct horse battery staple"


@dataclass
class Stack:
    url: str
    host: str
    port: int
    token: str
    cluster: SimulatorHandle

    def cursor(self) -> int:
        return self.cluster.faults.cursor

    def writes_since(self, cursor: int) -> list[RequestRecord]:
        return [r for r in self.cluster.faults.requests(cursor) if r.verb in WRITE_VERBS]

    def forbidden_writes_since(self, cursor: int) -> list[str]:
        """Writes other than creating an Event (the record of a refusal) since ``cursor``."""
        return [
            f"{r.method} {r.path}?{r.query} -> {r.status}"
            for r in self.writes_since(cursor)
            if not (r.verb == "create" and r.path.endswith("/events"))
        ]


async def _serve(ready: threading.Event, stop: asyncio.Event, box: list[Stack]) -> None:
    token = secrets.token_urlsafe(16)
    settings = Settings(
        alert_token=SecretStr(token),
        basic_auth_user=BASIC_USER,
        basic_auth_password=SecretStr(BASIC_PASSWORD),
        namespace="nodefence",
        identity="fuzz",
        max_body_bytes=MAX_BODY_BYTES,
        request_deadline_seconds=10,
        reconcile_interval=0,
        fencing_probe_interval=0,
    )
    async with running_simulator(Simulation.from_scenario("seed")) as cluster:
        pipeline = await build_fencer(
            settings,
            policy=parse_policy({"rules": [{"name": "default", "fencing": {"driver": "none"}}]}),
            kubeconfig=str(cluster.kubeconfig),
            serving=True,
        )
        async with served(settings, pipeline) as port:
            box.append(Stack(f"http://127.0.0.1:{port}", "127.0.0.1", port, token, cluster))
            ready.set()
            await stop.wait()


@contextmanager
def background_stack() -> Iterator[Stack]:
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    ready = threading.Event()
    box: list[Stack] = []
    failure: list[BaseException] = []

    def main() -> None:
        try:
            loop.run_until_complete(_serve(ready, stop, box))
        except BaseException as exc:
            failure.append(exc)
            ready.set()
        finally:
            loop.close()

    thread = threading.Thread(target=main, name="fuzz-stack", daemon=True)
    thread.start()
    if not ready.wait(timeout=60) or failure:
        raise RuntimeError(f"the receiver did not start: {failure!r}")
    try:
        yield box[0]
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=30)
