"""The simulated seed cluster and nodefence's receiver, both real servers on loopback in the
test's own process, and what a test reads back from the cluster.

The ``cluster`` fixture (``tests/conftest.py``, one for every folder) is the seed scenario
running in the simulator; ``start_receiver`` builds a receiver on it as ``serve`` does;
``firing`` and ``resolved`` are the alerts Alertmanager posts; ``node``, ``oos_taints``,
``pods_on``, ``terminating_on``, ``node_events`` and ``writes_since`` read the simulator's
store and request log; ``eventually`` polls with a deadline.
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
from aiohttp import web
from pydantic import SecretStr

from nodefence.http.app import build_app
from nodefence.http.decisions import DecisionLog
from nodefence.observability.metrics import Metrics
from nodefence.policy import Policy, parse_policy
from nodefence.runtime import background_for, build_fencer
from nodefence.settings import Settings
from nodefence.shell.fencer import Fencer
from nodefence_sim.demo.payloads import node_alert, webhook
from nodefence_sim.faults import WRITE_VERBS
from nodefence_sim.testing import SimulatorHandle

T = TypeVar("T")
OOS = "node.kubernetes.io/out-of-service"
NODE = "control02"


def firing(name: str = NODE) -> dict[str, Any]:
    """KubeNodeNotReady firing for ``name``, as Alertmanager sends it."""
    return webhook([node_alert(name, starts_at=datetime.now(UTC) - timedelta(minutes=5))])


def resolved(name: str = NODE) -> dict[str, Any]:
    return webhook([node_alert(name, status="resolved", ends_at=datetime.now(UTC))])


@dataclass
class Receiver:
    url: str
    token: str
    pipeline: Fencer
    metrics: Metrics
    session: aiohttp.ClientSession

    async def post(
        self, path: str, payload: Any, *, token: str | None = None
    ) -> tuple[int, dict[str, Any]]:
        headers = {"Authorization": f"Bearer {token or self.token}"}
        async with self.session.post(self.url + path, json=payload, headers=headers) as r:
            return r.status, await r.json()

    async def get(self, path: str) -> tuple[int, dict[str, Any]]:
        headers = {"Authorization": f"Bearer {self.token}"}
        async with self.session.get(self.url + path, headers=headers) as r:
            return r.status, await r.json()

    async def alert(self, payload: Any) -> list[dict[str, Any]]:
        status, body = await self.post("/alerts", payload)
        assert status == 200, body
        return list(body["decisions"])


INFERENCE: dict[str, Any] = {"driver": "none"}
# The healthy delay counts from the moment nodefence first sees a node Ready (on the API
# server's clock), so a test about something else would wait it out in real time.
NO_HEALTHY_DELAY: dict[str, Any] = {"rules": [{"name": "default", "healthy_delay_seconds": 0}]}
SHORT_HEALTHY_DELAY: dict[str, Any] = {"rules": [{"name": "default", "healthy_delay_seconds": 3}]}


def inference(policy: dict[str, Any] | None = None) -> dict[str, Any]:
    """``policy`` with every rule choosing ``fencing.driver: none`` (inference alone) unless it
    chose a driver itself. These tests are about the guards, writes and deliveries on the
    simulator, whose machines have no BMC here; the S10 tests choose their fencing themselves."""
    chosen = dict(policy or {})
    rules = chosen.get("rules") or [{"name": "default"}]
    chosen["rules"] = [
        rule if {"fencing", "power_off_proof"} & set(rule) else {"fencing": INFERENCE, **rule}
        for rule in rules
    ]
    return chosen


@asynccontextmanager
async def start_receiver(
    cluster: SimulatorHandle,
    *,
    policy: Policy | dict[str, Any] | None = None,
    identity: str = "replica-1",
    settle_seconds: float | None = None,
    deadline_seconds: float = 20,
    alertmanager_url: str | None = None,
    alertmanager_matchers: str = "",
    bmc_inventory: Path | None = None,
    follow: bool = False,
    reconcile_interval: float = 0,
) -> AsyncIterator[Receiver]:
    """A receiver in this process. ``follow``: its reader follows the nodes and the pause
    switch with watches, as ``serve``'s does (``runtime.serving_reader``); without it, every
    request reads what it needs, as the one-shot commands do. ``reconcile_interval``: 0, the
    tests drive the passes themselves and the receiver starts no decision of its own; more,
    its own passes (the first no sooner than a fifth of it) and its wake-ups run too."""
    if isinstance(policy, dict):
        policy = parse_policy(policy)
    token = secrets.token_urlsafe(16)
    settings = Settings(
        alert_token=SecretStr(token),
        namespace="nodefence",
        identity=identity,
        request_deadline_seconds=deadline_seconds,
        alertmanager_url=alertmanager_url,
        alertmanager_matchers=alertmanager_matchers,
        bmc_inventory=bmc_inventory,
        # The tests drive the probes themselves, and the passes unless they ask otherwise.
        reconcile_interval=reconcile_interval,
        fencing_probe_interval=0,
    )
    metrics = Metrics()
    pipeline = await build_fencer(
        settings,
        metrics=metrics,
        policy=policy or parse_policy(inference()),
        kubeconfig=str(cluster.kubeconfig),
        serving=follow,
    )
    if settle_seconds is not None:
        pipeline.options = dataclasses.replace(pipeline.options, settle_seconds=settle_seconds)
    async with served(settings, pipeline) as port, aiohttp.ClientSession() as session:
        yield Receiver(f"http://127.0.0.1:{port}", token, pipeline, metrics, session)


@asynccontextmanager
async def served(settings: Settings, pipeline: Fencer) -> AsyncIterator[int]:
    """``pipeline`` behind the receiver's routes on a free port (yielded), with the background
    loops ``serve`` runs beside it (``runtime.background_for``; the settings say which), until
    the block ends; then the pipeline is closed."""
    decisions = DecisionLog()
    loops = background_for(settings, pipeline, decisions)
    runner = web.AppRunner(
        build_app(settings, pipeline, metrics=pipeline.metrics, decisions=decisions)
    )
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        loops.start()
        yield runner.addresses[0][1]
    finally:
        await loops.stop()
        await runner.cleanup()
        await pipeline.close()


async def eventually(
    probe: Callable[[], Awaitable[T] | T], *, within: float = 30.0, interval: float = 0.05
) -> T:
    """Poll until ``probe`` returns something truthy; fail with its last value at the deadline,
    which is generous: a poll returns as soon as its condition holds, on a busy machine too."""
    deadline = time.monotonic() + within
    while True:
        value = probe()
        if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
            value = await value
        if value:
            return value  # type: ignore[return-value]
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {within}s (last value {value!r})")
        await asyncio.sleep(interval)


def writes_since(cluster: SimulatorHandle, cursor: int) -> list[str]:
    return [
        f"{r.method} {r.path} -> {r.status}"
        for r in cluster.faults.requests(cursor)
        if r.verb in WRITE_VERBS
    ]


def node(cluster: SimulatorHandle, name: str) -> dict[str, Any]:
    from nodefence_sim.resources import NODES

    return cluster.sim.store.get(NODES, None, name)


def pause(cluster: SimulatorHandle, reason: str = "") -> None:
    """Pause nodefence cluster-wide, as ``nodefence pause`` does: the ConfigMap
    nodefence-control with ``nodefence.io/paused=true`` (and the reason, if any)."""
    from nodefence_sim.resources import CONFIGMAPS

    annotations = {"nodefence.io/paused": "true"}
    if reason:
        annotations["nodefence.io/paused-reason"] = reason
    cluster.sim.store.create(
        CONFIGMAPS,
        "nodefence",
        {"metadata": {"name": "nodefence-control", "annotations": annotations}},
    )


def oos_taints(cluster: SimulatorHandle, name: str) -> list[dict[str, Any]]:
    return [t for t in node(cluster, name)["spec"].get("taints") or [] if t["key"] == OOS]


def pods_on(cluster: SimulatorHandle, name: str) -> list[dict[str, Any]]:
    from nodefence_sim.resources import PODS

    return [p for p in cluster.sim.store.items(PODS) if p["spec"].get("nodeName") == name]


def terminating_on(cluster: SimulatorHandle, name: str) -> list[dict[str, Any]]:
    return [p for p in pods_on(cluster, name) if p["metadata"].get("deletionTimestamp")]


def node_events(cluster: SimulatorHandle, name: str) -> list[dict[str, Any]]:
    from nodefence_sim.resources import EVENTS

    return [
        e
        for e in cluster.sim.store.items(EVENTS)
        if e["involvedObject"].get("name") == name
        and (e.get("source") or {}).get("component") == "nodefence"
    ]
