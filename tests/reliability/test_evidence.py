"""Evidence a real cluster cannot fake: each test is one way the former design broke a safety
invariant (a lock that expired under a slow step, clocks that disagree, annotations a node can
write, a taint an admin took over) and shows it holds now.

Skewed clocks are real: a kubelet's through the simulator's clock control, nodefence's own by
running ``nodefence serve`` under libfaketime.
"""

from __future__ import annotations

import asyncio
import secrets
import shutil
from collections.abc import AsyncIterator
from contextlib import ExitStack
from importlib import resources
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from tests.seeded_cluster import (
    NO_HEALTHY_DELAY,
    OOS,
    eventually,
    inference,
    node,
    node_events,
    oos_taints,
    start_receiver,
)

from nodefence.engine import mirror
from nodefence.engine import record as fence_record
from nodefence.kube.convert import server_stamped
from nodefence_sim.resources import CONFIGMAPS, LEASES, VOLUME_ATTACHMENTS
from nodefence_sim.simulation import Simulation
from nodefence_sim.testing import SimulatorHandle, running_simulator

from .support import ServeProcess, firing, resolved

NODE = "compute01"
OTHER = "compute02"
TEN_MINUTES = 600

needs_faketime = pytest.mark.skipif(
    shutil.which("faketime") is None, reason="needs faketime (Debian package faketime)"
)


def dead(cluster: SimulatorHandle, name: str) -> None:
    """The node's kubelet stopped twenty minutes ago (a worker of the seed cluster runs only
    DaemonSet pods, so nothing on it hangs Terminating to wait for)."""
    cluster.sim.node_down(name, since_seconds=1200)


def record_of(cluster: SimulatorHandle) -> fence_record.FenceRecord:
    held = cluster.sim.store.peek(CONFIGMAPS, "nodefence", fence_record.CONFIGMAP)
    if held is None:
        return fence_record.FenceRecord()
    return fence_record.decode(held.get("data"), held["metadata"]["resourceVersion"])


def blocked(decision: dict[str, Any]) -> list[str]:
    return [r["guard"] for r in decision["reasons"] if not r["passed"]]


async def kubectl(cluster: SimulatorHandle, *args: str) -> None:
    """Real kubectl against the simulator, which serves it from this test's event loop."""
    proc = await asyncio.create_subprocess_exec(
        "kubectl",
        "--kubeconfig",
        str(cluster.kubeconfig),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=30)
    assert proc.returncode == 0, out.decode(errors="replace")


async def deliver(http: aiohttp.ClientSession, serve: ServeProcess, token: str, name: str) -> Any:
    async with http.post(
        serve.url + "/alerts", json=firing(name), headers={"Authorization": f"Bearer {token}"}
    ) as response:
        assert response.status == 200, await response.text()
        return (await response.json())["decisions"][0]


# --- S3: the budget is spent by one write, however slow or skewed the replicas ------------------


@pytest.mark.invariant("S3")
async def test_s3_a_slow_fence_step_cannot_let_a_second_replica_spend_the_slot(
    cluster: SimulatorHandle,
) -> None:
    """Replica A claims compute01 and then is slow to write the taint (longer than the old
    lock's time-to-live would have been, measured against A's own request); replica B's alert
    for compute02 arrives meanwhile and must find the single slot taken."""
    dead(cluster, NODE)
    dead(cluster, OTHER)
    cluster.faults.slow(3.0, verbs=("update",), path=f"/api/v1/nodes/{NODE}")
    async with (
        start_receiver(cluster, identity="replica-a", deadline_seconds=30) as a,
        start_receiver(cluster, identity="replica-b") as b,
    ):
        first = asyncio.create_task(a.alert(firing(NODE)))
        await eventually(lambda: record_of(cluster).entry(NODE), within=30, interval=0.02)
        [second] = await b.alert(firing(OTHER))
        [fenced] = await first
    assert fenced["verdict"] == "fence", fenced
    assert second["verdict"] == "noop", second
    assert "fence-budget" in blocked(second), second
    assert oos_taints(cluster, NODE)
    assert not oos_taints(cluster, OTHER)
    assert record_of(cluster).holders == (NODE,)


