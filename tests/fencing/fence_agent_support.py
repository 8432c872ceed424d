"""The pieces the fence-agent tests share: a simulated cluster, a receiver serving the
``fence-agent`` driver's policy with a given BMC inventory, and how a node is killed and a
decision read. Kept here so that no test module imports another."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from pydantic import SecretStr
from tests.seeded_cluster import Receiver, eventually, served

from nodefence.http.app import run
from nodefence.observability.metrics import Metrics
from nodefence.policy import parse_policy
from nodefence.runtime import build_fencer, build_service
from nodefence.settings import Settings
from nodefence_sim.testing import SimulatorHandle

from .peers import free_port

NODE = "compute01"
TOKEN = "fence-agent-test-token"


def policy(timeout: float) -> dict[str, Any]:
    return {
        "rules": [
            {
                "name": "default",
                "fencing": {"driver": "fence-agent", "action": "off", "timeout_seconds": timeout},
            }
        ],
        "cluster": {
            "max_fenced_nodes": 2,
            "storm_not_ready_fraction": 0.6,
            "min_ready_fraction": 0.5,
        },
    }


def write_inventory(tmp_path: Path, fence_agent: dict[str, Any], nodes: list[str]) -> Path:
    path = tmp_path / "bmcs.yaml"
    data = {
        "defaults": {"fence-agent": fence_agent},
        # These tests are about the proof path, not the machine's identity (which the scripted
        # agents cannot report; fence_redfish's is tested in test_agent_identity_peers).
        "nodes": {node: {"driver": "fence-agent", "identity": "unchecked"} for node in nodes},
    }
    path.write_text(yaml.safe_dump(data))
    return path


@asynccontextmanager
async def receiver(
    cluster: SimulatorHandle, bmcs: Path, timeout: float = 40
) -> AsyncIterator[Receiver]:
    settings = Settings(
        alert_token=SecretStr(TOKEN),
        namespace="nodefence",
        identity="replica-1",
        request_deadline_seconds=60,
        bmc_inventory=bmcs,
        reconcile_interval=0,
        fencing_probe_interval=0,
    )
    pipeline = await build_fencer(
        settings,
        metrics=Metrics(),
        policy=parse_policy(policy(timeout)),
        kubeconfig=str(cluster.kubeconfig),
    )
    async with served(settings, pipeline) as port, aiohttp.ClientSession() as session:
        yield Receiver(f"http://127.0.0.1:{port}", TOKEN, pipeline, pipeline.metrics, session)


@asynccontextmanager
async def serving_probes(
    cluster: SimulatorHandle, bmcs: Path, namespace: str = "nodefence"
) -> AsyncIterator[int]:
    """All of ``nodefence serve`` (its HTTP port yielded), probing the inventory ``bmcs`` every
    second with the reconcile loop off, until the block ends."""
    port = free_port()
    settings = Settings(
        alert_token=SecretStr("probe-test-token"),
        namespace=namespace,
        identity="replica-1",
        host="127.0.0.1",
        port=port,
        bmc_inventory=bmcs,
        fencing_probe_interval=1,
        reconcile_interval=0,
    )
    metrics = Metrics()
    policy = parse_policy({"rules": [{"name": "default", "fencing": {"driver": "fence-agent"}}]})
    service = await build_service(
        settings, metrics=metrics, policy=policy, kubeconfig=str(cluster.kubeconfig)
    )
    stop = asyncio.Event()
    serving = asyncio.create_task(
        run(
            settings,
            service.fencer,
            metrics=metrics,
            stop=stop,
            decisions=service.decisions,
            background=service.background,
        )
    )
    try:
        yield port
    finally:
        stop.set()
        await serving


async def kill(cluster: SimulatorHandle, name: str) -> None:
    cluster.sim.node_down(name, since_seconds=1200)
    await eventually(lambda: cluster.sim.node_state(name)["ready"] != "True")


def text_of(decision: dict[str, Any]) -> str:
    reasons = " | ".join(str(r["message"]) for r in decision["reasons"])
    results = " | ".join(str(r.get("detail", "")) for r in decision.get("results", []))
    return f"{reasons} || {results}"
