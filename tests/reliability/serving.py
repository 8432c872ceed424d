"""``nodefence serve`` in the test's process (``http.app.run``), as a Deployment runs it: its
own reconcile loop included, against the simulator."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from bench.processes import free_port
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr
from tests.seeded_cluster import NO_HEALTHY_DELAY, inference

from nodefence.http.app import run
from nodefence.policy import parse_policy
from nodefence.runtime import build_service
from nodefence.settings import Settings
from nodefence_sim.testing import SimulatorHandle

from .support import until

INTERVAL = 0.3


@dataclass
class Serving:
    url: str
    token: str
    http: aiohttp.ClientSession

    async def metrics(self) -> dict[str, float]:
        async with self.http.get(self.url + "/metrics") as response:
            text = await response.text()
        values: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                values[f"{sample.name}{{{labels}}}"] = sample.value
        return values

    async def passed(self) -> bool:
        """Whether a pass of this receiver's own loop finished."""
        return (await self.metrics()).get("nodefence_reconcile_passes_total{outcome=ok}", 0) > 0

    async def post(self, path: str, payload: Any) -> int:
        headers = {"Authorization": f"Bearer {self.token}"}
        async with self.http.post(self.url + path, json=payload, headers=headers) as r:
            return r.status

    async def alert(self, payload: Any) -> list[dict[str, Any]]:
        headers = {"Authorization": f"Bearer {self.token}"}
        async with self.http.post(self.url + "/alerts", json=payload, headers=headers) as r:
            assert r.status == 200, await r.text()
            return list((await r.json())["decisions"])


@asynccontextmanager
async def serving(
    cluster: SimulatorHandle,
    *,
    interval: float = INTERVAL,
    identity: str = "replica-a",
    policy: dict[str, Any] | None = None,
    deadline: float = 20,
    bmc_inventory: Path | None = None,
) -> AsyncIterator[Serving]:
    """``nodefence serve`` in this process (``http.app.run``), as a Deployment runs it."""
    token = secrets.token_urlsafe(16)
    port = free_port()
    settings = Settings(
        alert_token=SecretStr(token),
        namespace="nodefence",
        identity=identity,
        host="127.0.0.1",
        port=port,
        reconcile_interval=interval,
        request_deadline_seconds=deadline,
        bmc_inventory=bmc_inventory,
    )
    service = await build_service(
        settings,
        policy=parse_policy(inference(policy or NO_HEALTHY_DELAY)),
        kubeconfig=str(cluster.kubeconfig),
    )
    stop = asyncio.Event()
    server = asyncio.create_task(
        run(
            settings,
            service.fencer,
            metrics=service.metrics,
            stop=stop,
            decisions=service.decisions,
            background=service.background,
        )
    )
    url = f"http://127.0.0.1:{port}"
    async with aiohttp.ClientSession() as http:

        async def healthy() -> bool:
            assert not server.done(), server
            try:
                async with http.get(url + "/healthz") as response:
                    return response.status == 200
            except aiohttp.ClientError:
                return False

        await until(healthy, within=60)
        try:
            yield Serving(url, token, http)
        finally:
            stop.set()
            await asyncio.wait_for(server, 60)


async def holds(check: Callable[[], object], within: float = 60) -> None:
    async def probe() -> object:
        return check()

    await until(probe, within=within)
