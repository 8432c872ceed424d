"""Waits that know the evidence, and decisions that come when a wait ends, on the simulated
API server with its Redfish BMCs: no alert is ever sent here. The serving receiver's watch sees
the node turn NotReady and judges it at once; where its machine reads Off the NotReady minimum
and the wait for an alert do not apply; where it reads On they do, and a wake-up at their end
fences without any delivery or reconcile pass (the pass is an hour away). An exclusion holds
the same path."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from tests.seeded_cluster import Receiver, eventually, oos_taints, pause, start_receiver

from nodefence.engine.guard_kinds import ALERT_WAIT, NOT_READY_DURATION
from nodefence_sim.redfish import bmcs_of, write_bmc_inventory
from nodefence_sim.testing import SimulatorHandle
from sim_conformance.support import kubectl

from .cache_support import following

NODE = "compute01"
# The shipped waits: 5 minutes NotReady, 5 minutes for an alert, a 2-minute Lease window.
POLICY: dict[str, Any] = {
    "rules": [
        {
            "name": "default",
            "min_not_ready_seconds": 300,
            "fencing": {"driver": "redfish", "action": "off", "timeout_seconds": 10},
        }
    ],
    "cluster": {
        "max_fenced_nodes": 2,
        "storm_not_ready_fraction": 0.6,
        "min_ready_fraction": 0.5,
        "storm_cooldown_seconds": 0,
        "fallback_after_seconds": 300,
    },
}
# The simulator's node-lifecycle grace: a kubelet dead for S seconds has been NotReady S - 40.
GRACE = 40
# Far away: nothing in these tests is the reconcile pass's doing.
HOUR = 3600


@asynccontextmanager
async def watching(cluster: SimulatorHandle, tmp_path: Path) -> AsyncIterator[Receiver]:
    inventory = write_bmc_inventory(tmp_path / "bmcs.yaml", cluster.url, cluster.sim)
    async with start_receiver(
        cluster,
        policy=POLICY,
        bmc_inventory=inventory,
        follow=True,
        reconcile_interval=HOUR,
    ) as receiver:
        # The watch judges a node it saw change: it must have listed the nodes first.
        await following(receiver)
        yield receiver


async def decisions(receiver: Receiver) -> list[dict[str, Any]]:
    status, body = await receiver.get("/decisions")
    assert status == 200, body
    return [d for d in body["decisions"] if d["node"] == NODE]


async def fences(receiver: Receiver) -> list[dict[str, Any]]:
    return [d for d in await decisions(receiver) if d["verdict"] == "fence"]


async def refused_by(receiver: Receiver, guard: str) -> list[dict[str, Any]]:
    """The node's decisions a refusal by ``guard`` held back."""
    return [
        d
        for d in await decisions(receiver)
        if any(r["guard"] == guard and not r["passed"] for r in d["reasons"])
    ]


def reason(decision: dict[str, Any], guard: str) -> dict[str, Any]:
    return next(r for r in decision["reasons"] if r["guard"] == guard)


