"""``fencing.on_failure: approval`` end to end: the simulator's Redfish BMC fails the power step
(a refused login, a power-off that never takes), the real receiver asks in Slack with the BMC's
error, and a signed click decides: approve -> taint with "no power-off proof: ...; approved by",
reject -> no taint for the outage. The power-off already sent is never sent again."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from nodefence.engine import escalation, mirror
from nodefence.engine import record as fence_record
from nodefence.observability.metrics import Metrics
from nodefence.slack.messages import REJECT_ACTION_ID
from nodefence_sim.redfish import SimBmcs, bmcs_of, write_bmc_inventory
from nodefence_sim.resources import CONFIGMAPS, EVENTS
from nodefence_sim.testing import SimulatorHandle

from .conftest import (
    APPROVER,
    NODE,
    World,
    eventually,
    serving_world,
)

POLICY: dict[str, Any] = {
    "rules": [
        {
            "name": "escalating",
            "fencing": {
                "driver": "redfish",
                "action": "off",
                # Short, so a power-off that never takes is given up within the request.
                "timeout_seconds": 2,
                "on_failure": "approval",
            },
        }
    ]
}


class Escalating(World):
    """The seed cluster, its simulated Redfish BMCs and the fake Slack around the receiver."""

    bmcs: SimBmcs
    inventory_password: str
    integration_metrics: Metrics

    def sent(self) -> list[tuple[str, str]]:
        return [r for r in self.bmcs.resets if r[0] == NODE]

    def entry(self) -> fence_record.FenceEntry | None:
        body = self.cluster.sim.store.peek(CONFIGMAPS, "nodefence", fence_record.CONFIGMAP)
        return fence_record.from_configmap(body or {})[0].entry(NODE)

    def events(self, reason: str) -> list[str]:
        return [
            str(e.get("message", ""))
            for e in self.cluster.sim.store.items(EVENTS)
            if e.get("reason") == reason and (e.get("involvedObject") or {}).get("name") == NODE
        ]

    def escalations(self) -> float:
        metrics = self.integration_metrics.exposition().decode()
        total = 0.0
        for line in metrics.splitlines():
            if line.startswith("nodefence_fencing_escalations_total{") and f'node="{NODE}"' in line:
                assert 'driver="redfish"' in line
                total += float(line.rsplit(" ", 1)[1])
        return total


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[Escalating]:
    def with_bmcs(cluster: SimulatorHandle) -> dict[str, Any]:
        inventory = write_bmc_inventory(tmp_path / "bmcs.yaml", cluster.url, cluster.sim)
        return {"bmc_inventory": inventory}

    async with serving_world(policy=POLICY, kind=Escalating, settings_for=with_bmcs) as (
        built,
        pipeline,
    ):
        built.bmcs = bmcs_of(built.cluster.sim)
        built.inventory_password = built.bmcs.password.get_secret_value()
        built.integration_metrics = pipeline.metrics
        yield built


async def kill(world: World) -> None:
    world.cluster.sim.node_down(NODE, since_seconds=1200)
    await eventually(world.terminating)


def refuse_logins(world: Escalating) -> None:
    """The BMC's password was changed and the inventory not: every login answers 401."""
    world.bmcs.password = SecretStr("rotated-" + secrets.token_hex(8))


async def asked(world: Escalating) -> str:
    status, body = await world.alert()
    assert status == 200, body
    [decision] = body["decisions"]
    assert decision["verdict"] == "await-approval", decision
    assert not world.oos()
    [message] = world.slack.posted()
    return str(message["blocks"]) + str(message["text"])


