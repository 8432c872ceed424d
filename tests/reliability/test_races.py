"""Attacks on S3, S4 and S7 by people and slow steps acting between nodefence's reads and writes.

Each test replays one way nodefence broke an invariant when an administrator, a lost record, a
slow replica or a misbehaving BMC acted at the wrong moment: an admin's taint taken for
nodefence's own, a stale power-off sent to a machine just powered on again, a deleted record
that let the budget be exceeded, foreign data dropped from the record. They run the real
receiver against the simulated API server and its Redfish BMCs, with real kubectl for the admin.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from nodefence.engine import record as fence_record
from nodefence_sim.redfish import bmcs_of, write_bmc_inventory
from nodefence_sim.resources import CONFIGMAPS, NODES
from nodefence_sim.simulation import Simulation
from nodefence_sim.testing import SimulatorHandle, running_simulator
from pipeline.harness import (
    eventually,
    node_events,
    oos_taints,
    start_receiver,
    terminating_on,
)

from .support import firing, kill_node

NODE = "control02"
TAINT = "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"


def redfish_policy(action: str = "off", **rule: Any) -> dict[str, Any]:
    """Proof from the simulator's Redfish BMCs; a short read-back so a machine that stays On is
    answered quickly."""
    return {
        "rules": [
            {
                "name": "default",
                "healthy_delay_seconds": 0,
                "fencing": {"driver": "redfish", "action": action, "timeout_seconds": 1.5},
                **rule,
            }
        ]
    }


@pytest.fixture
async def bmc_cluster(tmp_path: Path) -> AsyncIterator[tuple[SimulatorHandle, Path]]:
    async with running_simulator(Simulation.from_scenario("seed")) as handle:
        yield handle, write_bmc_inventory(tmp_path / "bmcs.yaml", handle.url, handle.sim)


def record_data(cluster: SimulatorHandle) -> dict[str, str]:
    found = cluster.sim.store.peek(CONFIGMAPS, "nodefence", fence_record.CONFIGMAP)
    return dict((found or {}).get("data") or {})


def entry(cluster: SimulatorHandle, name: str = NODE) -> dict[str, Any] | None:
    text = record_data(cluster).get(fence_record.FENCE_PREFIX + name)
    return json.loads(text) if text else None


async def kubectl(cluster: SimulatorHandle, *args: str) -> str:
    """The admin's real kubectl, off the event loop the simulator serves on."""
    done = await asyncio.to_thread(
        subprocess.run,
        ["kubectl", "--kubeconfig", str(cluster.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def pod_deletes(cluster: SimulatorHandle, since: int) -> int:
    return sum(
        1
        for r in cluster.faults.requests(since)
        if r.method == "DELETE" and "/pods/" in r.path and r.status == 200
    )


async def test_an_admins_taint_on_a_claimed_node_is_never_adopted_purged_under_or_removed(
    bmc_cluster: tuple[SimulatorHandle, Path],
) -> None:
    """Attack 1 (S4): the BMC accepts ForceOff but the machine stays On, so nodefence holds a
    claim without a taint. An admin then runs the runbook by hand with kubectl. The taint is
    the admin's: the claim is let go with an Event saying why, no pod is deleted by nodefence,
    and after the node comes back the admin's taint is still on it."""
    cluster, inventory = bmc_cluster
    bmcs = bmcs_of(cluster.sim)
    bmcs.stuck_on.add(NODE)
    await kill_node(cluster, NODE)
    async with start_receiver(
        cluster, policy=redfish_policy(), bmc_inventory=inventory
    ) as receiver:
        [refused] = await receiver.alert(firing(NODE))
        assert refused["verdict"] == "noop", refused
        assert (NODE, "ForceOff") in bmcs.resets
        held = entry(cluster)
        assert held is not None and held["phase"] == "claimed", held
        assert oos_taints(cluster, NODE) == []

        await kubectl(cluster, "taint", "node", NODE, TAINT)
        cursor = cluster.faults.cursor
        status, _ = await receiver.post("/reconcile", {})
        assert status == 200
        [again] = await receiver.alert(firing(NODE))
        assert again["verdict"] != "fence", again

        assert entry(cluster) is None, "the claim must be let go, not confirmed"
        assert pod_deletes(cluster, cursor) == 0, "nothing is purged under the admin's taint"
        assert terminating_on(cluster, NODE), "the stuck pods are the admin's to handle"
        released = [e for e in node_events(cluster, NODE) if e["reason"] == "FenceReleased"]
        assert released, node_events(cluster, NODE)
        assert "someone else's out-of-service taint" in released[0]["message"]
        assert "kubectl-taint" in released[0]["message"], released[0]["message"]

        bmcs.stuck_on.discard(NODE)
        cluster.sim.node_up(NODE, since_seconds=600, reboot=True)
        await eventually(lambda: cluster.sim.node_state(NODE)["kubelet"] == "up")
        for _ in range(2):
            status, _ = await receiver.post("/reconcile", {})
            assert status == 200
        [taint] = oos_taints(cluster, NODE)
        assert "timeAdded" not in taint, "still the admin's own taint, as kubectl wrote it"
        assert entry(cluster) is None


async def test_nodefences_own_taint_carries_its_authorship_into_the_record(
    bmc_cluster: tuple[SimulatorHandle, Path],
) -> None:
    """The other side of attack 1: the taint nodefence writes is stamped (timeAdded), written
    as nodefence's field manager, and the write's reply is kept in the entry, so the reconcile
    pass still knows it as nodefence's after other controllers rewrote the node's taints."""
    cluster, inventory = bmc_cluster
    await kill_node(cluster, NODE)
    async with start_receiver(
        cluster, policy=redfish_policy(), bmc_inventory=inventory
    ) as receiver:
        [decision] = await receiver.alert(firing(NODE))
        assert decision["verdict"] == "fence", decision
        held = entry(cluster)
        assert held is not None and held["phase"] == "fenced", held
        [taint] = oos_taints(cluster, NODE)
        assert held["taintAdded"] == taint["timeAdded"], (held, taint)
        assert held["taintVersion"]
        raw = cluster.sim.store.get(NODES, None, NODE)
        owners = [
            m["manager"]
            for m in raw["metadata"].get("managedFields") or []
            if "f:taints" in (m.get("fieldsV1") or {}).get("f:spec", {})
        ]
        assert "nodefence" in owners, owners
