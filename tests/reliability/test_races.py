"""Attacks on S3, S4 and S7 by people and slow steps acting between nodefence's reads and writes.

Each test replays one way nodefence broke an invariant when an administrator, a lost record, a
slow replica or a misbehaving BMC acted at the wrong moment: an admin's taint taken for
nodefence's own, a stale power-off sent to a machine just powered on again, a deleted record
that let the budget be exceeded, foreign data dropped from the record. They run the real
receiver against the simulated API server and its Redfish BMCs, with real kubectl for the admin.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from tests.seeded_cluster import (
    NO_HEALTHY_DELAY,
    Receiver,
    eventually,
    inference,
    node_events,
    oos_taints,
    start_receiver,
    terminating_on,
)

from nodefence.engine import record as fence_record
from nodefence.fencing.inventory import load_inventory
from nodefence_sim.redfish import bmcs_of, write_bmc_inventory
from nodefence_sim.resources import CONFIGMAPS, EVENTS, NODES
from nodefence_sim.simulation import Simulation
from nodefence_sim.store import WatchEvent
from nodefence_sim.testing import SimulatorHandle, running_simulator

from .holding_proxy import holding_proxy
from .support import INFERENCE_POLICY, firing, kill_node, until

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


async def nodefence_cli(cluster: SimulatorHandle, *args: str) -> str:
    """The operator's ``nodefence`` command against the simulated cluster."""
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "nodefence", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **os.environ,
            "KUBECONFIG": str(cluster.kubeconfig),
            "NODEFENCE_NAMESPACE": "nodefence",
            "NODEFENCE_POLICY_FILE": str(INFERENCE_POLICY),
        },
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def pod_deletes(cluster: SimulatorHandle, since: int) -> int:
    return sum(
        1
        for r in cluster.faults.requests(since)
        if r.method == "DELETE" and "/pods/" in r.path and r.status == 200
    )


@pytest.mark.invariant("S4")
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
        assert held is not None
        assert held["phase"] == "claimed", held
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
        assert held is not None
        assert held["phase"] == "fenced", held
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


def record_entry(event: WatchEvent) -> dict[str, Any] | None:
    """NODE's entry in the fence record as a store event wrote it, or None for any other event."""
    if event.resource.key != CONFIGMAPS.key:
        return None
    if event.object["metadata"].get("name") != fence_record.CONFIGMAP:
        return None
    text = (event.object.get("data") or {}).get(fence_record.FENCE_PREFIX + NODE)
    return json.loads(text) if text else None


def claimed_by(replica: str) -> Callable[[WatchEvent], bool]:
    """Whether a store event is ``replica``'s claim of NODE landing in the fence record."""

    def landed(event: WatchEvent) -> bool:
        held = record_entry(event)
        return (
            held is not None
            and held["phase"] == "claimed"
            and str(held.get("claimedBy", "")).startswith(replica)
        )

    return landed


def power_off_recorded_by(replica: str) -> Callable[[WatchEvent], bool]:
    """Whether a store event is the fence record showing ``replica``'s power-off recorded."""

    def recorded(event: WatchEvent) -> bool:
        held = record_entry(event)
        return (
            held is not None
            and bool(held.get("powerOffSentAt"))
            and str(held.get("claimedBy", "")).startswith(replica)
        )

    return recorded


