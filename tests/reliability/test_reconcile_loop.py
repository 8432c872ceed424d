"""The reconcile pass each serving receiver runs on its own: what a lost delivery or a crashed
replica left is finished with no POST /reconcile and no further alert, on one replica or on
several at once, and the passes show in the receiver's own metrics."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.seeded_cluster import OOS, oos_taints, terminating_on

from nodefence.engine import record as fence_record
from nodefence.engine.record import FenceEntry, FenceRecord, Phase
from nodefence_sim.resources import CONFIGMAPS, NODES
from nodefence_sim.testing import SimulatorHandle

from .serving import INTERVAL, Serving, holds, serving
from .support import assert_fenced, firing, kill_node, names_on, pod_uids_off, until

NODE = "control02"
RECORD_PATH = f"/api/v1/namespaces/nodefence/configmaps/{fence_record.CONFIGMAP}"


def claim(cluster: SimulatorHandle, name: str) -> None:
    """The fence record as a replica leaves it when it dies right after its claim, before its
    taint, an hour ago."""
    node = cluster.sim.store.get(NODES, None, name)
    entry = FenceEntry(
        node=name,
        uid=node["metadata"]["uid"],
        phase=Phase.CLAIMED,
        claimed_at=datetime.now(UTC) - timedelta(hours=1),
        rule="default",
        alertname="KubeNodeNotReady",
        fingerprint="crashed",
        boot_id=node["status"]["nodeInfo"]["bootID"],
        effect="NoExecute",
        control_plane=True,
        claimed_by="replica-crashed/0",
    )
    cluster.sim.store.create(
        CONFIGMAPS,
        "nodefence",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": fence_record.CONFIGMAP, "namespace": "nodefence"},
            "data": fence_record.encode(fence_record.with_entry(FenceRecord(), entry)),
        },
    )


def record(cluster: SimulatorHandle) -> FenceRecord:
    held = cluster.sim.store.get(CONFIGMAPS, "nodefence", fence_record.CONFIGMAP)
    return fence_record.decode(held["data"], held["metadata"]["resourceVersion"])


def reconcile_posts(cluster: SimulatorHandle) -> int:
    """Requests anyone made to a /reconcile route (the simulator sees every client's)."""
    return sum(1 for r in cluster.faults.requests(0) if r.path.endswith("/reconcile"))


def fenced(cluster: SimulatorHandle) -> bool:
    held = record(cluster)
    return bool(oos_taints(cluster, NODE)) and [e.phase for e in held.entries] == [Phase.FENCED]


async def test_half_written_fence_is_completed_without_a_reconcile_request(
    cluster: SimulatorHandle,
) -> None:
    """A replica wrote its claim and its taint, then lost the API before it could confirm the
    fence or purge (its answer was a 503), and no alert comes again: another receiver's own
    pass confirms that very claim and purges the node."""
    await kill_node(cluster, NODE)
    others, on_node = pod_uids_off(cluster, NODE), names_on(cluster, NODE)
    cursor = cluster.faults.cursor
    cluster.faults.fail(None, status=500, verbs=("update",), path=RECORD_PATH)
    # The deadline leaves a busy machine time to write the claim and the taint; the record's
    # confirmation then fails until it runs out.
    async with serving(cluster, interval=3600, deadline=10) as first:
        answer = await first.post("/alerts", firing(NODE))
    assert answer == 503
    cluster.faults.clear()
    [entry] = record(cluster).entries
    assert entry.phase is Phase.CLAIMED, "not half-written"
    assert oos_taints(cluster, NODE), "not half-written"
    async with serving(cluster, identity="replica-b") as receiver:
        await holds(lambda: fenced(cluster))
        await holds(lambda: not terminating_on(cluster, NODE))
        await until(receiver.passed, within=60)
        metrics = await receiver.metrics()
    [done] = record(cluster).entries
    assert done.claimed_by == entry.claimed_by
    assert_fenced(cluster, NODE, others_before=others, on_node_before=on_node, since=cursor)
    assert metrics["nodefence_reconcile_passes_total{outcome=ok}"] >= 1
    assert metrics["nodefence_reconcile_interval_seconds{}"] == INTERVAL
    assert metrics["nodefence_reconcile_last_success_timestamp_seconds{}"] > 0
    assert metrics["nodefence_actions_total{action=confirm,result=done}"] == 1
    assert reconcile_posts(cluster) == 0


async def test_stale_claim_is_rolled_back_without_a_reconcile_request(
    cluster: SimulatorHandle,
) -> None:
    """A replica died an hour ago between its claim and its taint: the pass frees the budget
    slot the claim held and leaves the node untouched."""
    await kill_node(cluster, NODE)
    claim(cluster, NODE)
    async with serving(cluster):
        await holds(lambda: record(cluster).entries == ())
    assert oos_taints(cluster, NODE) == []
    assert reconcile_posts(cluster) == 0


async def test_recovered_node_is_unfenced_without_a_resolved_alert(
    cluster: SimulatorHandle,
) -> None:
    """The resolved notification was lost: the pass notices the node back and healthy and
    removes the taint nodefence applied."""
    await kill_node(cluster, NODE)
    async with serving(cluster, interval=3600) as receiver:
        [decision] = await receiver.alert(firing(NODE))
        assert decision["verdict"] == "fence", decision
    assert oos_taints(cluster, NODE)
    cluster.sim.node_up(NODE, since_seconds=600)
    async with serving(cluster, identity="replica-b") as receiver:
        await holds(lambda: not oos_taints(cluster, NODE))
        await holds(lambda: record(cluster).entries == ())
        metrics = await receiver.metrics()
    assert metrics["nodefence_actions_total{action=unfence,result=done}"] == 1
    assert reconcile_posts(cluster) == 0


async def test_several_replicas_passing_at_once_fence_once(cluster: SimulatorHandle) -> None:
    """Three replicas' passes race on the same half-written fence: the record's
    resourceVersion and the node's let exactly one write win (the cluster fixture also checks
    every node write for a budget overrun or a taint without its mirror annotations)."""
    await kill_node(cluster, NODE)
    others, on_node = pod_uids_off(cluster, NODE), names_on(cluster, NODE)
    cluster.faults.fail(None, status=500, verbs=("update",), path=RECORD_PATH)
    async with serving(cluster, interval=3600, deadline=3) as first:
        assert await first.post("/alerts", firing(NODE)) == 503
    cluster.faults.clear()
    async with (
        serving(cluster, identity="replica-a", interval=0.2) as a,
        serving(cluster, identity="replica-b", interval=0.2) as b,
        serving(cluster, identity="replica-c", interval=0.2) as c,
    ):
        await holds(lambda: fenced(cluster))
        await holds(lambda: not terminating_on(cluster, NODE))
        for replica in (a, b, c):

            async def passed(replica: Serving = replica) -> bool:
                return (await replica.metrics()).get(
                    "nodefence_reconcile_passes_total{outcome=ok}", 0
                ) >= 2

            await until(passed, within=60)
    assert_fenced(cluster, NODE, others_before=others, on_node_before=on_node)
    [taint] = oos_taints(cluster, NODE)
    assert taint["key"] == OOS


async def test_a_zero_interval_runs_no_pass(cluster: SimulatorHandle) -> None:
    """NODEFENCE_RECONCILE_INTERVAL=0 (a receiver that scales to zero, left to the CronJob):
    the receiver says it runs no pass and counts none."""
    async with serving(cluster, interval=0) as receiver:
        metrics = await receiver.metrics()
    assert metrics["nodefence_reconcile_interval_seconds{}"] == 0
    assert not [k for k in metrics if k.startswith("nodefence_reconcile_passes_total")]