@pytest.mark.invariant("S3")
@needs_faketime
@pytest.mark.parametrize("offset", ["+600s", "-600s"])
async def test_s3_a_replica_ten_minutes_off_cannot_take_the_budget(
    cluster: SimulatorHandle, offset: str
) -> None:
    """Two replicas, one on a clock ten minutes off, fence two dead nodes at the same moment
    with a budget of one: exactly one fence, whatever either clock says."""
    dead(cluster, NODE)
    dead(cluster, OTHER)
    token = secrets.token_urlsafe(16)
    async with aiohttp.ClientSession() as http:
        with ExitStack() as stack:
            skewed = stack.enter_context(
                ServeProcess(cluster.kubeconfig, token, "skewed", clock_offset=offset)
            )
            steady = stack.enter_context(ServeProcess(cluster.kubeconfig, token, "steady"))
            await skewed.wait_healthy(http)
            await steady.wait_healthy(http)
            decisions = await asyncio.gather(
                deliver(http, skewed, token, NODE), deliver(http, steady, token, OTHER)
            )
    verdicts = sorted(d["verdict"] for d in decisions)
    assert verdicts == ["fence", "noop"], decisions
    tainted = [n for n in (NODE, OTHER) if oos_taints(cluster, n)]
    assert len(tainted) == 1, decisions
    assert record_of(cluster).holders == tuple(tainted)


# --- S2/S11: liveness on the API server's clock -------------------------------------------------


@pytest.mark.invariant("S2")
async def test_s2_a_live_kubelet_whose_clock_is_ten_minutes_behind_is_never_fenced(
    cluster: SimulatorHandle,
) -> None:
    """The kubelet runs, renews its Lease every few seconds and reports Ready=False (its
    container runtime is down), but its clock is ten minutes behind: its renewTime looks ten
    minutes old. The API server's own stamp on the Lease says it was renewed just now."""
    cluster.sim.node_clock(NODE, -TEN_MINUTES)
    cluster.sim.node_not_ready(NODE, since_seconds=1200)
    async with start_receiver(cluster) as receiver:
        [decision] = await receiver.alert(firing(NODE))
    assert decision["verdict"] == "noop", decision
    assert "lease" in blocked(decision), decision
    lease = next(r["message"] for r in decision["reasons"] if r["guard"] == "lease")
    assert "kubelet's own clock" in lease
    assert not oos_taints(cluster, NODE)
    assert record_of(cluster).entries == ()


@pytest.mark.invariant("S11")
async def test_s11_kubelets_whose_clocks_are_behind_cannot_hide_a_storm_that_just_ended(
    cluster: SimulatorHandle,
) -> None:
    """The three control-plane nodes were down and came back a moment ago, but their kubelets'
    clocks run half an hour behind, so their Ready lastTransitionTime says they recovered half
    an hour ago, outside the ten-minute storm cooldown. Each kubelet's offset shows on its own
    Node (the heartbeat it wrote against the API server's stamp on that write): the storm that
    just ended is seen, and the compute node that is still down is not fenced."""
    storm = ("control01", "control02", "control03")
    for name in storm:
        cluster.sim.node_clock(name, -3 * TEN_MINUTES)
        cluster.sim.node_down(name, since_seconds=TEN_MINUTES)
    for name in storm:
        cluster.sim.node_up(name)
    dead(cluster, NODE)
    async with start_receiver(cluster) as receiver:
        [decision] = await receiver.alert(firing(NODE))
    assert decision["verdict"] == "noop", decision
    assert blocked(decision) == ["storm-cooldown"], decision
    assert not oos_taints(cluster, NODE)