@pytest.mark.invariant("S7")
async def test_a_delayed_replicas_stale_step_never_powers_off_a_rebooted_machine(
    bmc_cluster: tuple[SimulatorHandle, Path], tmp_path: Path
) -> None:
    """Attack 2 (S7): rule action reboot. Replica r1 claims, then everything it sends the API
    server is held. Replica r2 completes the whole incident (ForceOff, taint, purge, On). When
    r1's step resumes it finds the entry moved on and does nothing: the BMC saw one ForceOff
    and one On, in that order, and the machine is running."""
    cluster, inventory = bmc_cluster
    bmcs = bmcs_of(cluster.sim)
    await kill_node(cluster, NODE)
    policy = redfish_policy("reboot")
    async with holding_proxy(cluster.port, tmp_path) as (proxy, kubeconfig):
        slow = dataclasses.replace(cluster, kubeconfig=kubeconfig)
        hold_r1 = claimed_by("r1/")

        def shut_on_claim(event: WatchEvent) -> None:
            if hold_r1(event):
                proxy.hold()

        cluster.sim.store.add_listener(shut_on_claim)
        async with (
            start_receiver(
                slow, policy=policy, identity="r1", bmc_inventory=inventory, deadline_seconds=60
            ) as r1,
            # The power-on is sent from the fence's settle loop, which ends as soon as nothing
            # is left to do: a generous settle time costs nothing, and holds on a slow machine.
            start_receiver(
                cluster, policy=policy, identity="r2", bmc_inventory=inventory, settle_seconds=15
            ) as r2,
        ):
            first = asyncio.create_task(r1.alert(firing(NODE)))
            await eventually(lambda: proxy.held > 0 or first.done(), within=30)
            assert not first.done(), first.result()
            assert bmcs.resets == [], "r1 is held before its power-off is recorded"

            [completed] = await r2.alert(firing(NODE))
            assert completed["verdict"] == "fence", completed
            assert bmcs.resets == [(NODE, "ForceOff"), (NODE, "On")], bmcs.resets
            done = entry(cluster)
            assert done is not None
            assert done["phase"] == "fenced"

            proxy.release()
            [late] = await first
            assert late["verdict"] != "fence" or not any(
                r["action"] == "power-off" and r["outcome"] == "done" for r in late["results"]
            ), late
            assert bmcs.resets == [(NODE, "ForceOff"), (NODE, "On")], bmcs.resets
            assert cluster.sim.node_state(NODE)["kubelet"] == "up"
            after = entry(cluster)
            assert after is not None
            assert after["powerOffSentAt"] == done["powerOffSentAt"], "never rewritten"
            assert after["powerOnCount"] == 1


async def test_reconcile_powers_a_fenced_machine_on_once_more_when_it_reads_off(
    bmc_cluster: tuple[SimulatorHandle, Path],
) -> None:
    """Attack 2's aftermath: a fenced node whose machine reads Off after its power-on was sent
    (a late ForceOff from anywhere) is powered on once more by the reconcile pass, which says
    so; after the bounded number of power-ons it stops and says a person must look."""
    cluster, inventory = bmc_cluster
    bmcs = bmcs_of(cluster.sim)
    await kill_node(cluster, NODE)
    # A long healthy delay: the node stays fenced while it is up between the power-offs.
    policy = redfish_policy("reboot", healthy_delay_seconds=3600)
    # The power-on is sent from the fence's settle loop, which ends as soon as nothing is left
    # to do: a generous settle time costs nothing, and holds on a slow machine.
    async with start_receiver(
        cluster, policy=policy, bmc_inventory=inventory, settle_seconds=15
    ) as receiver:
        [fenced] = await receiver.alert(firing(NODE))
        assert fenced["verdict"] == "fence", fenced
        assert bmcs.resets[-1] == (NODE, "On")
        # A stale power-off lands after the power-on: the machine is off, the node fenced.
        await off_through_redfish(cluster, inventory)
        assert cluster.sim.node_state(NODE)["kubelet"] != "up"

        async def powered_on_again() -> bool:
            status, body = await receiver.post("/reconcile", {})
            assert status == 200, body
            return bmcs.resets.count((NODE, "On")) == 2

        await until(powered_on_again, within=30, interval=0.5)
        held = entry(cluster)
        assert held is not None
        assert held["powerOnCount"] == 2
        said = [e["message"] for e in node_events(cluster, NODE) if e["reason"] == "NodePoweredOn"]
        assert said, node_events(cluster, NODE)

        await off_through_redfish(cluster, inventory)
        cursor = len(bmcs.resets)
        for _ in range(3):
            status, body = await receiver.post("/reconcile", {})
            assert status == 200, body
        assert (NODE, "On") not in bmcs.resets[cursor:], "bounded: no third power-on"
        [decision] = [d for d in body["decisions"] if d["node"] == NODE]
        assert "does not power it on again" in json.dumps(decision), decision
        failed = [e for e in node_events(cluster, NODE) if e["reason"] == "RebootFailed"]
        assert failed, node_events(cluster, NODE)
        assert failed[0]["type"] == "Warning"
        assert cluster.sim.node_state(NODE)["kubelet"] != "up"


