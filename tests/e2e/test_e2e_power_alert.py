"""``NodefencePowerActionFailed`` with the real Prometheus: a receiver that just started (to
Prometheus a restarted pod is a new target whose series begin with it) exports its power series
from 0, and the first power-off that ends without the state read back fires the shipped rule.

The simulator runs in the test's process, where its Redfish BMC can be made to keep the machine
On after a ForceOff; ``nodefence serve`` and Prometheus are processes of their own, and every
blocking wait for them runs off the event loop the simulator serves on."""

from __future__ import annotations

import asyncio
import json
import secrets
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import yaml
from bench.processes import Processes, eventually, get_json, http

from nodefence_sim.demo.payloads import node_alert, webhook
from nodefence_sim.redfish import bmcs_of, write_bmc_inventory
from nodefence_sim.simulation import Simulation
from nodefence_sim.testing import running_simulator

from .harness import Prometheus, Simulator, start_nodefence, start_prometheus

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

NODE = "compute02"
ALERT = "NodefencePowerActionFailed"
FAILED_OFF = 'nodefence_power_actions_total{driver="redfish",action="off",outcome="unknown"}'
# A ForceOff the machine ignores is answered once this read-back runs out.
POLICY = {
    "rules": [
        {
            "name": "default",
            "healthy_delay_seconds": 0,
            "fencing": {"driver": "redfish", "action": "off", "timeout_seconds": 1.5},
        }
    ]
}
WITHIN = 45.0


def scraped(prometheus: Prometheus, query: str) -> list[str]:
    """The values of ``query``'s series as Prometheus evaluates it now."""
    answer = get_json(f"{prometheus.url}/api/v1/query?query={quote(query)}")
    return [str(series["value"][1]) for series in answer["data"]["result"]]


def firing(prometheus: Prometheus) -> list[dict[str, Any]]:
    return [
        a
        for a in prometheus.alerts()
        if a["labels"].get("alertname") == ALERT and a["state"] == "firing"
    ]


def post_alert(url: str, token: str) -> list[dict[str, Any]]:
    started = datetime.now(UTC) - timedelta(minutes=20)
    payload = webhook([node_alert(NODE, starts_at=started)])
    status, raw = http(
        "POST",
        f"{url}/alerts",
        payload,
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert status == 200, raw
    decisions: list[dict[str, Any]] = json.loads(raw)["decisions"]
    return decisions


async def test_the_first_failed_power_off_after_a_start_fires_the_alert(
    procs: Processes, tmp_path: Path
) -> None:
    async with running_simulator(Simulation.from_scenario("seed")) as cluster:
        bmcs = bmcs_of(cluster.sim)
        bmcs.stuck_on.add(NODE)
        inventory = write_bmc_inventory(tmp_path / "bmcs.yaml", cluster.url, cluster.sim)
        policy = tmp_path / "policy.yaml"
        policy.write_text(yaml.safe_dump(POLICY))
        sim = Simulator(cluster.url, cluster.kubeconfig)
        token = secrets.token_urlsafe(24)
        nodefence = await asyncio.to_thread(
            start_nodefence,
            procs,
            sim,
            token,
            env={
                "NODEFENCE_POLICY_FILE": str(policy),
                "NODEFENCE_BMC_INVENTORY": str(inventory),
                "NODEFENCE_RECONCILE_INTERVAL": "0",
            },
        )
        prometheus = await asyncio.to_thread(start_prometheus, procs, sim, nodefence, [])

        # Prometheus holds the failure series at 0 before any power action was tried.
        await asyncio.to_thread(
            eventually,
            lambda: scraped(prometheus, FAILED_OFF) == ["0"],
            within=WITHIN,
            what="the failed power-off series scraped at 0",
        )
        assert firing(prometheus) == []

        cluster.sim.node_down(NODE, since_seconds=1200)
        [decision] = await asyncio.to_thread(post_alert, nodefence.url, token)
        assert decision["verdict"] != "fence", decision
        assert (NODE, "ForceOff") in bmcs.resets

        [alert] = await asyncio.to_thread(
            eventually, lambda: firing(prometheus), within=WITHIN, what=f"{ALERT} firing"
        )
        assert alert["labels"]["driver"] == "redfish"
        assert alert["labels"]["action"] == "off"
        assert scraped(prometheus, FAILED_OFF) == ["1"]
