"""API requests of one alert whose proof comes from a BMC, by what became of it.

``python -m bench.power_requests``: the seed cluster with its simulated Redfish BMCs; one dead
worker, one firing alert, handled by a receiver in this process, for three outcomes: a fence
(ForceOff read back Off), a refusal on a wrong inventory line (the BMC reports another machine's
UUID) and a ``verify`` rule on a machine that still runs. Prints the API requests each made
(watches left out) and how many of them wrote the fence record; asserts nothing. Counts, not
times: they do not move with the machine's load.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml
from pydantic import SecretStr

from nodefence.engine.model import AlertEvent, AlertStatus
from nodefence.kube.client import Deadline
from nodefence.observability.logging import configure_logging
from nodefence.observability.metrics import Metrics
from nodefence.policy import parse_policy
from nodefence.runtime import build_fencer
from nodefence.settings import Settings
from nodefence_sim.redfish import SYSTEMS, write_bmc_inventory
from nodefence_sim.simulation import Simulation
from nodefence_sim.testing import SimulatorHandle, running_simulator

NODE = "compute01"
OTHER = "compute02"
CLUSTER = {"max_fenced_nodes": 2, "storm_not_ready_fraction": 0.6, "min_ready_fraction": 0.5}
OFF = {"name": "default", "fencing": {"driver": "redfish", "action": "off", "timeout_seconds": 10}}
VERIFY = {"name": "default", "fencing": {"driver": "redfish", "action": "verify"}}
WRITES = ("POST", "PUT", "PATCH", "DELETE")


def _inventory(path: Path, cluster: SimulatorHandle, wrong_line: bool) -> Path:
    written = write_bmc_inventory(path, cluster.url, cluster.sim)
    if not wrong_line:
        return written
    data = yaml.safe_load(written.read_text())
    data["nodes"][NODE]["system"] = f"{SYSTEMS}/{OTHER}"
    del data["nodes"][OTHER]
    written.write_text(yaml.safe_dump(data))
    return written


async def _one(rule: dict[str, Any], *, wrong_line: bool = False) -> tuple[str, int, int]:
    async with running_simulator(Simulation.from_scenario("seed")) as cluster:
        workdir = Path(tempfile.mkdtemp(prefix="nodefence-bench-"))
        settings = Settings(
            alert_token=SecretStr("bench-token"),
            namespace="nodefence",
            identity="bench",
            request_deadline_seconds=30,
            bmc_inventory=_inventory(workdir / "bmcs.yaml", cluster, wrong_line),
        )
        policy = parse_policy({"rules": [rule], "cluster": CLUSTER})
        pipeline = await build_fencer(
            settings, metrics=Metrics(), policy=policy, kubeconfig=str(cluster.kubeconfig)
        )
        cluster.sim.node_down(NODE, since_seconds=1200)
        event = AlertEvent("KubeNodeNotReady", AlertStatus.FIRING, NODE, "fp-bench", {"node": NODE})
        try:
            cursor = cluster.faults.cursor
            decision = await pipeline.handle_event(event, Deadline(30))
            made = [r for r in cluster.faults.requests(cursor) if "watch=" not in r.query]
        finally:
            await pipeline.close()
    record = [r for r in made if r.method in WRITES and "/configmaps" in r.path]
    return decision.verdict.value, len(made), len(record)


async def _all() -> list[tuple[str, str, int, int]]:
    rows = []
    for label, rule, wrong in (
        ("fence, Off read back", OFF, False),
        ("refused, wrong inventory line", OFF, True),
        ("verify, machine running", VERIFY, False),
    ):
        verdict, made, record = await _one(rule, wrong_line=wrong)
        rows.append((label, verdict, made, record))
    return rows


def main() -> None:
    # The receiver's decision lines would bury the table: only warnings and errors, on stderr.
    configure_logging("console", "warning", stream=sys.stderr)
    print(f"{'outcome':<32}{'verdict':<10}{'API requests':>14}{'record writes':>15}")
    for label, verdict, made, record in asyncio.run(_all()):
        print(f"{label:<32}{verdict:<10}{made:>14}{record:>15}")


if __name__ == "__main__":
    main()
