"""One answer wins: two people answer the same question at once, and exactly one answer stands.

On the escalation fixture (the BMC refuses the login, ``fencing.on_failure: approval``), two
approvers press at the same time, on one receiver or on two replicas of it (two ``nodefence
serve`` processes on the same cluster). Each answer is written into the fence record's question
on the record version it read, as every other write; the first to land is the answer, and the
other finds it there. Whatever the interleaving, after both presses: exactly one answer stands
in the record, the node is fenced if and only if that answer is Approve (with that approver's
name on the fence), and each person is told what really happened: the loser that the other
answer stood, and whose it was.

The race is not left to timing. The worst interleaving (both answers judged on one record
version, before either is written) is made exactly: both are decided on one snapshot and their
writes committed one after the other, and the second must be refused and, judged again, name
the first. End to end, both presses are sent together, for several rounds, each on a fresh
cluster, with the two people's roles and the order they are sent in swapped between rounds; the
invariant is asserted on every round, whichever press landed first.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from pydantic import SecretStr
from tests.reliability.support import ServeProcess

from nodefence.engine import answer as engine_answer
from nodefence.engine import record as fence_record
from nodefence.engine.model import Approval, ApprovalDecision
from nodefence.kube.client import Deadline
from nodefence.slack.messages import APPROVE_ACTION_ID, REJECT_ACTION_ID
from nodefence_sim.demo.payloads import node_alert, webhook
from nodefence_sim.fake_slack import interaction_body, running_fake_slack, sign_request
from nodefence_sim.redfish import bmcs_of, write_bmc_inventory
from nodefence_sim.resources import CONFIGMAPS, NODES, PODS
from nodefence_sim.simulation import Simulation
from nodefence_sim.testing import SimulatorHandle, running_simulator

from .conftest import (
    APPROVAL_KEY,
    APPROVER,
    BOT_TOKEN,
    CHANNEL,
    NODE,
    SIGNING_SECRET,
    eventually,
    serving_world,
)
from .test_slack_escalation import POLICY, Escalating, asked, kill, refuse_logins

SECOND = "U0SECOND"
ROUNDS = range(4)


@dataclass(frozen=True)
class Press:
    user: str
    action_id: str
    # Where the press is sent: the receiver's base URL.
    url: str

    @property
    def approves(self) -> bool:
        return self.action_id == APPROVE_ACTION_ID

    @property
    def reply_name(self) -> str:
        return f"{self.user}-{self.action_id}"


async def press(
    session: aiohttp.ClientSession, slack_url: str, message: dict[str, Any], one: Press
) -> int:
    """One signed press of a button of ``message``, as Slack sends it to the receiver."""
    [value] = [
        element["value"]
        for block in message["blocks"]
        if block.get("type") == "actions"
        for element in block["elements"]
        if element.get("action_id") == one.action_id
    ]
    body = interaction_body(
        user=one.user,
        channel=CHANNEL,
        action_id=one.action_id,
        value=value,
        response_url=f"{slack_url}/response/{one.reply_name}",
    )
    headers = sign_request(SIGNING_SECRET, body)
    async with session.post(f"{one.url}/slack/interactions", data=body, headers=headers) as r:
        return r.status


async def at_once(
    session: aiohttp.ClientSession,
    slack_url: str,
    message: dict[str, Any],
    presses: tuple[Press, Press],
) -> None:
    statuses = await asyncio.gather(*(press(session, slack_url, message, p) for p in presses))
    assert statuses == [200, 200]


def replies(responses: list[dict[str, Any]], presses: tuple[Press, Press]) -> dict[Press, str]:
    """Each press's one reply (the text that replaced the question for that person)."""
    said: dict[Press, list[str]] = {p: [] for p in presses}
    for response in responses:
        for one in presses:
            if str(response["url"]).endswith(f"/response/{one.reply_name}"):
                said[one].append(str(response["text"]))
    assert all(len(texts) == 1 for texts in said.values()), said
    return {p: texts[0] for p, texts in said.items()}