async def off_through_redfish(cluster: SimulatorHandle, inventory: Path) -> None:
    """The machine hung twenty minutes ago (its kubelet silent since, the BMC still reading
    On), then a ForceOff from outside nodefence reached it through its Redfish endpoint."""
    cluster.sim.node_down(NODE, since_seconds=1200)
    driver = load_inventory(inventory).driver_for(NODE)
    assert driver is not None
    try:
        reading = await driver.power_off(5)
    finally:
        await driver.close()
    assert reading.state == "off", reading


async def watching_nodes(receiver: Receiver) -> None:
    """As in a serving receiver: the cluster counts (the out-of-service taints among them) come
    from the watch-fed node index."""

    async def ready() -> bool:
        # /readyz asks the API server within its own short deadline: a busy machine may miss
        # it once, which is the probe doing its job, not this test's subject.
        async with receiver.session.get(receiver.url + "/readyz") as reply:
            return reply.status == 200

    await eventually(ready)
    index = receiver.pipeline.reader.nodes
    assert index is not None
    await eventually(lambda: index.fresh() is not None)


def indexed_taints(receiver: Receiver) -> tuple[str, ...]:
    """The nodes with an out-of-service taint as the receiver's node index counts them."""
    index = receiver.pipeline.reader.nodes
    counts = index.fresh() if index is not None else None
    return counts.facts.out_of_service if counts is not None else ()


@pytest.mark.invariant("S3")
async def test_a_deleted_record_does_not_free_the_budget_and_is_reported_and_adopted_back(
    cluster: SimulatorHandle,
) -> None:
    """Attack 3 (S3): compute01 fenced with a budget of 1; an admin deletes the fence record;
    compute02 dies. Its fence is refused (compute01's taint still spends the slot); the
    reconcile pass reports the lost entry (Warning Event, metric) and, since the API server
    shows nodefence wrote compute01's taint, writes its entry back. The fixture's watch checks
    on every node write that no two nodes carry nodefence's fence at once."""
    for name in ("compute01", "compute02"):
        cluster.sim.node_down(name, since_seconds=1200)
    async with start_receiver(cluster, follow=True) as receiver:
        await watching_nodes(receiver)
        [fenced] = await receiver.alert(firing("compute01"))
        assert fenced["verdict"] == "fence", fenced
        await kubectl(cluster, "-n", "nodefence", "delete", "configmap", fence_record.CONFIGMAP)
        assert record_data(cluster) == {}
        await eventually(lambda: "compute01" in indexed_taints(receiver))

        [refused] = await receiver.alert(firing("compute02"))
        assert refused["verdict"] == "noop", refused
        budget = [r for r in refused["reasons"] if r["guard"] == "fence-budget"]
        assert budget, refused
        assert not budget[0]["passed"]
        assert "compute01" in budget[0]["message"]
        assert oos_taints(cluster, "compute02") == []
        shown = json.loads(await nodefence_cli(cluster, "status", "-o", "json"))
        assert shown["withoutRecord"] == ["compute01"], shown

        status, body = await receiver.post("/reconcile", {})
        assert status == 200, body
        missing = [
            e for e in node_events(cluster, "compute01") if e["reason"] == "FenceRecordMissing"
        ]
        assert missing, node_events(cluster, "compute01")
        assert missing[0]["type"] == "Warning"
        assert 'nodefence_fences_without_record{node="compute01"} 1.0' in (
            receiver.metrics.exposition().decode()
        )
        adopted = entry(cluster, "compute01")
        assert adopted is not None
        assert adopted["phase"] == "fenced"
        [taint] = oos_taints(cluster, "compute01")
        assert adopted["taintAdded"] == taint["timeAdded"]

        [still] = await receiver.alert(firing("compute02"))
        assert still["verdict"] == "noop", still


