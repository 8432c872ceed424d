"""Approval in Slack end to end: alert -> question -> signed click -> fence on live facts."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from nodefence.engine import mirror
from nodefence.engine.approval_request import ApprovalRequest
from nodefence.slack.messages import REJECT_ACTION_ID
from nodefence_sim.faults import FaultRule

from .conftest import APPROVER, NODE, World, eventually


async def kill(world: World) -> None:
    world.cluster.sim.node_down(NODE, since_seconds=1200)
    await eventually(world.terminating)


def asked(world: World) -> ApprovalRequest:
    request = world.request()
    assert request is not None, world.record()
    return request


def node_patches(world: World, cursor: int, *, accepted: bool = True) -> list[int]:
    """Statuses of the node's fence writes (PUT with uid and resourceVersion) since ``cursor``:
    by default only the accepted ones; a refused one (a failed precondition) changed nothing."""
    return [
        r.status
        for r in world.cluster.faults.requests(cursor)
        if r.verb == "update"
        and r.path.endswith(f"/nodes/{NODE}")
        and (r.status < 300 or not accepted)
    ]


async def test_alert_asks_once_then_an_approval_fences(world: World) -> None:
    await kill(world)
    status, body = await world.alert()
    assert status == 200, body
    [decision] = body["decisions"]
    assert decision["verdict"] == "await-approval"
    assert not world.oos()
    [message] = world.slack.posted()
    assert message["channel"] == "C0NODEFENCE"
    text = str(message["blocks"])
    assert NODE in text
    assert "mariadb-server-1" in text
    assert "Kubelet Lease" in text
    assert "StatefulSets affected" in text
    assert "openstack/mariadb-server" in text
    request = asked(world)
    assert request.incident.node_uid == world.node()["metadata"]["uid"]
    assert (request.channel, bool(request.ts)) == ("C0NODEFENCE", True)
    assert request.expires_at is not None

    status, body = await world.alert()
    assert status == 200
    assert body["decisions"][0]["verdict"] == "await-approval"
    assert len(world.slack.posted()) == 1, "a repeated alert must not ask again"

    # Slack needs its answer within three seconds, so the answer must not wait for the fence:
    # with the node's next write held in the API server, the click is answered before the taint.
    held = world.cluster.faults.add(
        FaultRule("latency", frozenset({"update"}), f"/api/v1/nodes/{NODE}", count=1, latency=3)
    )
    assert await world.click() == 200
    assert not world.oos(), "the click was answered only after the fence"
    await world.settle()
    assert held.hits == 1
    [taint] = world.oos()
    assert taint["effect"] == "NoExecute"
    notes = world.annotations()
    assert notes[mirror.FENCED_BY] == "nodefence"
    assert notes[mirror.APPROVAL].startswith(f"approved by {APPROVER} at ")
    [reply] = world.slack.responses
    assert reply["replace_original"] is True
    assert "is fenced" in reply["text"]
    assert APPROVER in str(reply["blocks"])
    await eventually(lambda: not world.terminating())


async def test_double_click_fences_once(world: World) -> None:
    await kill(world)
    await world.alert()
    cursor = world.cluster.faults.cursor
    statuses = await asyncio.gather(
        world.click(response="a"), world.click(user="U0GROUPIE", response="b")
    )
    assert statuses == [200, 200]
    await world.settle()
    assert len(world.oos()) == 1
    # Both presses run the pipeline; the loser's write fails its resourceVersion test (or is
    # never attempted once the winner's fence is seen), so exactly one write changed the node.
    assert node_patches(world, cursor) == [200], node_patches(world, cursor, accepted=False)
    assert all(s in (200, 409, 422) for s in node_patches(world, cursor, accepted=False))
    texts = sorted(r["text"] for r in world.slack.responses)
    assert len(texts) == 2
    assert any("is fenced" in t for t in texts)
    assert any("already fenced" in t for t in texts)
    # A click long after is no more effective.
    cursor = world.cluster.faults.cursor
    assert await world.click(response="c") == 200
    await world.settle()
    assert node_patches(world, cursor) == []


async def test_reject_is_recorded_and_not_asked_again(world: World) -> None:
    await kill(world)
    await world.alert()
    assert await world.click(REJECT_ACTION_ID) == 200
    await world.settle()
    assert not world.oos()
    request = asked(world)
    assert request.rejection.startswith(f"rejected by {APPROVER} at ")
    assert request.incident.node_uid == world.node()["metadata"]["uid"]
    assert request.incident.fingerprint
    # The node shows it to people too.
    assert world.annotations()[mirror.APPROVAL] == request.rejection
    [reply] = world.slack.responses
    assert "rejected" in reply["text"]
    status, _body = await world.alert()
    assert status == 200
    assert len(world.slack.posted()) == 1, "a rejected incident is not asked about again"
    assert not world.oos()
    # The old approve button of the same message no longer fences either: the rejection stands
    # in the fence record and the engine still needs a fresh approval.
    assert asked(world).rejection.startswith("rejected")


async def test_approval_after_recovery_fences_nothing(world: World) -> None:
    await kill(world)
    await world.alert()
    world.cluster.sim.node_up(NODE, since_seconds=60)
    await eventually(
        lambda: any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in world.node()["status"]["conditions"]
        )
    )
    cursor = world.cluster.faults.cursor
    assert await world.click() == 200
    await world.settle()
    assert not world.oos()
    assert mirror.FENCED_BY not in world.annotations()
    [reply] = world.slack.responses
    assert "Ready again" in reply["text"]
    assert "Nothing was fenced" in reply["text"]
    assert len(node_patches(world, cursor)) <= 1, "at most the request is withdrawn"
    assert world.request() is None, "the answered request is withdrawn from the record"
    assert mirror.APPROVAL not in world.annotations()


async def test_group_member_may_approve(world: World) -> None:
    await kill(world)
    await world.alert()
    assert await world.click(user="U0GROUPIE") == 200
    await world.settle()
    assert world.oos()
    assert any(c.method == "usergroups.users.list" for c in world.slack.calls)


async def test_slack_down_means_503_and_no_fence(world: World) -> None:
    await kill(world)
    world.slack.down = True
    status, body = await world.alert()
    assert status == 503, body
    assert body["status"] == 503
    assert "Slack" in body["detail"]
    assert not world.oos()
    assert world.request() is None, "the claim is released"
    world.slack.down = False
    status, body = await world.alert()
    assert status == 200
    assert len(world.slack.posted()) == 1


async def test_expired_request_is_asked_again(world: World) -> None:
    await kill(world)
    await world.alert()
    old = asked(world)
    requester = world.integration.approvals
    assert requester is not None
    later = datetime.now(UTC) + timedelta(hours=2)
    requester.clock = lambda: later
    status, _body = await world.alert()
    assert status == 200
    assert len(world.slack.posted()) == 2, "an expired request is asked again"
    assert asked(world).ts != old.ts
    [update] = world.slack.posted("chat.update")
    assert update["ts"] == old.ts
    assert "expired" in update["text"]
