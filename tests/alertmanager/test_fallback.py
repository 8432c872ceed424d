"""The fallback (``cluster.fallback_after_seconds``): a node that died with no alert reaching
nodefence is fenced by the reconcile pass, with every guard and with proof, when Alertmanager
is stopped, unreachable by address, or up but holding no alert for it; a silence held by a real
Alertmanager stops it, and Alertmanager coming back brings no second fence."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.processes import Processes, free_port
from tests.seeded_cluster import Receiver, node_events, oos_taints, start_receiver

from nodefence_sim.redfish import bmcs_of, write_bmc_inventory
from nodefence_sim.simulation import Simulation
from nodefence_sim.testing import SimulatorHandle, running_simulator

from .conftest import Starter, alert

NODE = "compute02"
# The node's kubelet stopped this long ago: far past the 420 s default.
DOWN_SECONDS = 1200


def redfish_policy(**cluster: Any) -> dict[str, Any]:
    return {
        "rules": [
            {
                "name": "default",
                "healthy_delay_seconds": 0,
                "fencing": {"driver": "redfish", "action": "off", "timeout_seconds": 1.5},
            }
        ],
        "cluster": cluster,
    }


async def reconcile(receiver: Receiver) -> list[dict[str, Any]]:
    """The decisions of one reconcile pass about NODE."""
    status, body = await receiver.post("/reconcile", {})
    assert status == 200, body
    return [d for d in body["decisions"] if d["node"] == NODE]


def force_offs(cluster: SimulatorHandle) -> int:
    return sum(
        1 for node, reset in bmcs_of(cluster.sim).resets if (node, reset) == (NODE, "ForceOff")
    )


def alertmanager_requests_timed(receiver: Receiver) -> float:
    """How many of the receiver's requests to Alertmanager's API its latency histogram holds."""
    name = "nodefence_alertmanager_request_duration_seconds_count"
    return receiver.metrics.registry.get_sample_value(name) or 0


def assert_fenced_without_alert(decision: dict[str, Any], why: str) -> None:
    assert decision["verdict"] == "fence", decision
    first = decision["reasons"][0]
    assert first["guard"] == "no-alert", decision
    assert first["message"].startswith("no alert arrived: "), first
    assert why in first["message"], first
    assert decision["alertname"] == "no alert (fallback)", decision
    # Every guard still ran, and the proof is the BMC's Off read back.
    guards = {r["guard"] for r in decision["reasons"]}
    assert {"ready", "lease", "not-ready-duration", "power-off"} <= guards, guards
    assert all(r["passed"] for r in decision["reasons"] if r["guard"] != "volumes"), decision


async def test_alertmanager_unreachable_by_address_then_back_fences_once(
    tmp_path: Path, start_alertmanager: Starter
) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    async with running_simulator(Simulation.from_scenario("seed")) as cluster:
        inventory = write_bmc_inventory(tmp_path / "bmcs.yaml", cluster.url, cluster.sim)
        cluster.sim.node_down(NODE, since_seconds=DOWN_SECONDS)
        async with start_receiver(
            cluster, policy=redfish_policy(), alertmanager_url=closed, bmc_inventory=inventory
        ) as receiver:
            [decision] = await reconcile(receiver)
            assert_fenced_without_alert(decision, "Alertmanager is unreachable since ")
            assert len(oos_taints(cluster, NODE)) == 1
            assert force_offs(cluster) == 1
            [fenced] = [e for e in node_events(cluster, NODE) if e["reason"] == "NodeFenced"]
            assert fenced["message"].startswith("no alert arrived: Alertmanager is unreachable")
            assert "out-of-service taint applied" in fenced["message"]
            warned = node_events(cluster, "nodefence-fences")
            assert [e["reason"] for e in warned] == ["AlertmanagerUnreachable"], warned
            assert warned[0]["type"] == "Warning"
            assert receiver.metrics.alertmanager_up._value.get() == 0
            assert alertmanager_requests_timed(receiver) > 0, "failed requests are timed too"
        # Alertmanager back, holding the alert that finally fired: no second fence.
        am = start_alertmanager()
        await am.post_alerts(alert("KubeNodeNotReady", node=NODE))
        async with start_receiver(
            cluster, policy=redfish_policy(), alertmanager_url=am.url, bmc_inventory=inventory
        ) as receiver:
            again = await reconcile(receiver)
            assert all(d["verdict"] != "fence" for d in again), again
            assert receiver.metrics.alertmanager_up._value.get() == 1
            assert alertmanager_requests_timed(receiver) > 0
        assert len(oos_taints(cluster, NODE)) == 1
        assert force_offs(cluster) == 1


async def test_alertmanager_stopped_fences(
    tmp_path: Path, procs: Processes, start_alertmanager: Starter
) -> None:
    am = start_alertmanager()
    procs.stop_all()
    async with running_simulator(Simulation.from_scenario("seed")) as cluster:
        inventory = write_bmc_inventory(tmp_path / "bmcs.yaml", cluster.url, cluster.sim)
        cluster.sim.node_down(NODE, since_seconds=DOWN_SECONDS)
        async with start_receiver(
            cluster, policy=redfish_policy(), alertmanager_url=am.url, bmc_inventory=inventory
        ) as receiver:
            [decision] = await reconcile(receiver)
        assert_fenced_without_alert(decision, "Alertmanager is unreachable since ")
        assert len(oos_taints(cluster, NODE)) == 1


async def test_alertmanager_holding_no_alert_fences_and_says_so(
    tmp_path: Path, start_alertmanager: Starter
) -> None:
    am = start_alertmanager()
    async with running_simulator(Simulation.from_scenario("seed")) as cluster:
        inventory = write_bmc_inventory(tmp_path / "bmcs.yaml", cluster.url, cluster.sim)
        cluster.sim.node_down(NODE, since_seconds=DOWN_SECONDS)
        async with start_receiver(
            cluster, policy=redfish_policy(), alertmanager_url=am.url, bmc_inventory=inventory
        ) as receiver:
            [decision] = await reconcile(receiver)
        assert_fenced_without_alert(decision, "Alertmanager holds no alert for it")
        assert node_events(cluster, "nodefence-fences") == []


async def test_a_silence_stops_the_fallback(tmp_path: Path, start_alertmanager: Starter) -> None:
    am = start_alertmanager()
    await am.post_alerts(alert("KubeNodeNotReady", node=NODE))
    await am.silence(node=NODE)
    async with running_simulator(Simulation.from_scenario("seed")) as cluster:
        inventory = write_bmc_inventory(tmp_path / "bmcs.yaml", cluster.url, cluster.sim)
        cluster.sim.node_down(NODE, since_seconds=DOWN_SECONDS)
        async with start_receiver(
            cluster, policy=redfish_policy(), alertmanager_url=am.url, bmc_inventory=inventory
        ) as receiver:
            assert await reconcile(receiver) == []
            assert await reconcile(receiver) == []
        assert oos_taints(cluster, NODE) == []
        assert force_offs(cluster) == 0


async def test_too_early_or_turned_off_judges_nothing(tmp_path: Path) -> None:
    async with running_simulator(Simulation.from_scenario("seed")) as cluster:
        inventory = write_bmc_inventory(tmp_path / "bmcs.yaml", cluster.url, cluster.sim)
        cluster.sim.node_down(NODE, since_seconds=DOWN_SECONDS)
        off = redfish_policy(fallback_after_seconds=0)
        async with start_receiver(cluster, policy=off, bmc_inventory=inventory) as receiver:
            assert await reconcile(receiver) == []
        later = redfish_policy(fallback_after_seconds=DOWN_SECONDS * 2)
        async with start_receiver(cluster, policy=later, bmc_inventory=inventory) as receiver:
            assert await reconcile(receiver) == []
        assert oos_taints(cluster, NODE) == []
        assert force_offs(cluster) == 0
        # Without an Alertmanager API at all, the reason says there is none to ask.
        async with start_receiver(
            cluster, policy=redfish_policy(), bmc_inventory=inventory
        ) as receiver:
            [decision] = await reconcile(receiver)
        assert_fenced_without_alert(decision, "no Alertmanager API is configured")


def status(cluster: SimulatorHandle, am_url: str | None, *args: str) -> str:
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "NODEFENCE_NAMESPACE": "nodefence"}
    env.pop("NODEFENCE_ALERTMANAGER_URL", None)
    if am_url is not None:
        env["NODEFENCE_ALERTMANAGER_URL"] = am_url
    done = subprocess.run(
        [sys.executable, "-m", "nodefence", "status", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_status_says_whether_alertmanager_answers(start_alertmanager: Starter) -> None:
    am = start_alertmanager()
    await am.post_alerts(alert("KubeNodeNotReady", node=NODE))
    await am.silence(node=NODE)
    closed = f"http://127.0.0.1:{free_port()}"
    async with running_simulator(Simulation.from_scenario("seed")) as cluster:
        up = json.loads(await asyncio.to_thread(status, cluster, am.url, "-o", "json"))
        assert up["alertmanager"]["reachable"] is True
        # A silenced alert is held: the fallback leaves that node alone.
        assert up["alertmanager"]["nodesHeld"] == [NODE]
        down = await asyncio.to_thread(status, cluster, closed)
        assert "Alertmanager: UNREACHABLE: Alertmanager at " in down
        assert "without knowing of silences" in down
        none = await asyncio.to_thread(status, cluster, None)
        assert "Alertmanager: not configured (NODEFENCE_ALERTMANAGER_URL)" in none