@pytest.mark.invariant("S3")
async def test_an_admins_hand_fenced_node_spends_the_budget(cluster: SimulatorHandle) -> None:
    """S3: a node an admin fenced by hand with kubectl counts against max_fenced_nodes, though
    nodefence's record does not hold it; and its taint is never adopted or removed."""
    for name in ("compute01", "compute02"):
        cluster.sim.node_down(name, since_seconds=1200)
    async with start_receiver(cluster, follow=True) as receiver:
        await watching_nodes(receiver)
        await kubectl(cluster, "taint", "node", "compute02", TAINT)
        await eventually(lambda: "compute02" in indexed_taints(receiver))
        [refused] = await receiver.alert(firing("compute01"))
        assert refused["verdict"] == "noop", refused
        budget = next(r for r in refused["reasons"] if r["guard"] == "fence-budget")
        assert not budget["passed"]
        assert "compute02" in budget["message"]
        assert oos_taints(cluster, "compute01") == []
        status, _ = await receiver.post("/reconcile", {})
        assert status == 200
        assert entry(cluster, "compute02") is None
        assert len(oos_taints(cluster, "compute02")) == 1


async def test_nodefence_keeps_keys_of_the_record_it_does_not_own(cluster: SimulatorHandle) -> None:
    """Attack 9: a key someone else added to nodefence-fences survives nodefence's writes
    (claim, confirm, release)."""
    cluster.sim.node_down("compute01", since_seconds=1200)
    async with start_receiver(cluster, policy=inference(NO_HEALTHY_DELAY)) as receiver:
        await kubectl(
            cluster,
            "-n",
            "nodefence",
            "create",
            "configmap",
            fence_record.CONFIGMAP,
            "--from-literal=owner-note=kept by the platform team",
        )
        [fenced] = await receiver.alert(firing("compute01"))
        assert fenced["verdict"] == "fence", fenced
        assert record_data(cluster)["owner-note"] == "kept by the platform team"
        cluster.sim.node_up("compute01", since_seconds=600, reboot=True)
        await eventually(lambda: cluster.sim.node_state("compute01")["kubelet"] == "up")

        async def unfenced() -> bool:
            status, _ = await receiver.post("/reconcile", {})
            assert status == 200
            return not oos_taints(cluster, "compute01")

        await until(unfenced, within=30, interval=0.3)
        data = record_data(cluster)
        assert data["owner-note"] == "kept by the platform team"
        assert fence_record.RELEASED_PREFIX + "compute01" in data


async def test_an_exclusion_mid_fence_rolls_the_claim_back_and_frees_the_slot(
    bmc_cluster: tuple[SimulatorHandle, Path],
) -> None:
    """Attack 4: the exclusion label is added while nodefence powers the machine off (its BMC
    accepted ForceOff and the machine stays On, so the claim is held). The claim is released,
    the Event says what was done to the machine, and the budget slot goes to the next dead
    node."""
    cluster, inventory = bmc_cluster
    bmcs_of(cluster.sim).stuck_on.add(NODE)
    await kill_node(cluster, NODE)
    async with start_receiver(
        cluster, policy=redfish_policy(), bmc_inventory=inventory
    ) as receiver:
        [held] = await receiver.alert(firing(NODE))
        assert held["verdict"] == "noop", held
        # The reply says the ForceOff went out, though the machine never read back Off.
        power = [r for r in held["results"] if r["action"] == "power-off"]
        assert power, held
        assert all("power-off sent, then" in r["detail"] for r in power), power
        claimed = entry(cluster)
        assert claimed is not None
        assert claimed["phase"] == "claimed"

        await kubectl(cluster, "label", "node", NODE, "nodefence.io/exclude=true")
        status, _ = await receiver.post("/reconcile", {})
        assert status == 200
        assert entry(cluster) is None
        released = [e for e in node_events(cluster, NODE) if e["reason"] == "FenceReleased"]
        assert released, node_events(cluster, NODE)
        assert "was excluded" in released[0]["message"]
        assert "never read back as Off" in released[0]["message"]

        cluster.sim.node_down("compute01", since_seconds=1200)
        [next_one] = await receiver.alert(firing("compute01"))
        assert next_one["verdict"] == "fence", next_one
        assert oos_taints(cluster, NODE) == []