def one_answer_stands(
    record: fence_record.FenceRecord,
    taints: list[dict[str, Any]],
    told: dict[Press, str],
) -> Press:
    """The invariant: exactly one answer stands in the fence record, the node is fenced iff it
    is Approve (the fence naming that approver), and each person is told what happened. The
    press that stands is returned."""
    request = record.approval(NODE)
    entry = record.entry(NODE)
    fenced = entry is not None and entry.phase is fence_record.Phase.FENCED
    assert bool(taints) == fenced, (taints, entry)
    rejected = request is not None and bool(request.rejection)
    assert rejected != fenced, f"both answers stood: rejection {request}, fence {entry}"
    presses = list(told)
    if fenced:
        assert entry is not None
        [winner] = [
            p
            for p in presses
            if p.approves and entry.approval.startswith(f"approved by {p.user} at ")
        ]
        assert request is None or not request.rejection
    else:
        assert request is not None
        [winner] = [
            p
            for p in presses
            if not p.approves and request.rejection.startswith(f"rejected by {p.user} at ")
        ]
    [loser] = [p for p in presses if p is not winner]
    won, lost = told[winner], told[loser]
    if winner.approves:
        assert "is fenced" in won, won
        assert f"<@{winner.user}>" in won, won
    else:
        assert f"rejected by <@{winner.user}>" in won, won
        assert "does not fence it" in won, won
    # The loser hears that the other answer stood, whose it was, and that theirs did nothing.
    assert winner.user in lost, lost
    assert "changed nothing" in lost or "changes nothing" in lost, lost
    assert "is fenced (" not in lost, lost
    assert "does not fence it during" not in lost, lost
    return winner


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[Escalating]:
    def with_bmcs(cluster: SimulatorHandle) -> dict[str, Any]:
        inventory = write_bmc_inventory(tmp_path / "bmcs.yaml", cluster.url, cluster.sim)
        return {"bmc_inventory": inventory, "slack_approver_groups": ["S0ONCALL"]}

    async with serving_world(policy=POLICY, kind=Escalating, settings_for=with_bmcs) as (
        built,
        pipeline,
    ):
        built.bmcs = bmcs_of(built.cluster.sim)
        built.inventory_password = built.bmcs.password.get_secret_value()
        built.integration_metrics = pipeline.metrics
        built.slack.groups["S0ONCALL"] = [SECOND]
        yield built


async def answered_at_once(world: Escalating, presses: tuple[Press, Press]) -> Press:
    refuse_logins(world)
    await kill(world)
    await asked(world)
    [message] = world.slack.posted()
    await at_once(world.session, world.slack.url, message, presses)
    await world.settle()
    told = replies(world.slack.responses, presses)
    winner = one_answer_stands(world.record(), world.oos(), told)
    assert world.sent() == [], "nothing may be sent to a BMC that refused the login"
    return winner


