"""Shared by the identity tests: the seed cluster with its simulated Redfish BMCs, an inventory
derived from the simulator's own, a receiver that uses it, and ``check-config`` on it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from pydantic import SecretStr
from tests.seeded_cluster import Receiver, eventually, served

from nodefence.engine import record as fence_record
from nodefence.observability.metrics import Metrics
from nodefence.policy import parse_policy
from nodefence.runtime import build_fencer
from nodefence.settings import Settings
from nodefence_sim.redfish import write_bmc_inventory
from nodefence_sim.resources import CONFIGMAPS
from nodefence_sim.testing import SimulatorHandle

NODE = "compute01"
OTHER = "compute02"
POLICY: dict[str, Any] = {
    "rules": [
        {
            "name": "default",
            "fencing": {"driver": "redfish", "action": "off", "timeout_seconds": 10},
        }
    ],
    # Two dead workers of five: within the budget, the storm threshold and the ready fraction.
    "cluster": {"max_fenced_nodes": 2, "storm_not_ready_fraction": 0.6, "min_ready_fraction": 0.5},
}


def inventory(tmp_path: Path, cluster: SimulatorHandle, **changes: dict[str, Any] | None) -> Path:
    """The simulator's own inventory (every node on its own system), with ``changes`` applied
    per node: fields to set, or None to leave the node out."""
    path = write_bmc_inventory(tmp_path / "bmcs.yaml", cluster.url, cluster.sim)
    data = yaml.safe_load(path.read_text())
    for node, change in changes.items():
        if change is None:
            del data["nodes"][node]
        else:
            data["nodes"][node].update(change)
    path.write_text(yaml.safe_dump(data))
    return path


@asynccontextmanager
async def receiver(
    cluster: SimulatorHandle, bmcs: Path, policy: dict[str, Any] = POLICY, *, follow: bool = False
) -> AsyncIterator[Receiver]:
    """A receiver in this process; ``follow``: with the node index of a serving one."""
    settings = Settings(
        alert_token=SecretStr("identity-test-token"),
        namespace="nodefence",
        identity="replica-1",
        request_deadline_seconds=30,
        bmc_inventory=bmcs,
        reconcile_interval=0,
        fencing_probe_interval=0,
    )
    pipeline = await build_fencer(
        settings,
        metrics=Metrics(),
        policy=parse_policy(policy),
        kubeconfig=str(cluster.kubeconfig),
        serving=follow,
    )
    async with served(settings, pipeline) as port, aiohttp.ClientSession() as session:
        yield Receiver(
            f"http://127.0.0.1:{port}", "identity-test-token", pipeline, pipeline.metrics, session
        )


async def kill(cluster: SimulatorHandle, name: str) -> None:
    """The node's kubelet died twenty minutes ago (its machine still runs)."""
    cluster.sim.node_down(name, since_seconds=1200)
    await eventually(lambda: cluster.sim.node_state(name)["ready"] != "True")


def check_config(
    tmp_path: Path, bmcs: Path, rules: dict[str, Any] | None = None
) -> subprocess.CompletedProcess[str]:
    """``nodefence check-config --offline`` on the inventory ``bmcs`` and the policy ``rules``
    (POLICY unless given), in an environment holding nothing else of nodefence's."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(POLICY if rules is None else rules))
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "NODEFENCE_AUTH_DISABLED": "true",
        "NODEFENCE_POLICY_FILE": str(policy),
        "NODEFENCE_BMC_INVENTORY": str(bmcs),
    }
    return subprocess.run(
        [sys.executable, "-m", "nodefence", "check-config", "--offline"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=60,
    )


def reasons(decision: dict[str, Any]) -> str:
    return " | ".join(str(r["message"]) for r in decision["reasons"])


def record_entries(cluster: SimulatorHandle) -> tuple[fence_record.FenceEntry, ...]:
    held = cluster.sim.store.peek(CONFIGMAPS, "nodefence", fence_record.CONFIGMAP)
    if held is None:
        return ()
    return fence_record.decode(held.get("data"), "1").entries