async def test_a_payload_for_a_thousand_unknown_nodes_makes_no_event_flood(
    cluster: SimulatorHandle,
) -> None:
    """Attack 8: one payload of 1,000 alerts (firing and resolved) for nodes that do not
    exist. No Event is created per name (at most one for the whole payload), a counter says
    how many were refused, and the API cost is bounded: far fewer requests than alerts."""
    from nodefence_sim.demo.payloads import webhook

    from .support import alert as one_alert

    async with start_receiver(cluster, follow=True) as receiver:
        await watching_nodes(receiver)
        cursor = cluster.faults.cursor
        events_before = len(cluster.sim.store.items(EVENTS))
        payload = webhook(
            [one_alert(f"ghost-{i:04d}") for i in range(800)]
            + [one_alert(f"gone-{i:04d}", "resolved") for i in range(200)]
        )
        decisions = await receiver.alert(payload)
        assert len(decisions) == 1000
        assert {d["verdict"] for d in decisions} == {"skip"}
        requests = cluster.faults.requests(cursor)
        assert len(requests) <= 50, f"{len(requests)} API requests for one payload"
        created = len(cluster.sim.store.items(EVENTS)) - events_before
        assert created <= 1, f"{created} Events for one payload"
        metrics = receiver.metrics.exposition().decode()
        assert 'nodefence_alerts_for_unknown_nodes_total{status="firing"} 800.0' in metrics
        assert 'nodefence_alerts_for_unknown_nodes_total{status="resolved"} 200.0' in metrics


@pytest.mark.invariant("S7")
async def test_a_power_off_held_up_at_the_bmc_is_not_sent_once_its_claim_is_gone(
    bmc_cluster: tuple[SimulatorHandle, Path], tmp_path: Path
) -> None:
    """Issue break 6 (S7): r1 has recorded its power-off and its BMC requests stall. Meanwhile
    the claim is rolled back (the node excluded, then let in again) and r2 fences afresh:
    ForceOff, taint, purge, On. When r1's BMC answers, the fencing token (the record read right
    before the reset) shows the claim is r2's: r1 sends nothing, says so, and the machine r2
    powered on stays on."""
    cluster, inventory = bmc_cluster
    bmcs = bmcs_of(cluster.sim)
    await kill_node(cluster, NODE)
    async with holding_proxy(cluster.port, tmp_path) as (bmc_link, _kubeconfig):
        # r1 reaches the BMCs through the proxy, the API server directly.
        held_inventory = tmp_path / "r1-bmcs.yaml"
        held_inventory.write_text(
            inventory.read_text().replace(f":{cluster.port}", f":{bmc_link.port}")
        )
        hold_r1 = power_off_recorded_by("r1/")
        shut: list[bool] = []

        def shut_on_mark(event: WatchEvent) -> None:
            if not shut and hold_r1(event):
                shut.append(True)
                bmc_link.hold()

        cluster.sim.store.add_listener(shut_on_mark)
        # r1's power step may wait long for its BMC (its timeout and deadline are generous).
        slow_policy = redfish_policy("reboot")
        slow_policy["rules"][0]["fencing"]["timeout_seconds"] = 60
        async with (
            start_receiver(
                cluster,
                policy=slow_policy,
                identity="r1",
                bmc_inventory=held_inventory,
                deadline_seconds=120,
            ) as r1,
            start_receiver(
                cluster,
                policy=redfish_policy("reboot"),
                identity="r2",
                bmc_inventory=inventory,
                settle_seconds=15,
            ) as r2,
        ):
            first = asyncio.create_task(r1.alert(firing(NODE)))
            await eventually(lambda: bmc_link.held > 0 or first.done(), within=30)
            assert not first.done(), first.result()
            assert bmcs.resets == [], "r1's reset is held at the BMC link"

            await kubectl(cluster, "label", "node", NODE, "nodefence.io/exclude=true")
            status, _ = await r2.post("/reconcile", {})
            assert status == 200
            assert entry(cluster) is None, "the exclusion rolled r1's claim back"
            await kubectl(cluster, "label", "node", NODE, "nodefence.io/exclude-")
            [completed] = await r2.alert(firing(NODE))
            assert completed["verdict"] == "fence", completed
            assert bmcs.resets == [(NODE, "ForceOff"), (NODE, "On")], bmcs.resets

            bmc_link.release()
            [late] = await first
            assert bmcs.resets == [(NODE, "ForceOff"), (NODE, "On")], bmcs.resets
            power = [r for r in late["results"] if r["action"] == "power-off"]
            assert power, late
            assert all(r["outcome"] != "done" for r in power), late
            assert any("no power-off sent" in r["detail"] for r in power), late
            assert NODE not in bmcs.powered_off