def judged(world: Escalating, user: str, decision: ApprovalDecision) -> engine_answer.Answer:
    """A press of ``user`` on the question the record holds, as the receiver judges it."""
    request = world.request()
    assert request is not None
    incident = request.incident
    assert request.expires_at is not None
    approval = Approval(
        user,
        request.requested_at or request.expires_at,
        decision,
        incident.node_uid,
        incident.fingerprint,
    )
    return engine_answer.Answer(NODE, approval, incident.since_unix, request.expires_at)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (ApprovalDecision.APPROVE, ApprovalDecision.REJECT),
        (ApprovalDecision.REJECT, ApprovalDecision.APPROVE),
        (ApprovalDecision.APPROVE, ApprovalDecision.APPROVE),
        (ApprovalDecision.REJECT, ApprovalDecision.REJECT),
    ],
)
async def test_of_two_answers_judged_on_one_record_version_only_the_first_written_stands(
    world: Escalating, first: ApprovalDecision, second: ApprovalDecision
) -> None:
    """Both answers are judged on the same read of the record, so both apply; the first one's
    write lands, the second one's is refused (the loop reads again), and judged again the
    second answer is refused by the guard that names the first."""
    refuse_logins(world)
    await kill(world)
    await asked(world)
    interactions = world.integration.interactions
    assert interactions is not None
    loop, policy = interactions.fencer.loop, interactions.fencer.policy
    deadline = Deadline(20)
    snapshot = await loop.reader.read(NODE, deadline)
    answers = (judged(world, APPROVER, first), judged(world, SECOND, second))
    decisions = [
        engine_answer.decide_answer(snapshot.facts, a, policy, snapshot.now) for a in answers
    ]
    assert all(engine_answer.applies(d) for d in decisions), decisions
    assert all(len(d.actions) == 1 for d in decisions), "an answer is acted on unwritten"

    won = await loop.commit(decisions[0], snapshot, "answer-1", deadline)
    lost = await loop.commit(decisions[1], snapshot, "answer-2", deadline)
    assert [r.outcome.value for r in won.results] == ["done"], won
    assert not won.again
    assert [r.outcome.value for r in lost.results] == ["conflict"], lost
    assert lost.again, "the refused answer is not judged again"

    request = world.request()
    assert request is not None
    if first is ApprovalDecision.APPROVE:
        assert request.approval.startswith(f"approved by {APPROVER} at "), request
        assert not request.rejection
    else:
        assert request.rejection.startswith(f"rejected by {APPROVER} at "), request
        assert not request.approval
    again = await loop.reader.read(NODE, deadline)
    refused = engine_answer.decide_answer(again.facts, answers[1], policy, again.now)
    [guard] = [r for r in refused.reasons if not r.passed]
    assert guard.guard == (
        engine_answer.NOT_APPROVED
        if first is ApprovalDecision.APPROVE
        else engine_answer.NOT_REJECTED
    )
    assert APPROVER in guard.message
    assert refused.actions == ()
    assert not world.oos()


def swapped(first: Press, second: Press, turn: int) -> tuple[Press, Press]:
    """The two presses with the people's roles, and the order they are sent in, changing from
    one round to the next."""
    if turn % 2:
        first, second = (
            Press(second.user, first.action_id, first.url),
            Press(first.user, second.action_id, second.url),
        )
    return (first, second) if turn < 2 else (second, first)


@pytest.mark.parametrize("turn", ROUNDS)
async def test_approve_and_reject_at_once_exactly_one_stands(world: Escalating, turn: int) -> None:
    presses = swapped(
        Press(APPROVER, APPROVE_ACTION_ID, world.url),
        Press(SECOND, REJECT_ACTION_ID, world.url),
        turn,
    )
    await answered_at_once(world, presses)


@pytest.mark.parametrize("turn", ROUNDS)
async def test_two_approvals_at_once_fence_once_in_one_name(world: Escalating, turn: int) -> None:
    presses = swapped(
        Press(APPROVER, APPROVE_ACTION_ID, world.url),
        Press(SECOND, APPROVE_ACTION_ID, world.url),
        turn,
    )
    winner = await answered_at_once(world, presses)
    assert winner.approves
    [taint] = world.oos()
    assert taint["effect"] == "NoExecute"


@pytest.mark.parametrize("turn", ROUNDS)
async def test_two_rejections_at_once_one_is_recorded(world: Escalating, turn: int) -> None:
    presses = swapped(
        Press(APPROVER, REJECT_ACTION_ID, world.url),
        Press(SECOND, REJECT_ACTION_ID, world.url),
        turn,
    )
    winner = await answered_at_once(world, presses)
    assert not winner.approves
    assert not world.oos()


