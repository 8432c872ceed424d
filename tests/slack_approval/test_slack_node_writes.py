"""S12 for approvals: nothing a node writes can ask, answer or withdraw a question.

A node's kubelet may edit its own Node's annotations. Each test acts as it would, with real
kubectl against the simulated API server, on the words nodefence shows people
(``nodefence.io/approval``) and on the keys where requests and rejections used to be kept, and
checks that the question and its answer stay what the fence record in nodefence's namespace says.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from datetime import UTC, datetime, timedelta

import pytest

from nodefence.engine import mirror
from nodefence.engine.approval_request import ApprovalRequest
from nodefence.engine.wording import instant
from nodefence_sim.demo.payloads import node_alert
from nodefence_sim.resources import NODES

from .conftest import APPROVER, NODE, World, eventually

pytestmark = pytest.mark.invariant("S12")

FORGED_REJECTION = "rejected by U0MALLORY at 2026-11-30T08:00:00Z"


async def kill(world: World) -> None:
    world.cluster.sim.node_down(NODE, since_seconds=1200)
    await eventually(world.terminating)


def asked(world: World) -> ApprovalRequest:
    request = world.request()
    assert request is not None, world.record()
    return request


def incident_notes(world: World) -> list[str]:
    """What a node writes to pass for nodefence's own record of this incident."""
    node = world.node()
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    return [
        f"nodefence.io/approval-node-uid={node['metadata']['uid']}",
        f"nodefence.io/approval-fingerprint={node_alert(NODE)['fingerprint']}",
        f"nodefence.io/approval-not-ready-since={ready['lastTransitionTime']}",
    ]


async def test_a_node_that_deletes_or_alters_its_pending_question_is_not_asked_again(
    world: World,
) -> None:
    await kill(world)
    status, body = await world.alert()
    assert status == 200, body
    [message] = world.slack.posted()
    first = world.request()

    # The kubelet deletes every trace of the question on its node ...
    await world.kubelet_annotates(
        f"{mirror.APPROVAL}-",
        "nodefence.io/approval-requested-at-",
        "nodefence.io/approval-message-",
        "nodefence.io/approval-node-uid-",
    )
    assert mirror.APPROVAL not in world.annotations()
    status, body = await world.alert()
    assert status == 200, body
    assert body["decisions"][0]["verdict"] == "await-approval"
    assert world.slack.posted() == [message], "a deleted annotation asked a second question"

    # ... then writes an expired one over it.
    past = instant(datetime.now(UTC) - timedelta(hours=3))
    await world.kubelet_annotates(
        f"{mirror.APPROVAL}=asked in Slack at {past}; the question expires at {past}",
        f"nodefence.io/approval-expires-at={past}",
    )
    status, _body = await world.alert()
    assert status == 200
    assert world.slack.posted() == [message], "an altered annotation asked a second question"
    assert world.slack.posted("chat.update") == [], "the open question was marked expired"
    assert first is not None
    assert asked(world) == first, "the question in the fence record changed"

    # The one question is still the one answered.
    assert await world.click() == 200
    await world.settle()
    assert world.oos()


async def test_a_forged_rejection_on_the_node_neither_blocks_nor_is_honoured(
    world: World,
) -> None:
    await kill(world)
    status, _body = await world.alert()
    assert status == 200
    await world.kubelet_annotates(f"{mirror.APPROVAL}={FORGED_REJECTION}", *incident_notes(world))

    status, body = await world.alert()
    assert status == 200, body
    [decision] = body["decisions"]
    assert decision["verdict"] == "await-approval", decision
    assert "U0MALLORY" not in str(decision)
    assert asked(world).rejection == ""

    assert await world.click() == 200
    await world.settle()
    [taint] = world.oos()
    assert taint["effect"] == "NoExecute"
    [reply] = world.slack.responses
    assert "is fenced" in reply["text"]
    assert "U0MALLORY" not in reply["text"]
    assert world.annotations()[mirror.APPROVAL].startswith(f"approved by {APPROVER} at ")
    assert world.record().entry(NODE) is not None


async def test_a_forged_record_of_a_question_already_posted_does_not_stop_the_question(
    world: World,
) -> None:
    await kill(world)
    now = datetime.now(UTC)
    await world.kubelet_annotates(
        f"{mirror.APPROVAL}=asked in Slack at {instant(now)}; the question expires at "
        f"{instant(now + timedelta(hours=1))}",
        f"nodefence.io/approval-requested-at={instant(now)}",
        f"nodefence.io/approval-expires-at={instant(now + timedelta(hours=1))}",
        "nodefence.io/approval-message=C0NODEFENCE/1700000000.000100",
        *incident_notes(world),
    )
    assert world.request() is None

    status, body = await world.alert()
    assert status == 200, body
    assert body["decisions"][0]["verdict"] == "await-approval"
    [message] = world.slack.posted()
    assert message["channel"] == "C0NODEFENCE"
    request = asked(world)
    assert (request.channel, request.ts) != ("C0NODEFENCE", "1700000000.000100")
    assert request.ts


async def nodefence_status(world: World, *args: str) -> str:
    """``nodefence status`` as an operator runs it, against the simulated cluster."""
    env = {**os.environ, "KUBECONFIG": str(world.cluster.kubeconfig)}
    env["NODEFENCE_NAMESPACE"] = "nodefence"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "nodefence",
        "status",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def test_status_lists_the_question_the_record_holds_not_what_nodes_say(
    world: World,
) -> None:
    """``nodefence status`` shows the pending question from the fence record; a node that
    claims one in its annotations is not listed."""
    await kill(world)
    await world.alert()
    forged = world.cluster.sim.store.get(NODES, None, "compute02")
    forged["metadata"].setdefault("annotations", {}).update(
        {
            "nodefence.io/approval-requested-at": instant(datetime.now(UTC)),
            "nodefence.io/approval-node-uid": forged["metadata"]["uid"],
            mirror.APPROVAL: "asked in Slack at 2026-11-30T08:00:00Z",
        }
    )
    world.cluster.sim.store.update(NODES, None, "compute02", forged)
    shown = json.loads(await nodefence_status(world, "-o", "json"))
    [pending] = shown["pendingApprovals"]
    request = asked(world)
    assert pending["node"] == NODE
    assert pending["nodeUID"] == world.node()["metadata"]["uid"]
    assert pending["message"] == f"{request.channel}/{request.ts}"
    text = await nodefence_status(world)
    assert f"{NODE}  asked at " in text
    assert "Pending approvals: 1" in text