async def test_a_machine_that_reads_off_is_fenced_at_once_without_any_alert(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    async with watching(cluster, tmp_path) as receiver:
        bmcs = bmcs_of(cluster.sim)
        # The machine lost power 150 s ago: its BMC reads Off, its kubelet is silent, and the
        # node has been NotReady for 110 s, well inside both 5-minute waits.
        bmcs.powered_off.add(NODE)
        cluster.sim.node_down(NODE, 150)
        await eventually(lambda: oos_taints(cluster, NODE))
        # Logged once the request's settle and report are done, after the taint.
        decision, *_ = await eventually(lambda: fences(receiver))
        assert decision["alertname"] == "no alert (fallback)"
        waived = reason(decision, NOT_READY_DURATION)
        assert waived["passed"], waived
        assert "the 5m0s minimum is waived" in waived["message"]
        assert "machine Off (read-only" in waived["message"]
        assert "no longer" in reason(decision, ALERT_WAIT)["message"]
        # The power step still proved it: the proof is its read-back, not the early reading.
        assert any("reported Off" in r["message"] for r in decision["reasons"])
        reads = receiver.metrics.power_actions.labels("redfish", "status", "off")._value.get()
        assert reads >= 1


async def test_a_machine_that_reads_on_keeps_the_waits_and_a_wake_up_fences_at_their_end(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    async with watching(cluster, tmp_path) as receiver:
        bmcs = bmcs_of(cluster.sim)
        # Hung: the kubelet went silent, the machine runs on. The waits end 30 s from now.
        cluster.sim.node_down(NODE, GRACE + 270)

        async def refused() -> list[dict[str, Any]]:
            return [d for d in await decisions(receiver) if d["verdict"] == "noop"]

        [first, *_] = await eventually(refused)
        kept = reason(first, NOT_READY_DURATION)
        assert not kept["passed"], first
        assert "machine On: a hang, a partition or a kubelet that stopped" in kept["message"]
        assert not oos_taints(cluster, NODE)
        assert [r for r in bmcs.resets if r[0] == NODE] == []
        # No alert, no pass: the wake-up armed at the waits' end fences.
        await eventually(lambda: oos_taints(cluster, NODE), within=90)
        assert (NODE, "ForceOff") in bmcs.resets
        fenced = await eventually(lambda: fences(receiver))
        assert reason(fenced[0], NOT_READY_DURATION)["passed"]
        assert "at least the 5m0s required" in reason(fenced[0], NOT_READY_DURATION)["message"]
        assert receiver.metrics.wakeups.labels("ok")._value.get() >= 2


async def test_an_excluded_node_is_held_on_the_watch_path_and_its_machine_never_read(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    async with watching(cluster, tmp_path) as receiver:
        bmcs = bmcs_of(cluster.sim)
        code, out = await kubectl(cluster, "label", "node", NODE, "nodefence.io/exclude=true")
        assert code == 0, out
        bmcs.powered_off.add(NODE)
        cluster.sim.node_down(NODE, 150)

        await eventually(lambda: refused_by(receiver, "exclusion"))
        assert not oos_taints(cluster, NODE)
        assert [r for r in bmcs.resets if r[0] == NODE] == []
        assert receiver.metrics.power_actions.labels("redfish", "status", "off")._value.get() == 0


async def test_a_power_outage_of_many_machines_still_meets_the_budget_and_storm_guards(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    """Four of five machines lose power within a second: the watch judges each as it sees it
    go, every machine reads Off, and still no more than the budget's one node is fenced; the
    others are refused by the budget, the storm or the control plane's quorum."""
    policy = {**POLICY, "cluster": {**POLICY["cluster"], "max_fenced_nodes": 1}}
    inventory = write_bmc_inventory(tmp_path / "bmcs.yaml", cluster.url, cluster.sim)
    down = ["compute01", "compute02", "control02", "control03"]
    async with start_receiver(
        cluster, policy=policy, bmc_inventory=inventory, follow=True, reconcile_interval=HOUR
    ) as receiver:
        await following(receiver)
        bmcs = bmcs_of(cluster.sim)
        for name in down:
            bmcs.powered_off.add(name)
            cluster.sim.node_down(name, 150)

        async def judged() -> dict[str, list[dict[str, Any]]]:
            status, body = await receiver.get("/decisions")
            assert status == 200, body
            seen: dict[str, list[dict[str, Any]]] = {}
            for d in body["decisions"]:
                seen.setdefault(d["node"], []).append(d)
            return seen if set(down) <= set(seen) else {}

        seen = await eventually(judged)
        tainted = [name for name in down if oos_taints(cluster, name)]
        assert len(tainted) <= 1, tainted
        limits = {
            "fence-budget",
            "storm",
            "control-plane-quorum",
            "ready-fraction",
            "fence-in-progress",
        }
        for name in set(down) - set(tainted):
            blocked = {r["guard"] for d in seen[name] for r in d["reasons"] if not r["passed"]}
            assert blocked & limits, (name, seen[name])
        assert len({n for n, kind in bmcs.resets if kind == "ForceOff"} - set(tainted)) == 0


async def test_a_pause_holds_the_watch_path_and_its_machine_is_never_read(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    pause(cluster, "storage maintenance")
    async with watching(cluster, tmp_path) as receiver:
        bmcs = bmcs_of(cluster.sim)
        bmcs.powered_off.add(NODE)
        cluster.sim.node_down(NODE, 150)

        [decision, *_] = await eventually(lambda: refused_by(receiver, "paused"))
        assert decision["verdict"] == "skip", decision
        assert not oos_taints(cluster, NODE)
        assert [r for r in bmcs.resets if r[0] == NODE] == []
        assert receiver.metrics.power_actions.labels("redfish", "status", "off")._value.get() == 0
