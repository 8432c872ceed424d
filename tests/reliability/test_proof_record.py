"""The power-off proof is written into the fence record before the taint, so no crash can lose it.

A replica proves compute01's machine off through its (simulated) Redfish BMC, writes the taint,
and is killed with SIGKILL before it can confirm the fence: the record's entry still holds the
proof (source, state, the API server's time, the identity matched, that a reset was sent), and
the next replica completes the fence on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from bench.processes import free_port
from tests.seeded_cluster import OOS, oos_taints

from nodefence.engine import record as fence_record
from nodefence.engine.record import FenceEntry, Phase
from nodefence_sim.controllers.kubelet import system_uuid
from nodefence_sim.redfish import bmcs_of, write_bmc_inventory
from nodefence_sim.resources import CONFIGMAPS
from nodefence_sim.testing import SimulatorHandle

from .support import firing, until

NODE = "compute01"
TOKEN = "proof-record-token"
NODE_WRITE = f"/api/v1/nodes/{NODE}"
RECORD_PATH = f"/api/v1/namespaces/nodefence/configmaps/{fence_record.CONFIGMAP}"
# The taint write is held this long before the simulator applies it: time for the test to make
# the fence record unanswerable before the confirm that follows the taint can reach it.
TAINT_LATENCY_SECONDS = 3.0
POLICY: dict[str, Any] = {
    "rules": [
        {
            "name": "default",
            "fencing": {"driver": "redfish", "action": "off", "timeout_seconds": 15},
        }
    ]
}


class Serve:
    """``nodefence serve`` with the simulator's BMC inventory, in its own process group."""

    def __init__(self, cluster: SimulatorHandle, directory: Path, identity: str) -> None:
        policy = directory / "policy.yaml"
        policy.write_text(yaml.safe_dump(POLICY))
        inventory = write_bmc_inventory(directory / "bmcs.yaml", cluster.url, cluster.sim)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {
            **os.environ,
            "KUBECONFIG": str(cluster.kubeconfig),
            "PORT": str(self.port),
            "NODEFENCE_HOST": "127.0.0.1",
            "NODEFENCE_ALERT_TOKEN": TOKEN,
            "NODEFENCE_IDENTITY": identity,
            "NODEFENCE_NAMESPACE": "nodefence",
            "NODEFENCE_LOG_LEVEL": "warning",
            "NODEFENCE_POLICY_FILE": str(policy),
            "NODEFENCE_BMC_INVENTORY": str(inventory),
            # Only the deliveries of this test act, not a pass of the receiver's own.
            "NODEFENCE_RECONCILE_INTERVAL": "0",
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", "nodefence", "serve"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    async def healthy(self, http: aiohttp.ClientSession) -> None:
        async def answers() -> bool:
            assert self.process.poll() is None, "nodefence serve exited during startup"
            with contextlib.suppress(aiohttp.ClientError):
                async with http.get(self.url + "/healthz") as response:
                    return response.status == 200
            return False

        await until(answers, within=30, interval=0.05)

    async def alert(self, http: aiohttp.ClientSession) -> tuple[int, dict[str, Any]]:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with http.post(self.url + "/alerts", json=firing(NODE), headers=headers) as r:
            return r.status, await r.json()

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


def entry_of(cluster: SimulatorHandle) -> FenceEntry:
    held = cluster.sim.store.peek(CONFIGMAPS, "nodefence", fence_record.CONFIGMAP)
    assert held is not None, "no fence record"
    record = fence_record.decode(held.get("data"), "1")
    [entry] = [e for e in record.entries if e.node == NODE]
    return entry


def taint_write_in_flight(cluster: SimulatorHandle, since: int) -> bool:
    return any(
        r.path == NODE_WRITE and r.method in ("PUT", "PATCH")
        for r in cluster.faults.requests(since)
    )


async def test_a_replica_killed_between_taint_and_confirm_leaves_its_proof(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    cluster.sim.node_down(NODE, since_seconds=1200)
    await until(polled(lambda: cluster.sim.node_state(NODE)["ready"] != "True"))
    faults = cluster.faults
    faults.slow(TAINT_LATENCY_SECONDS, verbs=("update", "patch"), path=NODE_WRITE)
    cursor = faults.cursor
    first = Serve(cluster, tmp_path, "replica-a")
    try:
        async with aiohttp.ClientSession() as http:
            await first.healthy(http)
            delivery = asyncio.create_task(first.alert(http))
            await until(polled(lambda: taint_write_in_flight(cluster, cursor)), within=60)
            # The taint is on its way; from now on the fence record answers nobody, so the
            # confirm after the taint cannot happen before the kill.
            faults.hang_seconds = 60
            faults.hang(count=None, path=RECORD_PATH)
            await until(polled(lambda: oos_taints(cluster, NODE)), within=30)
            first.kill()
            with contextlib.suppress(aiohttp.ClientError):
                await delivery
    finally:
        first.kill()
    faults.clear()

    # Killed between taint and confirm: the entry is only claimed, and holds the proof.
    entry = entry_of(cluster)
    assert entry.phase is Phase.CLAIMED, entry
    assert entry.power_off_sent_at is not None
    proof = entry.proof
    assert "reported Off" in proof, proof
    assert "after nodefence powered it off" in proof, proof
    assert f"identity matched ({system_uuid(NODE)})" in proof, proof
    assert f"/redfish/v1/Systems/{NODE}" in proof, proof
    # Timed on the API server's clock (the Date of the record write that carried it).
    assert re.search(r"read back at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", proof), proof
    assert bmcs_of(cluster.sim).resets == [(NODE, "ForceOff")]
    [taint] = oos_taints(cluster, NODE)
    assert taint["key"] == OOS

    # The next replica completes that very fence on the recorded proof, sending nothing again.
    (tmp_path / "second").mkdir()
    second = Serve(cluster, tmp_path / "second", "replica-b")
    try:
        async with aiohttp.ClientSession() as http:
            await second.healthy(http)
            status, body = await second.alert(http)
            assert status == 200, body
    finally:
        second.kill()
    done = entry_of(cluster)
    assert done.phase is Phase.FENCED, done
    assert "reported Off" in done.proof
    assert f"identity matched ({system_uuid(NODE)})" in done.proof
    assert bmcs_of(cluster.sim).resets == [(NODE, "ForceOff")], "the power-off went out twice"
    assert len(oos_taints(cluster, NODE)) == 1


def polled(probe: Callable[[], object]) -> Callable[[], Awaitable[object]]:
    async def poll() -> object:
        return probe()

    return poll