async def test_a_refused_login_asks_with_the_error_and_an_approval_fences(
    world: Escalating,
) -> None:
    refuse_logins(world)
    await kill(world)
    question = await asked(world)
    assert "No power-off proof" in question
    assert "401" in question
    assert world.inventory_password not in question
    assert world.sent() == [], "nothing may be sent to a BMC that refused the login"
    [escalated] = world.events("FenceEscalated")
    assert "escalated to a person in Slack" in escalated
    assert "401" in escalated
    assert world.escalations() >= 1
    # A repeated alert asks no second time.
    status, body = await world.alert()
    assert status == 200
    assert body["decisions"][0]["verdict"] == "await-approval"
    assert len(world.slack.posted()) == 1

    assert await world.click() == 200
    await world.settle()
    [taint] = world.oos()
    assert taint["effect"] == "NoExecute"
    notes = world.annotations()
    proof = notes[mirror.PROOF]
    assert proof.startswith(f"{escalation.NO_PROOF}: ")
    assert "401" in proof
    assert f"approved by {APPROVER} at " in proof
    assert world.inventory_password not in proof
    entry = world.entry()
    assert entry is not None
    assert entry.proof == proof
    assert entry.approval.startswith(f"approved by {APPROVER} at ")
    [fenced] = world.events("NodeFenced")
    assert f"{escalation.NO_PROOF}: " in fenced
    assert f"approved by {APPROVER}" in fenced
    [reply] = world.slack.responses
    assert "is fenced" in reply["text"]
    assert world.sent() == []
    await eventually(lambda: not world.terminating())


async def test_a_rejected_escalation_leaves_the_node_untainted_for_the_outage(
    world: Escalating,
) -> None:
    refuse_logins(world)
    await kill(world)
    question = await asked(world)
    assert "401" in question
    assert await world.click(REJECT_ACTION_ID) == 200
    await world.settle()
    assert not world.oos()
    [reply] = world.slack.responses
    assert "rejected" in reply["text"]
    # The BMC works again; still nothing for this outage, and nobody is asked again.
    world.bmcs.password = SecretStr(world.inventory_password)
    status, body = await world.alert()
    assert status == 200
    assert body["decisions"][0]["verdict"] == "noop", body
    assert f"rejected by {APPROVER}" in str(body["decisions"][0]["reasons"])
    assert not world.oos()
    assert world.sent() == []
    assert len(world.slack.posted()) == 1


async def test_a_power_off_that_never_takes_is_sent_once_and_approved_over(
    world: Escalating,
) -> None:
    world.bmcs.stuck_on.add(NODE)
    await kill(world)
    question = await asked(world)
    assert "No power-off proof" in question
    assert "still reports On" in question
    assert world.sent() == [(NODE, "ForceOff")]
    entry = world.entry()
    assert entry is not None
    assert entry.power_off_sent_at is not None, "the claim and its power-off mark were let go"

    assert await world.click() == 200
    await world.settle()
    assert world.oos()
    # Approved over the same incident: read back again, never sent a second time.
    assert world.sent() == [(NODE, "ForceOff")]
    proof = world.annotations()[mirror.PROOF]
    assert proof.startswith(f"{escalation.NO_PROOF}: ")
    assert f"approved by {APPROVER}" in proof


async def test_an_approval_given_for_a_refused_login_does_not_fence_a_machine_reading_on(
    world: Escalating,
) -> None:
    """The question said HTTP 401. Before the click the password is fixed and the machine
    ignores ForceOff: at the click nodefence sends ForceOff and reads On. The approval answered
    the 401, not this; nothing is tainted, and a new question states that the BMC reports On."""
    refuse_logins(world)
    await kill(world)
    question = await asked(world)
    assert "401" in question
    world.bmcs.password = SecretStr(world.inventory_password)
    world.bmcs.stuck_on.add(NODE)

    assert await world.click() == 200
    await world.settle()

    assert not world.oos(), "fenced on an approval given for another failure"
    assert world.sent() == [(NODE, "ForceOff")]
    await eventually(lambda: len(world.slack.posted()) == 2)
    second = world.slack.posted()[-1]
    said = str(second["blocks"]) + str(second["text"])
    assert "still reports On" in said, said
    assert "now reports timeout, the machine reads On" in said, said
    entry = world.entry()
    assert entry is not None
    assert entry.phase is fence_record.Phase.CLAIMED
    assert entry.power_off_sent_at is not None, "the claim that sent the power-off was let go"
    [reply] = world.slack.responses
    assert "is fenced" not in reply["text"], reply

    # The new question, approved, fences: it asked about the machine reading On.
    assert await world.click() == 200
    await world.settle()
    assert world.oos()
    assert world.sent() == [(NODE, "ForceOff")], "the power-off was sent a second time"
