"""A dry run an operator can learn from: no write to the cluster and no power action (S8), but
its would-be decisions are counted by verdict and guard, readable from the receiver over an
authenticated GET /decisions, and the BMC is asked (read-only) whether proof would have worked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nodefence_sim.faults import WRITE_VERBS
from nodefence_sim.redfish import write_bmc_inventory
from nodefence_sim.testing import SimulatorHandle

from .serving import Serving, serving
from .support import firing, kill_node

pytestmark = pytest.mark.invariant("S8")

NODE = "control02"
DRY_RUN_REDFISH: dict[str, Any] = {
    "dry_run": True,
    "rules": [{"name": "default", "fencing": {"driver": "redfish", "action": "off"}}],
}


async def get(receiver: Serving, path: str, *, auth: bool = True) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {receiver.token}"} if auth else {}
    async with receiver.http.get(receiver.url + path, headers=headers) as response:
        return response.status, await response.json(content_type=None)


@pytest.fixture
def inventory(cluster: SimulatorHandle, tmp_path: Path) -> Path:
    return write_bmc_inventory(tmp_path / "bmcs.yaml", cluster.url, cluster.sim)


async def test_a_dry_run_fence_reads_the_bmc_writes_nothing_and_is_counted(
    cluster: SimulatorHandle, inventory: Path
) -> None:
    await kill_node(cluster, NODE)
    cursor = cluster.faults.cursor
    async with serving(
        cluster, interval=3600, policy=DRY_RUN_REDFISH, bmc_inventory=inventory
    ) as receiver:
        [decision] = await receiver.alert(firing(NODE))
        metrics = await receiver.metrics()
        status, logged = await get(receiver, "/decisions")
    assert decision["dry_run"] is True
    assert decision["verdict"] == "fence", decision
    [power] = [r for r in decision["reasons"] if r["guard"] == "dry-run-power"]
    assert power["passed"] is True
    assert f"reports node {NODE}'s machine On" in power["message"]
    assert "no power action sent" in power["message"]

    requests = cluster.faults.requests(cursor)
    assert [f"{r.method} {r.path}" for r in requests if r.verb in WRITE_VERBS] == []
    assert not [r for r in requests if r.method == "POST" and "Reset" in r.path]

    assert metrics["nodefence_dry_run_decisions_total{guard=ok,verdict=fence}"] == 1
    assert metrics["nodefence_power_actions_total{action=status,driver=redfish,outcome=on}"] == 1
    assert not [k for k in metrics if k.startswith("nodefence_actions_total") and metrics[k]]

    assert status == 200
    [entry] = [d for d in logged["decisions"] if d["node"] == NODE]
    assert entry["source"] == "/alerts"
    assert entry["dry_run"] is True
    assert entry["verdict"] == "fence"
    assert entry["reasons"] == decision["reasons"]
    assert entry["recorded_at"].endswith("Z")


async def test_a_dry_run_refusal_is_counted_by_its_guard(cluster: SimulatorHandle) -> None:
    """A node that is up: the would-be decision is a refusal, counted by the guard that held."""
    async with serving(cluster, interval=3600, policy={"dry_run": True}) as receiver:
        [decision] = await receiver.alert(firing(NODE))
        metrics = await receiver.metrics()
    assert decision["dry_run"] is True
    blocking = next(r["guard"] for r in decision["reasons"] if not r["passed"])
    key = f"nodefence_dry_run_decisions_total{{guard={blocking},verdict={decision['verdict']}}}"
    assert metrics[key] == 1


async def test_decisions_need_the_alert_credentials_and_filter(cluster: SimulatorHandle) -> None:
    await kill_node(cluster, NODE)
    async with serving(cluster, interval=3600, policy={"dry_run": True}) as receiver:
        await receiver.alert(firing(NODE, "control01"))
        refused, problem = await get(receiver, "/decisions", auth=False)
        _, everything = await get(receiver, "/decisions")
        _, one = await get(receiver, "/decisions?limit=1")
        _, mine = await get(receiver, f"/decisions?node={NODE}")
        _, live = await get(receiver, "/decisions?dry_run=false")
        bad, wrong = await get(receiver, "/decisions?limit=0")
        metrics = await receiver.metrics()
    assert refused == 401
    assert problem["status"] == 401
    assert {d["node"] for d in everything["decisions"]} == {NODE, "control01"}
    assert len(one["decisions"]) == 1
    assert [d["node"] for d in mine["decisions"]] == [NODE]
    assert live["decisions"] == []
    assert bad == 400
    assert "limit" in wrong["detail"]
    assert metrics["nodefence_webhook_rejected_total{path=/decisions,reason=missing}"] == 1


async def test_the_decisions_route_is_in_the_openapi_document(cluster: SimulatorHandle) -> None:
    async with serving(cluster, interval=3600) as receiver:
        status, document = await get(receiver, "/openapi.json", auth=False)
    assert status == 200
    route = document["paths"]["/decisions"]["get"]
    assert route["security"]
    assert {p["name"] for p in route["parameters"]} == {"limit", "node", "dry_run"}
    assert set(route["responses"]) >= {"200", "400", "401"}