@pytest.mark.invariant("S2")
@needs_faketime
async def test_s2_nodefence_ten_minutes_fast_does_not_make_a_fresh_death_fenceable(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    """The kubelet went silent a minute ago (NotReady for the last 20 seconds), within a
    2-minute Lease window. A nodefence whose clock runs ten minutes fast would, on its own
    clock, see a Lease eleven minutes stale and a node NotReady for ten; on the API server's
    clock it is a minute and 20 seconds, and nothing is fenced."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "rules:\n  - name: default\n    lease_staleness_seconds: 120\n    fencing: {driver: none}\n"
    )
    cluster.sim.node_down(NODE, since_seconds=60)
    token = secrets.token_urlsafe(16)
    async with aiohttp.ClientSession() as http:
        # Every guard judged on live reads, so the Lease's is among the refusals: a serving
        # receiver may otherwise refuse from its node index, on the first guard that cache
        # can judge (``shell.cached_refusal``).
        live = {"NODEFENCE_CACHED_REFUSALS": "false"}
        with ServeProcess(
            cluster.kubeconfig, token, "fast", clock_offset="+600s", env=live, policy=policy
        ) as fast:
            await fast.wait_healthy(http)
            decision = await deliver(http, fast, token, NODE)
    assert decision["verdict"] == "noop", decision
    assert {"lease", "not-ready-duration"} <= set(blocked(decision)), decision
    assert not oos_taints(cluster, NODE)


@pytest.mark.invariant("S2")
@needs_faketime
async def test_s2_nodefence_ten_minutes_slow_still_fences_a_node_dead_for_twenty(
    cluster: SimulatorHandle,
) -> None:
    """The other direction: a slow nodefence clock neither hides a death nor delays the fence."""
    dead(cluster, NODE)
    token = secrets.token_urlsafe(16)
    async with aiohttp.ClientSession() as http:
        with ServeProcess(cluster.kubeconfig, token, "slow", clock_offset="-600s") as slow:
            await slow.wait_healthy(http)
            decision = await deliver(http, slow, token, NODE)
    assert decision["verdict"] == "fence", decision
    assert oos_taints(cluster, NODE)


# --- S4/S12: only the record says what nodefence owns, and only the exact taint --------------


@pytest.fixture
async def unwatched() -> AsyncIterator[SimulatorHandle]:
    """The seed cluster without the node-write watch: a forged mirror, or an admin's taint
    under nodefence's mirror, is by design the inconsistency that watch reports."""
    async with running_simulator(Simulation.from_scenario("seed")) as handle:
        yield handle


@pytest.mark.invariant("S4")
async def test_s4_forged_mirror_annotations_never_remove_an_admins_taint(
    unwatched: SimulatorHandle,
) -> None:
    """An admin fenced the node by hand; then something with the node's credentials wrote
    nodefence's mirror annotations onto it (NodeRestriction lets a kubelet edit its own
    annotations, not its taints). No resolve and no reconcile may remove the admin's taint."""
    cluster = unwatched
    dead(cluster, NODE)
    await kubectl(cluster, "taint", "nodes", NODE, f"{OOS}=nodeshutdown:NoExecute")
    uid = node(cluster, NODE)["metadata"]["uid"]
    forged = {
        mirror.FENCED_BY: mirror.FENCED_BY_VALUE,
        mirror.NODE_UID: uid,
        mirror.TAINT_EFFECT: "NoExecute",
        mirror.FENCED_AT: "2020-01-01T00:00:00Z",
        mirror.RULE: "default",
    }
    await kubectl(
        cluster, "annotate", "--overwrite", "nodes", NODE, *(f"{k}={v}" for k, v in forged.items())
    )
    cluster.sim.node_up(NODE, since_seconds=3600, reboot=True)
    async with start_receiver(cluster, policy=inference(NO_HEALTHY_DELAY)) as receiver:
        [res] = await receiver.alert(resolved(NODE))
        status, body = await receiver.post("/reconcile", {})
    assert status == 200, body
    assert res["verdict"] == "noop", res
    assert [t["value"] for t in oos_taints(cluster, NODE)] == ["nodeshutdown"]
    assert record_of(cluster).entries == ()


@pytest.mark.invariant("S4")
@pytest.mark.parametrize(
    "overwrite", ["admin-hold:NoExecute", "nodeshutdown:NoSchedule"], ids=["value", "effect"]
)
async def test_s4_a_taint_the_admin_took_over_is_let_go_untouched(
    unwatched: SimulatorHandle, overwrite: str
) -> None:
    """nodefence fenced the node; an admin then overwrote the taint (same key, their own value
    or effect). At the unfence nodefence must see that it is no longer its taint: it lets go of
    its record entry, says so on the node, and leaves the admin's taint exactly as it is."""
    cluster = unwatched
    dead(cluster, NODE)
    async with start_receiver(cluster, policy=inference(NO_HEALTHY_DELAY)) as receiver:
        [fence] = await receiver.alert(firing(NODE))
        assert fence["verdict"] == "fence", fence
        value, effect = overwrite.split(":")
        if effect != "NoExecute":
            await kubectl(cluster, "taint", "nodes", NODE, f"{OOS}:NoExecute-")
        await kubectl(cluster, "taint", "--overwrite", "nodes", NODE, f"{OOS}={overwrite}")
        cluster.sim.node_up(NODE, since_seconds=3600, reboot=True)
        [res] = await receiver.alert(resolved(NODE))
    assert res["verdict"] != "unfence", res
    [taint] = oos_taints(cluster, NODE)
    assert (taint["value"], taint["effect"]) == (value, effect)
    assert record_of(cluster).entries == ()
    released = [e for e in node_events(cluster, NODE) if e["reason"] == "FenceReleased"]
    assert released, "letting go is an action an operator must see on the node"
    assert "took it over" in released[0]["message"]


# --- the other defects -----------------------------------------------------------------------


async def test_reconcile_never_deletes_volume_attachments_of_a_node_showing_life(
    cluster: SimulatorHandle,
) -> None:
    """A fenced node whose kubelet is back (Lease renewed) but not yet Ready may have its
    volumes mounted again: the reconcile pass must not delete its VolumeAttachments."""
    dead(cluster, NODE)
    async with start_receiver(cluster) as receiver:
        [fence] = await receiver.alert(firing(NODE))
    assert fence["verdict"] == "fence", fence
    attached = [
        a["metadata"]["name"]
        for a in cluster.sim.store.items(VOLUME_ATTACHMENTS)
        if a["spec"].get("nodeName") == NODE
    ]
    cluster.sim.node_not_ready(NODE, since_seconds=60)
    cleanup = inference({"rules": [{"name": "default", "volume_attachment_cleanup": True}]})
    async with start_receiver(cluster, policy=cleanup) as receiver:
        status, body = await receiver.post("/reconcile", {})
    assert status == 200, body
    remaining = [
        a["metadata"]["name"]
        for a in cluster.sim.store.items(VOLUME_ATTACHMENTS)
        if a["spec"].get("nodeName") == NODE
    ]
    assert remaining == attached
    [decision] = [d for d in body["decisions"] if d["node"] == NODE]
    assert "lease" in blocked(decision), decision


async def test_an_invalid_write_is_reported_not_retried_into_a_503(
    cluster: SimulatorHandle,
) -> None:
    """A 422 from the API server is its verdict on the object, not a lost race: answered as a
    failed action (Alertmanager does not redeliver a 200), the claim rolled back, no loop."""
    dead(cluster, NODE)
    cluster.faults.fail(1, status=422, verbs=("update",), path=f"/api/v1/nodes/{NODE}")
    async with start_receiver(cluster) as receiver:
        status, body = await receiver.post("/alerts", firing(NODE))
    assert status == 200, body
    [decision] = body["decisions"]
    outcomes = [(r["action"], r["outcome"]) for r in decision["results"]]
    assert ("fence", "failed") in outcomes, outcomes
    assert [a for a, _ in outcomes].count("fence") == 1, "a 422 must not be retried"
    assert record_of(cluster).entries == (), "the claim of a failed fence is rolled back"
    assert not oos_taints(cluster, NODE)


async def test_cordoned_and_out_of_service_nodes_are_not_counted_as_capacity(
    cluster: SimulatorHandle,
) -> None:
    """Three of the four Ready nodes are cordoned: they are Ready but take no workloads, so
    fencing the dead one would leave one node of five to carry everything."""
    dead(cluster, NODE)
    for name in ("control01", "control03", OTHER):
        await kubectl(cluster, "cordon", name)
    async with start_receiver(cluster) as receiver:
        [decision] = await receiver.alert(firing(NODE))
    assert decision["verdict"] == "noop", decision
    assert "ready-fraction" in blocked(decision), decision
    assert not oos_taints(cluster, NODE)


# --- S12: external fencing's proof is where a node cannot write it ---------------------------

POWER_KEY = "nodefence.io/power-state"
PROOF = f"nodefence-power.{NODE}"
WRITTEN_PROOF = {"name": "default", "fencing": {"driver": "annotation"}}


async def write_proof(cluster: SimulatorHandle, value: str) -> None:
    """What external fencing does once the machine is off, with real kubectl."""
    if cluster.sim.store.peek(CONFIGMAPS, "nodefence", PROOF) is None:
        await kubectl(cluster, "-n", "nodefence", "create", "configmap", PROOF)
    await kubectl(
        cluster,
        "-n",
        "nodefence",
        "annotate",
        "--overwrite",
        "configmap",
        PROOF,
        f"{POWER_KEY}={value}",
    )


def power_reason(decision: dict[str, Any]) -> str:
    return next(str(r["message"]) for r in decision["reasons"] if r["guard"] == "power-off")


@pytest.mark.invariant("S12")
async def test_s12_a_node_writing_off_on_itself_is_not_proof(unwatched: SimulatorHandle) -> None:
    """Something with the node's credentials (NodeRestriction lets it edit its own annotations)
    stops renewing the Lease and writes "off" on its Node: no taint. The same words written
    by external fencing in nodefence's namespace are proof, and the record says where."""
    cluster = unwatched
    dead(cluster, NODE)
    await kubectl(cluster, "annotate", "nodes", NODE, f"{POWER_KEY}=off")
    policy = {"rules": [WRITTEN_PROOF]}
    async with start_receiver(cluster, policy=policy) as receiver:
        [forged] = await receiver.alert(firing(NODE))
        assert forged["verdict"] == "noop", forged
        assert blocked(forged) == ["power-off"]
        assert "the Node's own annotation" in power_reason(forged)
        assert f"ConfigMap nodefence/{PROOF}: no such ConfigMap" in power_reason(forged)
        assert not oos_taints(cluster, NODE)
        assert any(
            "power-off" in e["message"] or "proof" in e["message"]
            for e in node_events(cluster, NODE)
        )

        await write_proof(cluster, "off")
        [fenced] = await receiver.alert(firing(NODE))
    assert fenced["verdict"] == "fence", fenced
    assert f"ConfigMap nodefence/{PROOF}" in power_reason(fenced)
    [entry] = record_of(cluster).entries
    assert f"ConfigMap nodefence/{PROOF} said {POWER_KEY}=off, written at" in entry.proof
    assert oos_taints(cluster, NODE)


@pytest.fixture
async def quick_grace(tmp_path: Path) -> AsyncIterator[SimulatorHandle]:
    """The seed cluster whose node lifecycle controller marks a silent node NotReady after five
    seconds (kubelets renew every two), so a node can die after a proof was written without
    backdating anything."""
    seed = yaml.safe_load(
        resources.files("nodefence_sim").joinpath("scenarios", "seed.yaml").read_text("utf-8")
    )
    seed["simulation"]["node_monitor_grace_seconds"] = 5
    path = tmp_path / "quick-grace.yaml"
    path.write_text(yaml.safe_dump(seed), encoding="utf-8")
    async with running_simulator(Simulation.from_scenario(str(path))) as handle:
        yield handle


@pytest.mark.invariant("S12")
async def test_s12_a_proof_from_before_the_last_renewal_is_not_proof(
    quick_grace: SimulatorHandle,
) -> None:
    """External fencing wrote "off" (an earlier incident, or too early); the kubelet then kept
    renewing its Lease, so the machine was running after the proof. When the node dies, that
    proof is stale: no taint until external fencing writes it again."""
    cluster = quick_grace
    await write_proof(cluster, "off")
    written = server_stamped(cluster.sim.store.peek(CONFIGMAPS, "nodefence", PROOF) or {})
    assert written is not None

    def renewed_since() -> bool:
        renewed = server_stamped(cluster.sim.store.peek(LEASES, "kube-node-lease", NODE) or {})
        return renewed is not None and renewed > written

    # Kubelets renew every 2 s; the limit holds on a busy machine.
    await eventually(renewed_since, within=60)
    cluster.sim.node_down(NODE)
    rule = {**WRITTEN_PROOF, "min_not_ready_seconds": 0, "lease_staleness_seconds": 1}
    async with start_receiver(cluster, policy={"rules": [rule]}) as receiver:

        async def refused_for_proof_alone() -> dict[str, Any] | None:
            [decision] = await receiver.alert(firing(NODE))
            return decision if blocked(decision) == ["power-off"] else None

        # NotReady after the 5 s grace; the limit holds on a busy machine.
        stale = await eventually(refused_for_proof_alone, within=60, interval=0.5)
        assert "write it again" in power_reason(stale), stale
        assert not oos_taints(cluster, NODE)

        await write_proof(cluster, "true")
        [fenced] = await receiver.alert(firing(NODE))
    assert fenced["verdict"] == "fence", fenced
    assert oos_taints(cluster, NODE)


@pytest.mark.invariant("S12")
async def test_s12_a_proof_nodefence_may_not_read_is_a_clear_refusal(
    cluster: SimulatorHandle,
) -> None:
    """An install whose Role cannot read the proof ConfigMaps: every alert is refused, saying
    which permission is missing, instead of a 5xx that Alertmanager would retry for ever."""
    dead(cluster, NODE)
    await write_proof(cluster, "off")
    cluster.faults.fail(
        None, status=403, verbs=("get",), path=f"/api/v1/namespaces/nodefence/configmaps/{PROOF}"
    )
    async with start_receiver(cluster, policy={"rules": [WRITTEN_PROOF]}) as receiver:
        [refused] = await receiver.alert(firing(NODE))
    assert refused["verdict"] == "noop", refused
    assert blocked(refused) == ["power-off"]
    assert "needs get on configmaps in namespace nodefence" in power_reason(refused)
    assert not oos_taints(cluster, NODE)