def terminating(cluster: SimulatorHandle) -> list[str]:
    return [
        p["metadata"]["name"]
        for p in cluster.sim.store.items(PODS)
        if p["spec"].get("nodeName") == NODE and p["metadata"].get("deletionTimestamp")
    ]


@contextmanager
def serving(
    cluster: SimulatorHandle, slack_api: str, tmp_path: Path, identity: str, token: str
) -> Iterator[ServeProcess]:
    """``nodefence serve`` against the simulated cluster with the escalating rule, the BMC
    inventory and the Slack settings every replica shares."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(POLICY))
    inventory = tmp_path / "bmcs.yaml"
    if not inventory.exists():
        write_bmc_inventory(inventory, cluster.url, cluster.sim)
    env = {
        "NODEFENCE_SLACK_BOT_TOKEN": BOT_TOKEN,
        "NODEFENCE_SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "NODEFENCE_APPROVAL_KEY": APPROVAL_KEY,
        "NODEFENCE_SLACK_CHANNEL": CHANNEL,
        "NODEFENCE_SLACK_APPROVERS": f"{APPROVER},{SECOND}",
        "NODEFENCE_SLACK_API_URL": slack_api,
        "NODEFENCE_SLACK_TIMEOUT_SECONDS": "2",
        "NODEFENCE_REQUEST_DEADLINE_SECONDS": "10",
        "NODEFENCE_BMC_INVENTORY": str(inventory),
        # The alert alone asks: no pass or watch of a replica's own judges the long-dead node
        # before the test's alert comes (the fallback would ask first, its own question).
        "NODEFENCE_RECONCILE_INTERVAL": "0",
    }
    with ServeProcess(cluster.kubeconfig, token, identity, policy=policy, env=env) as replica:
        yield replica


@pytest.mark.parametrize("turn", ROUNDS)
async def test_approve_and_reject_sent_to_two_replicas_exactly_one_stands(
    tmp_path: Path, turn: int
) -> None:
    sim = Simulation.from_scenario("seed")
    sim.settings.feature_gates["NodeOutOfServiceVolumeDetach"] = True
    token = secrets.token_urlsafe(16)
    async with (
        running_simulator(sim) as cluster,
        running_fake_slack(BOT_TOKEN) as slack,
        aiohttp.ClientSession() as session,
    ):
        bmcs = bmcs_of(cluster.sim)
        with (
            serving(cluster, slack.api_url, tmp_path, "replica-1", token) as one,
            serving(cluster, slack.api_url, tmp_path, "replica-2", token) as two,
        ):
            await one.wait_healthy(session)
            await two.wait_healthy(session)
            bmcs.password = SecretStr("rotated-" + secrets.token_hex(8))
            cluster.sim.node_down(NODE, since_seconds=1200)
            await eventually(lambda: terminating(cluster))
            payload = webhook([node_alert(NODE)])
            headers = {"Authorization": f"Bearer {token}"}
            async with session.post(f"{one.url}/alerts", json=payload, headers=headers) as r:
                body = await r.json()
                assert r.status == 200, body
            assert body["decisions"][0]["verdict"] == "await-approval", body
            [message] = slack.posted()
            presses = swapped(
                Press(APPROVER, APPROVE_ACTION_ID, one.url),
                Press(SECOND, REJECT_ACTION_ID, two.url),
                turn,
            )
            await at_once(session, slack.url, message, presses)
            await eventually(lambda: len(slack.responses) >= 2)
            told = replies(slack.responses, presses)
            record = fence_record.from_configmap(
                cluster.sim.store.peek(CONFIGMAPS, "nodefence", fence_record.CONFIGMAP) or {}
            )[0]
            taints = [
                t
                for t in cluster.sim.store.get(NODES, None, NODE)["spec"].get("taints") or []
                if t["key"] == "node.kubernetes.io/out-of-service"
            ]
            one_answer_stands(record, taints, told)
            assert [r for r in bmcs.resets if r[0] == NODE] == []
