"""Attack 6: a rejection holds for its outage whatever button is pressed next (and whichever alert,
or the fallback, asked), and a new outage is asked again."""

from __future__ import annotations

from typing import Any

from nodefence.engine import mirror
from nodefence.slack.messages import REJECT_ACTION_ID

from .conftest import NODE, World, eventually


def rejection(world: World) -> str:
    """The rejection as the fence record holds it (the authority), checked against the words
    the node shows people."""
    request = world.request()
    assert request is not None, world.record()
    assert world.annotations()[mirror.APPROVAL] == request.rejection
    return request.rejection


async def kill(world: World) -> None:
    world.cluster.sim.node_down(NODE, since_seconds=1200)
    await eventually(world.terminating)


async def test_approve_after_reject_fences_nothing_however_often_it_is_pressed(
    world: World,
) -> None:
    await kill(world)
    await world.alert()
    assert await world.click(REJECT_ACTION_ID) == 200
    await world.settle()
    assert rejection(world).startswith("rejected")

    # A second approver presses approve on the same message, twice.
    for response in ("a", "b"):
        assert await world.click(user="U0GROUPIE", response=response) == 200
        await world.settle()
        assert not world.oos(), "an approval after the rejection fenced the node"
        assert rejection(world).startswith("rejected")
    later = [r["text"] for r in world.slack.responses[1:]]
    assert len(later) == 2
    assert all("changes nothing" in text for text in later), later

    status, body = await world.alert()
    assert status == 200
    assert body["decisions"][0]["verdict"] == "noop", body
    assert len(world.slack.posted()) == 1


async def test_a_new_outage_after_a_rejection_is_asked_again(world: World) -> None:
    await kill(world)
    await world.alert()
    assert await world.click(REJECT_ACTION_ID) == 200
    await world.settle()
    world.cluster.sim.node_up(NODE, since_seconds=600)
    await eventually(
        lambda: any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in world.node()["status"]["conditions"]
        )
    )
    # It fails again: a new incident (a new Ready transition), asked about afresh.
    world.cluster.sim.node_down(NODE, since_seconds=900)
    await eventually(
        lambda: any(
            c["type"] == "Ready" and c["status"] != "True"
            for c in world.node()["status"]["conditions"]
        )
    )
    status, body = await world.alert()
    assert status == 200
    assert body["decisions"][0]["verdict"] == "await-approval", body
    assert len(world.slack.posted()) == 2


async def reconcile(world: World) -> list[dict[str, Any]]:
    headers = {"Authorization": f"Bearer {world.token}"}
    async with world.session.post(f"{world.url}/reconcile", json={}, headers=headers) as r:
        assert r.status == 200, await r.text()
        return list((await r.json())["decisions"])


async def test_the_alert_after_the_fallback_asked_is_the_same_question(world: World) -> None:
    """No alert came for the dead node, so nodefence's own pass (the fallback) asked; the alert
    fires minutes later for the same outage. The on-call person gets one question, and their
    "no" on it holds the alert too."""
    await kill(world)
    [asked] = [d for d in await reconcile(world) if d["node"] == NODE]
    assert asked["verdict"] == "await-approval", asked
    assert asked["alertname"] == "no alert (fallback)", asked
    await eventually(lambda: len(world.slack.posted()) == 1)
    status, body = await world.alert()
    assert status == 200
    [waiting] = body["decisions"]
    assert waiting["verdict"] == "await-approval", waiting
    assert "asked in Slack at" in waiting["summary"], waiting
    assert len(world.slack.posted()) == 1, "the alert asked the same outage again"
    assert await world.click(REJECT_ACTION_ID) == 200
    await world.settle()
    assert rejection(world).startswith("rejected")
    status, body = await world.alert()
    assert status == 200
    [held] = body["decisions"]
    assert held["verdict"] == "noop", held
    assert "rejected by" in held["summary"], held
    assert not world.oos()
    assert len(world.slack.posted()) == 1
