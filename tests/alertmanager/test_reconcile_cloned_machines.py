"""S10 for the one-shot ``nodefence reconcile`` (the CronJob of a receiver that scales to zero):
it judges the real Alertmanager's active node alerts and may fence, with no node index. A node
cloned from another's image reports that node's systemUUID; the Nodes are listed live before any
power action, so the twin is found and nothing is sent to the BMC or tainted."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.seeded_cluster import node_events, oos_taints

from fencing.identity_support import NODE, OTHER, POLICY, inventory, kill, record_entries
from nodefence_sim.controllers.kubelet import system_uuid
from nodefence_sim.redfish import SYSTEMS, bmcs_of
from nodefence_sim.resources import NODES
from nodefence_sim.simulation import Simulation
from nodefence_sim.testing import SimulatorHandle, running_simulator

from .conftest import Starter, alert

pytestmark = pytest.mark.invariant("S10")


async def reconcile(cluster: SimulatorHandle, tmp_path: Path, bmcs: Path, am_url: str) -> Any:
    """The real ``nodefence reconcile``, run while this loop keeps serving the simulator."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(POLICY))
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "KUBECONFIG": str(cluster.kubeconfig),
        "NODEFENCE_NAMESPACE": "nodefence",
        "NODEFENCE_IDENTITY": "reconcile-job",
        "NODEFENCE_POLICY_FILE": str(policy),
        "NODEFENCE_BMC_INVENTORY": str(bmcs),
        "NODEFENCE_ALERTMANAGER_URL": am_url,
        "NODEFENCE_REQUEST_DEADLINE_SECONDS": "30",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "nodefence",
        "reconcile",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == 0, err.decode()[-3000:]
    return json.loads(out)


async def test_one_shot_reconcile_powers_nothing_off_for_a_cloned_machine(
    start_alertmanager: Starter, tmp_path: Path
) -> None:
    am = start_alertmanager()
    await am.post_alerts(alert("KubeNodeNotReady", node=NODE))
    async with running_simulator(Simulation.from_scenario("seed")) as cluster:
        await kill(cluster, NODE)
        store = cluster.sim.store
        node = store.get(NODES, None, NODE)
        node["status"]["nodeInfo"]["systemUUID"] = system_uuid(OTHER)
        store.update(NODES, None, NODE, node, subresource="all", check_rv=False)
        # compute01's line points at compute02's system, whose UUID compute01 now reports.
        bmcs = inventory(
            tmp_path, cluster, compute01={"system": f"{SYSTEMS}/{OTHER}"}, compute02=None
        )

        body = await reconcile(cluster, tmp_path, bmcs, am.url)

        [decision] = [d for d in body["decisions"] if d["node"] == NODE]
        text = " | ".join(str(r["message"]) for r in decision["reasons"]) + " ".join(
            str(r.get("detail", "")) for r in decision["results"]
        )
        assert decision["verdict"] != "fence", decision
        assert f"systemUUID {system_uuid(OTHER)} is also reported by compute02" in text, text
        assert bmcs_of(cluster.sim).resets == []
        assert cluster.sim.node_state(OTHER)["ready"] == "True"
        assert oos_taints(cluster, NODE) == []
        assert record_entries(cluster) == (), "the claim was not rolled back"
        failed = [e for e in node_events(cluster, NODE) if e["reason"] == "NodefenceActionFailed"]
        assert failed, node_events(cluster, NODE)
        assert "also reported by compute02" in failed[-1]["message"], failed
