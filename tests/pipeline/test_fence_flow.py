"""The main job end to end over HTTP: a dead node is fenced and purged, a recovered node is
verified and unfenced; every step is checked on the simulated cluster's state."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from tests.seeded_cluster import (
    NO_HEALTHY_DELAY,
    NODE,
    SHORT_HEALTHY_DELAY,
    eventually,
    firing,
    inference,
    node,
    node_events,
    oos_taints,
    pods_on,
    resolved,
    start_receiver,
    terminating_on,
    writes_since,
)

from nodefence.engine import mirror
from nodefence_sim.demo.payloads import node_alert, webhook
from nodefence_sim.resources import PODS
from nodefence_sim.testing import SimulatorHandle


async def kill(cluster: SimulatorHandle, name: str = NODE, since: int = 1200) -> None:
    cluster.sim.node_down(name, since_seconds=since)
    await eventually(lambda: terminating_on(cluster, name))


async def test_dead_node_is_fenced_and_purged_and_its_pods_move(
    cluster: SimulatorHandle,
) -> None:
    await kill(cluster)
    stuck = {p["metadata"]["name"] for p in terminating_on(cluster, NODE)}
    assert "mariadb-server-1" in stuck

    async with start_receiver(cluster) as receiver:
        [decision] = await receiver.alert(firing())
        assert decision["verdict"] == "fence", decision
        [taint] = oos_taints(cluster, NODE)
        assert (taint["value"], taint["effect"]) == ("nodeshutdown", "NoExecute")
        notes = node(cluster, NODE)["metadata"]["annotations"]
        assert notes[mirror.FENCED_BY] == "nodefence"
        assert notes[mirror.NODE_UID] == node(cluster, NODE)["metadata"]["uid"]
        await eventually(lambda: not terminating_on(cluster, NODE))

        def moved() -> bool:
            pod = cluster.sim.store.peek(PODS, "openstack", "mariadb-server-1")
            return bool(pod) and pod["spec"].get("nodeName") not in (None, "", NODE)

        await eventually(moved, within=30)
        reasons = {e["reason"] for e in node_events(cluster, NODE)}
        assert "NodeFenced" in reasons


async def test_fenced_node_is_verified_then_unfenced_after_the_healthy_delay(
    cluster: SimulatorHandle,
) -> None:
    await kill(cluster)
    async with start_receiver(cluster, policy=inference(SHORT_HEALTHY_DELAY)) as receiver:
        [decision] = await receiver.alert(firing())
        assert decision["verdict"] == "fence", decision
        # As after the fence-and-purge story: nothing left Terminating to hold the unfence.
        await eventually(lambda: not terminating_on(cluster, NODE))

        [early] = await receiver.alert(resolved())
        assert early["verdict"] == "deferred", early
        assert oos_taints(cluster, NODE), "a resolve alone must not unfence"

        cluster.sim.node_up(NODE, since_seconds=600, reboot=True)
        await eventually(lambda: node(cluster, NODE)["spec"].get("taints") is not None)
        [seen] = await receiver.alert(resolved())
        assert seen["verdict"] == "deferred", seen
        assert any(
            r["guard"] == "healthy-delay" and "first seen Ready at" in r["message"]
            for r in seen["reasons"]
        ), "the kubelet's own 'Ready for 10 minutes' must not count: the delay starts now"
        assert oos_taints(cluster, NODE)

        async def unfenced() -> dict[str, Any] | None:
            [late] = await receiver.alert(resolved())
            return late if late["verdict"] == "unfence" else None

        # The healthy delay is 3 s of the API server's clock from the first Ready seen.
        late = await eventually(unfenced, within=30, interval=0.3)
        assert late is not None
        assert not oos_taints(cluster, NODE)
        notes = node(cluster, NODE)["metadata"]["annotations"]
        assert mirror.FENCED_BY not in notes
        assert mirror.UNFENCED_AT in notes

        def daemonset_back() -> bool:
            return any(
                ref["kind"] == "DaemonSet"
                for p in pods_on(cluster, NODE)
                for ref in p["metadata"].get("ownerReferences") or []
            )

        await eventually(daemonset_back, within=30)
        assert "NodeUnfenced" in {e["reason"] for e in node_events(cluster, NODE)}


async def test_repeated_alert_for_fenced_node_makes_no_write(cluster: SimulatorHandle) -> None:
    await kill(cluster)
    async with start_receiver(cluster) as receiver:
        [first] = await receiver.alert(firing())
        assert first["verdict"] == "fence"
        await eventually(lambda: not terminating_on(cluster, NODE))
        cursor = cluster.faults.cursor
        [again] = await receiver.alert(firing())
        assert again["verdict"] == "noop", again
        assert writes_since(cluster, cursor) == []
        # The node, its Lease, its pods and the fence record, each read once, concurrently.
        # Besides them only what is shared for a while or refreshed on a timer, whenever a
        # busy machine lets it fall: the cluster counts' node list (shared for 5 s) and the
        # background refresh's read of the pause switch (every 4 s).
        reads = Counter(f"{r.verb} {r.path}" for r in cluster.faults.requests(cursor))
        decision = {
            f"get /api/v1/nodes/{NODE}",
            f"get /apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{NODE}",
            "list /api/v1/pods",
            "get /api/v1/namespaces/nodefence/configmaps/nodefence-fences",
        }
        timed = {
            "list /api/v1/nodes",
            "get /api/v1/namespaces/nodefence/configmaps/nodefence-control",
        }
        assert all(reads[read] <= 1 for read in decision), reads
        assert set(reads) <= decision | timed, reads


async def test_ready_node_is_never_fenced_and_the_refusal_is_an_event(
    cluster: SimulatorHandle,
) -> None:
    async with start_receiver(cluster) as receiver:
        cursor = cluster.faults.cursor
        [decision] = await receiver.alert(firing())
        assert decision["verdict"] == "noop"
        assert not oos_taints(cluster, NODE)
        writes = writes_since(cluster, cursor)
        assert all("/events" in w for w in writes), writes
        refusals = [e for e in node_events(cluster, NODE) if e["reason"] == "FenceRefused"]
        assert refusals
        assert "Ready" in refusals[0]["message"]


async def test_unknown_node_and_missing_label_are_skipped(cluster: SimulatorHandle) -> None:
    async with start_receiver(cluster) as receiver:
        payload = webhook([node_alert("no-such-node")])
        unlabeled = node_alert("x")
        del unlabeled["labels"]["node"]
        payload["alerts"].append(unlabeled)  # type: ignore[attr-defined]
        decisions = await receiver.alert(payload)
        assert [d["verdict"] for d in decisions] == ["skip", "skip"]


async def test_reconcile_purges_leftovers_and_unfences_recovered_node(
    cluster: SimulatorHandle,
) -> None:
    await kill(cluster)
    policy = inference(NO_HEALTHY_DELAY)
    async with start_receiver(cluster, settle_seconds=0, policy=policy) as receiver:
        [decision] = await receiver.alert(firing())
        assert decision["verdict"] == "fence"
        # The taint evicts the DaemonSet pods too; with no settle time they are left Terminating.
        await eventually(lambda: terminating_on(cluster, NODE))
        status, body = await receiver.post("/reconcile", {})
        assert status == 200, body
        await eventually(lambda: not terminating_on(cluster, NODE))
        assert oos_taints(cluster, NODE), "reconcile must not unfence a dead node"

        cluster.sim.node_up(NODE, since_seconds=600, reboot=True)
        status, body = await receiver.post("/reconcile", {})
        assert status == 200
        verdicts = {d["node"]: d["verdict"] for d in body["decisions"]}
        assert verdicts[NODE] == "unfence", body
        assert not oos_taints(cluster, NODE)


# Its deadline is a time the whole fence must take: not beside parallel workers on a busy machine.
@pytest.mark.serial
async def test_api_unavailable_answers_503_so_alertmanager_retries(
    cluster: SimulatorHandle,
) -> None:
    await kill(cluster)
    # Short enough for a quick 503 while the API is down, long enough for the whole fence after
    # it is back on a machine twice as slow with another process busy on a core.
    async with start_receiver(cluster, deadline_seconds=5) as receiver:
        cluster.faults.down(30)
        status, body = await receiver.post("/alerts", firing())
        assert status == 503, body
        cluster.faults.clear()
        assert not oos_taints(cluster, NODE)
        [decision] = await receiver.alert(firing())
        assert decision["verdict"] == "fence"


async def test_fenced_nodes_gauge_comes_from_the_fence_record_on_any_replica(
    cluster: SimulatorHandle,
) -> None:
    """A replica that took no part in the fence still exports the gauge: it reads the fence
    record in nodefence's namespace, not its own memory of what it did."""
    await kill(cluster)
    async with start_receiver(cluster, identity="fencer") as fencer:
        [decision] = await fencer.alert(firing())
        assert decision["verdict"] == "fence"
    async with start_receiver(cluster, identity="fresh-replica") as other:
        async with other.session.get(other.url + "/readyz") as response:
            assert response.status == 200

        async def gauge() -> bool:
            async with other.session.get(other.url + "/metrics") as response:
                text = await response.text()
            return f'nodefence_fenced_timestamp_seconds{{node="{NODE}"}}' in text

        await eventually(gauge, within=30, interval=0.2)


async def test_a_deferral_said_by_the_alert_and_by_reconcile_is_one_event(
    cluster: SimulatorHandle,
) -> None:
    """The resolved alert defers the unfence (the healthy delay has not passed), and the
    reconcile pass a moment later defers it for the same reason: the node's Events say it
    once, not once per path."""
    await kill(cluster)
    async with start_receiver(cluster, policy=inference()) as receiver:
        [fenced] = await receiver.alert(firing())
        assert fenced["verdict"] == "fence", fenced
        cluster.sim.node_up(NODE)
        [deferred] = await receiver.alert(resolved())
        status, body = await receiver.post("/reconcile", {})
    assert status == 200, body
    again = next(d for d in body["decisions"] if d["node"] == NODE)
    assert (deferred["verdict"], again["verdict"]) == ("deferred", "deferred"), (deferred, again)
    deferrals = [e for e in node_events(cluster, NODE) if e["reason"] == "UnfenceDeferred"]
    assert len(deferrals) == 1, deferrals
