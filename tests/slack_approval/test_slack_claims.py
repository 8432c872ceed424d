"""One question per incident across replicas: the claim in the fence record decides who asks.

Two replicas that receive the same alert at once both decide ``await-approval``; only the one
whose record write lands on the version it read posts. A claim whose message was never recorded
belongs to a replica that died between claim and post: it holds for a grace, then the question is
asked again.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import SecretStr

from nodefence.engine import record as fence_record
from nodefence.engine.approval_request import CLAIM_GRACE, ApprovalRequest, Incident
from nodefence.engine.model import AlertEvent, AlertStatus
from nodefence.policy import parse_policy
from nodefence.runtime import build_service
from nodefence.settings import Settings
from nodefence.shell.fencer import Fencer
from nodefence_sim.demo.payloads import node_alert
from nodefence_sim.resources import CONFIGMAPS

from .conftest import (
    APPROVAL_KEY,
    BOT_TOKEN,
    CHANNEL,
    NODE,
    POLICY,
    SIGNING_SECRET,
    World,
    eventually,
)

EVENT = AlertEvent(
    alertname="KubeNodeNotReady",
    status=AlertStatus.FIRING,
    node=NODE,
    fingerprint=node_alert(NODE)["fingerprint"],
    labels={"alertname": "KubeNodeNotReady", "node": NODE},
)


@pytest.fixture
async def second_replica(world: World) -> AsyncIterator[Fencer]:
    """Another receiver of the same cluster and Slack channel, as a second replica runs."""
    settings = Settings(
        alert_token=SecretStr("replica-2-token"),
        namespace="nodefence",
        identity="replica-2",
        slack_bot_token=SecretStr(BOT_TOKEN),
        slack_signing_secret=SecretStr(SIGNING_SECRET),
        approval_key=SecretStr(APPROVAL_KEY),
        slack_channel=CHANNEL,
        slack_approvers=["U0ONCALL"],
        slack_api_url=world.slack.api_url,
        slack_timeout_seconds=2,
        request_deadline_seconds=10,
    )
    service = await build_service(
        settings, policy=parse_policy(POLICY), kubeconfig=str(world.cluster.kubeconfig)
    )
    try:
        yield service.fencer
    finally:
        await service.close()


async def kill(world: World) -> None:
    world.cluster.sim.node_down(NODE, since_seconds=1200)
    await eventually(world.terminating)


def first_replica(world: World) -> Fencer:
    interactions = world.integration.interactions
    assert interactions is not None
    return interactions.fencer


async def test_two_replicas_receiving_one_alert_ask_once(
    world: World, second_replica: Fencer
) -> None:
    await kill(world)
    # The record exists already (another node's fence, say), so the claims are updates on the
    # version each replica read, not creates.
    create_record(world, fence_record.FenceRecord())
    replicas = (first_replica(world), second_replica)
    for _round in range(3):
        answers = await asyncio.gather(*(r.handle_events([EVENT]) for r in replicas))
        assert [d.verdict.value for [d] in answers] == ["await-approval"] * 2
    [message] = world.slack.posted()
    request = world.request()
    assert request is not None
    assert request.channel == message["channel"]
    assert request.ts, "the message was not recorded"
    assert request.claimed_by.startswith(("replica-1/", "replica-2/"))


def leave_claim(world: World, claimed_at: datetime) -> None:
    """The record as a replica that died between its claim and its post leaves it (written
    straight into nodefence's namespace, where only nodefence writes)."""
    node = world.node()
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    incident = Incident(node["metadata"]["uid"], EVENT.fingerprint, ready["lastTransitionTime"])
    claim = ApprovalRequest(
        NODE,
        incident,
        requested_at=claimed_at,
        expires_at=claimed_at + timedelta(hours=1),
        claimed_by="replica-9/deadbeef0000",
    )
    create_record(world, fence_record.with_approval(fence_record.FenceRecord(), claim))


def create_record(world: World, record: fence_record.FenceRecord) -> None:
    world.cluster.sim.store.create(
        CONFIGMAPS,
        "nodefence",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": fence_record.CONFIGMAP, "namespace": "nodefence"},
            "data": {**fence_record.encode(record), "owner-note": "not nodefence's"},
        },
    )


async def test_a_fresh_claim_without_a_message_holds_the_question(world: World) -> None:
    await kill(world)
    leave_claim(world, datetime.now(UTC))
    status, body = await world.alert()
    assert status == 200, body
    assert body["decisions"][0]["verdict"] == "await-approval"
    assert world.slack.posted() == [], "asked while another replica's claim is being posted"


async def test_a_claim_whose_message_never_came_is_asked_again_after_the_grace(
    world: World,
) -> None:
    await kill(world)
    leave_claim(world, datetime.now(UTC) - CLAIM_GRACE - timedelta(seconds=5))
    status, body = await world.alert()
    assert status == 200, body
    [message] = world.slack.posted()
    request = world.request()
    assert request is not None
    assert message["channel"] == request.channel
    assert request.ts, "the message was not recorded"
    assert not request.claimed_by.startswith("replica-9/")
    stored = world.fences_configmap()
    assert stored is not None
    assert json.loads(stored["data"]["approval." + NODE])["ts"] == request.ts
