"""The node's VolumeAttachments are listed only for a decision that says what becomes of them:
one on a node found down, on a server that may not detach them itself. A refusal lists none,
and neither does a fence on a server that detaches them itself (from Kubernetes 1.26)."""

from __future__ import annotations

from tests.seeded_cluster import firing, inference, node_events, start_receiver

from nodefence.engine.model import AlertEvent, AlertStatus, Decision, Verdict
from nodefence.engine.volumes import GUARD
from nodefence.kube.client import Deadline
from nodefence_sim.resources import VOLUME_ATTACHMENTS
from nodefence_sim.simulation import Simulation
from nodefence_sim.testing import SimulatorHandle, running_simulator

NODE = "control02"


def listed_attachments(cluster: SimulatorHandle, cursor: int) -> int:
    return sum(
        1
        for r in cluster.faults.requests(cursor)
        if r.method == "GET" and r.path.rstrip("/").endswith("/volumeattachments")
    )


async def fence_directly(cluster: SimulatorHandle) -> tuple[Decision, int]:
    """One firing alert for the dead node, handled without the HTTP layer, so no background
    refresh (which lists attachments for its gauge) runs beside it: every list seen is the
    request's own."""
    cluster.sim.node_down(NODE, since_seconds=1200)
    async with start_receiver(cluster) as receiver:
        cursor = cluster.faults.cursor
        event = AlertEvent("KubeNodeNotReady", AlertStatus.FIRING, NODE, "fp-1", {"node": NODE})
        try:
            decision = await receiver.pipeline.handle_event(event, Deadline(20))
        finally:
            await receiver.pipeline.close()
        return decision, listed_attachments(cluster, cursor)


async def test_a_refusal_lists_no_volume_attachments(cluster: SimulatorHandle) -> None:
    async with start_receiver(cluster) as receiver:
        cursor = cluster.faults.cursor
        [decision] = await receiver.alert(firing(NODE))
        assert decision["verdict"] == "noop", decision
        assert "Ready" in decision["summary"]
        assert listed_attachments(cluster, cursor) == 0
    assert not [r for r in decision["reasons"] if r["guard"] == GUARD]


async def test_a_fence_on_a_server_that_may_not_detach_lists_them(
    cluster: SimulatorHandle,
) -> None:
    decision, lists = await fence_directly(cluster)
    assert decision.verdict is Verdict.FENCE, decision
    assert decision.reasons[-1].guard == GUARD
    assert decision.reasons[-1].message.startswith("VOLUMES NOT RELEASED")
    assert lists >= 1


async def test_a_fence_on_a_server_that_detaches_itself_lists_none() -> None:
    sim = Simulation.from_scenario("seed", k8s_version="1.28.3")
    async with running_simulator(sim) as cluster:
        decision, lists = await fence_directly(cluster)
    assert decision.verdict is Verdict.FENCE, decision
    last = decision.reasons[-1]
    assert last.guard == GUARD
    assert last.passed
    assert "detaches the volumes of an out-of-service node itself" in last.message
    assert lists == 0


async def test_a_fence_with_cleanup_reports_the_deletes_its_settle_made(
    cluster: SimulatorHandle,
) -> None:
    """The pods purged by the fence are gone only after the fence decision was made: the
    VolumeAttachments go in a later turn of the same request, and the fence reports that turn's
    reason, not the turns after it that find them gone."""
    cluster.sim.node_down(NODE, since_seconds=1200)
    policy = inference({"rules": [{"name": "default", "volume_attachment_cleanup": True}]})
    async with start_receiver(cluster, policy=policy) as receiver:
        [decision] = await receiver.alert(firing(NODE))
    assert decision["verdict"] == "fence", decision
    last = decision["reasons"][-1]
    assert last["guard"] == GUARD
    assert "deleting 2 VolumeAttachment(s) of control02" in last["message"]
    released = [r for r in decision["results"] if r["action"] == "release-volume"]
    assert [r["outcome"] for r in released] == ["done", "done"]
    assert not [
        va for va in cluster.sim.store.items(VOLUME_ATTACHMENTS) if va["spec"]["nodeName"] == NODE
    ]


async def test_the_reconcile_pass_deletes_what_a_fence_left_once_the_rule_allows_it(
    cluster: SimulatorHandle,
) -> None:
    """A fence without cleanup leaves the attachments; a pass under a rule that allows it
    deletes them, as actions of its decision (in the reply, the results and the Event)."""
    cluster.sim.node_down(NODE, since_seconds=1200)
    async with start_receiver(cluster) as receiver:
        [fence] = await receiver.alert(firing(NODE))
    assert fence["verdict"] == "fence", fence
    left = sorted(
        va["metadata"]["name"]
        for va in cluster.sim.store.items(VOLUME_ATTACHMENTS)
        if va["spec"]["nodeName"] == NODE
    )
    assert len(left) == 2
    policy = inference({"rules": [{"name": "default", "volume_attachment_cleanup": True}]})
    async with start_receiver(cluster, policy=policy) as receiver:
        status, body = await receiver.post("/reconcile", {})
    assert status == 200, body
    [decision] = [d for d in body["decisions"] if d["node"] == NODE]
    assert decision["verdict"] == "noop", decision
    assert sorted(a["name"] for a in decision["actions"] if a["type"] == "release-volume") == left
    assert sorted(r["target"] for r in decision["results"] if r["action"] == "release-volume") == (
        left
    )
    assert decision["reasons"][-1]["guard"] == GUARD
    assert "deleting 2 VolumeAttachment(s)" in decision["reasons"][-1]["message"]
    assert not [
        va for va in cluster.sim.store.items(VOLUME_ATTACHMENTS) if va["spec"]["nodeName"] == NODE
    ]
    released = [e for e in node_events(cluster, NODE) if e["reason"] == "VolumesReleased"]
    assert released, node_events(cluster, NODE)
    assert released[0]["message"] == "2 VolumeAttachment(s) of the fenced node deleted"
