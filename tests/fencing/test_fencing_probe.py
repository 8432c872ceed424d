"""The background probe of ``serve``: each inventory node's power state read on its own, status
only, exported as ``nodefence_fencing_ready{node,driver}`` with the time of the read."""

from __future__ import annotations

from pathlib import Path

import aiohttp
from prometheus_client import CollectorRegistry
from tests.seeded_cluster import eventually

from nodefence.background.fencing_probe import FencingProbe, ProbeMetrics
from nodefence.fencing.inventory import load_inventory
from nodefence_sim.testing import SimulatorHandle

from .agents import AGENT_PASSWORD, two_agents
from .fence_agent_support import serving_probes


def sample(text: str, name: str, **labels: str) -> float | None:
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(f"{name}{{{wanted}}} "):
            return float(line.rsplit(" ", 1)[1])
    return None


async def test_one_round_marks_each_node_ready_or_not_and_sends_no_action(
    tmp_path: Path,
) -> None:
    path, good, bad = two_agents(tmp_path)
    registry = CollectorRegistry()
    probe = FencingProbe(
        load_inventory(path), ProbeMetrics(registry), interval=60, wall_clock=lambda: 1234.0
    )
    checks = {c.node: c for c in await probe.probe_once()}
    assert checks["compute01"].answered
    assert not checks["compute02"].answered
    assert AGENT_PASSWORD not in checks["compute02"].error
    ready = registry.get_sample_value
    assert ready("nodefence_fencing_ready", {"node": "compute01", "driver": "fence-agent"}) == 1
    assert ready("nodefence_fencing_ready", {"node": "compute02", "driver": "fence-agent"}) == 0
    stamp = ready(
        "nodefence_fencing_probe_timestamp_seconds", {"node": "compute02", "driver": "fence-agent"}
    )
    assert stamp == 1234.0
    # Read-only: status and nothing else, on either machine.
    assert good.actions() == ["status"]
    assert bad.actions() == ["status"]
    assert good.power == "on"


def test_an_interval_of_zero_or_no_inventory_runs_nothing(tmp_path: Path) -> None:
    path, _, _ = two_agents(tmp_path)
    off = FencingProbe(load_inventory(path), ProbeMetrics(CollectorRegistry()), interval=0)
    empty = FencingProbe(None, ProbeMetrics(CollectorRegistry()), interval=60)
    assert not off.enabled
    assert not empty.enabled


async def test_serve_probes_on_its_own_and_exports_the_result(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    path, good, _ = two_agents(tmp_path)
    async with serving_probes(cluster, path) as port:

        async def exported() -> str | None:
            try:
                async with (
                    aiohttp.ClientSession() as session,
                    session.get(f"http://127.0.0.1:{port}/metrics") as reply,
                ):
                    text = await reply.text()
            except aiohttp.ClientError:
                return None
            rounds = [a for a in good.actions() if a == "status"]
            if (
                len(rounds) < 2
                or sample(text, "nodefence_fencing_ready", node="compute02", driver="fence-agent")
                is None
            ):
                return None
            return text

        text = await eventually(exported, within=60, interval=0.2)
    assert sample(text, "nodefence_fencing_ready", driver="fence-agent", node="compute01") == 1
    assert sample(text, "nodefence_fencing_ready", driver="fence-agent", node="compute02") == 0
    assert set(good.actions()) == {"status"}
