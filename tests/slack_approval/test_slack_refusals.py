"""Presses that must change nothing: bad signatures, forged or expired tokens, wrong channel,
people who are not approvers; and the token format itself."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import SecretStr

from nodefence.engine import mirror
from nodefence.slack import tokens
from nodefence.slack.messages import REJECT_ACTION_ID

from .conftest import APPROVAL_KEY, CHANNEL, NODE, World, eventually

KEY = SecretStr(APPROVAL_KEY)


def token(**changes: object) -> tokens.ButtonToken:
    fields: dict[str, object] = {
        "node": NODE,
        "uid": "uid-1",
        "fingerprint": "fp",
        "alertname": "KubeNodeNotReady",
        "action": tokens.Action.APPROVE,
        "channel": CHANNEL,
        "expires": int(time.time()) + 600,
        "rule": "ask",
        "since": 1,
    }
    fields.update(changes)
    return tokens.ButtonToken(**fields)  # type: ignore[arg-type]


def test_token_round_trip_is_compact_and_bound() -> None:
    value = tokens.sign(token(node="n" * 253), KEY)
    assert len(value) < 1000
    assert tokens.verify(value, KEY, now=time.time()) == token(node="n" * 253)
    with pytest.raises(tokens.TokenError, match="signature"):
        tokens.verify(value, SecretStr("another key"), now=time.time())
    with pytest.raises(tokens.TokenError, match="expired"):
        tokens.verify(value, KEY, now=time.time() + 601)
    version, _body, mac = value.split(".")
    swapped = tokens.sign(token(action=tokens.Action.REJECT), KEY).split(".")[1]
    with pytest.raises(tokens.TokenError, match="signature"):
        tokens.verify(f"{version}.{swapped}.{mac}", KEY, now=time.time())
    with pytest.raises(tokens.TokenError):
        tokens.verify("not-a-token", KEY, now=time.time())


async def dead_and_asked(world: World) -> None:
    world.cluster.sim.node_down(NODE, since_seconds=1200)
    await eventually(world.terminating)
    status, _ = await world.alert()
    assert status == 200
    assert len(world.slack.posted()) == 1


def untouched(world: World) -> None:
    """No fence and no answer: the question stays open in the fence record, and the node shows
    people only that it was asked."""
    assert not world.oos()
    notes = world.annotations()
    assert mirror.FENCED_BY not in notes
    assert notes.get(mirror.APPROVAL, "").startswith("asked in Slack at ")
    request = world.request()
    assert request is not None
    assert request.rejection == ""
    assert request.ts


async def test_bad_slack_signatures_are_401(world: World) -> None:
    await dead_and_asked(world)
    assert await world.click(tamper=True) == 401
    assert await world.click(timestamp=int(time.time()) - 400) == 401
    async with world.session.post(f"{world.url}/slack/interactions", data=b"payload=x") as r:
        assert r.status == 401
        assert r.content_type == "application/problem+json"
        assert "signature" in (await r.json())["detail"]
    await world.settle()
    untouched(world)
    assert world.slack.responses == []


def ephemeral(world: World) -> str:
    [reply] = world.slack.responses
    assert reply["response_type"] == "ephemeral"
    assert reply["replace_original"] is False
    return str(reply["text"])


async def test_forged_token_changes_nothing(world: World) -> None:
    await dead_and_asked(world)
    value = tokens.sign(token(uid=world.node()["metadata"]["uid"]), SecretStr("guessed"))
    assert await world.click(value=value) == 200
    await world.settle()
    untouched(world)
    assert "signature" in ephemeral(world)


async def test_expired_token_changes_nothing(world: World) -> None:
    await dead_and_asked(world)
    requester = world.integration.interactions
    assert requester is not None
    later = datetime.now(UTC) + timedelta(hours=2)
    requester.clock = lambda: later
    assert await world.click() == 200
    await world.settle()
    untouched(world)
    assert "expired" in ephemeral(world)


async def test_wrong_channel_changes_nothing(world: World) -> None:
    await dead_and_asked(world)
    assert await world.click(channel="C0ELSEWHERE") == 200
    await world.settle()
    untouched(world)
    assert "channel" in ephemeral(world)


async def test_button_value_on_the_other_button_changes_nothing(world: World) -> None:
    await dead_and_asked(world)
    assert await world.click(REJECT_ACTION_ID, value=world.value()) == 200
    await world.settle()
    untouched(world)
    ephemeral(world)


async def test_unauthorised_user_gets_an_ephemeral_answer(world: World) -> None:
    await dead_and_asked(world)
    assert await world.click(user="U0VISITOR") == 200
    await world.settle()
    untouched(world)
    assert "not an approver" in ephemeral(world)
    # The request stays open for a real approver.
    assert await world.click(response="2") == 200
    await world.settle()
    assert world.oos()


async def test_approval_policy_without_slack_settings_refuses_to_start(world: World) -> None:
    from nodefence.errors import ConfigError
    from nodefence.runtime import build_service
    from nodefence.settings import Settings

    interactions = world.integration.interactions
    assert interactions is not None
    with pytest.raises(ConfigError, match="NODEFENCE_SLACK_SIGNING_SECRET"):
        await build_service(
            Settings(auth_disabled=True),
            policy=interactions.fencer.policy,
            kubeconfig=str(world.cluster.kubeconfig),
        )


async def test_notice_on_fence(world: World) -> None:
    from nodefence.actions.executor import ActionResult, Outcome
    from nodefence.engine.model import Decision, Reason, Verdict
    from nodefence.slack.client import SlackClient
    from nodefence.slack.notifications import SlackNotifier

    from .conftest import BOT_TOKEN

    notifier = SlackNotifier(
        SlackClient(SecretStr(BOT_TOKEN), base_url=world.slack.api_url), CHANNEL
    )
    decision = Decision(Verdict.FENCE, NODE, (Reason("ready", True, "Node is NotReady"),))
    await notifier.notify(decision, [ActionResult("fence", NODE, Outcome.CONFLICT)])
    assert world.slack.posted() == []
    await notifier.notify(decision, [ActionResult("fence", NODE, Outcome.DONE)])
    [notice] = world.slack.posted()
    assert notice["channel"] == CHANNEL
    assert "fenced node" in notice["text"]
    world.slack.down = True
    await notifier.notify(decision, [ActionResult("unfence", NODE, Outcome.DONE)])
