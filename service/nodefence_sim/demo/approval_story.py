"""The seed story in approval mode, on the embedded simulated cluster and a local Slack stand-in.

control02 dies; the KubeNodeNotReady webhook reaches nodefence, which checks every guard and,
because the policy asks for approval, posts the question to Slack instead of fencing. A repeated
alert does not ask twice. A person who is not an approver presses Approve and is told so; the
on-call presses Approve; nodefence re-reads the node, judges every guard again and fences it;
the stuck pods are purged and the StatefulSet pods run elsewhere. Every step is a check.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO

import aiohttp
from pydantic import SecretStr

from nodefence.engine.model import OUT_OF_SERVICE_KEY
from nodefence.observability.logging import configure_logging
from nodefence.policy import parse_policy
from nodefence.runtime import build_service
from nodefence.settings import Settings
from nodefence.slack.messages import APPROVE_ACTION_ID
from nodefence_sim.demo.cluster_view import ClusterView, pod_status, taints
from nodefence_sim.demo.payloads import node_alert, webhook
from nodefence_sim.demo.receiver import serving
from nodefence_sim.demo.timeline import StepFailedError, Timeline
from nodefence_sim.fake_slack import (
    FakeSlack,
    button,
    interaction_body,
    running_fake_slack,
    sign_request,
)
from nodefence_sim.simulation import Simulation
from nodefence_sim.testing import running_simulator

NODE = "control02"
CHANNEL = "C0NODEFENCE"
ONCALL = "U0ONCALL"
STATEFUL = ("mariadb-server-1", "rabbitmq-rabbitmq-2", "ingress-0")


class ApprovalStory:
    def __init__(
        self,
        *,
        view: ClusterView,
        receiver: str,
        token: str,
        slack: FakeSlack,
        secret: str,
        t: Timeline,
    ) -> None:
        self.view = view
        self.receiver = receiver
        self.token = token
        self.slack = slack
        self.secret = secret
        self.t = t

    async def alert(self, starts_at: datetime) -> dict[str, Any]:
        payload = webhook([node_alert(NODE, starts_at=starts_at)])
        headers = {"Authorization": f"Bearer {self.token}"}
        async with self.view.session.post(
            f"{self.receiver}/alerts", json=payload, headers=headers
        ) as response:
            body: dict[str, Any] = await response.json()
            if response.status != 200:
                self.t.fail(f"receiver answered {response.status}: {body}")
                raise StepFailedError("webhook rejected")
            return dict(body["decisions"][0])

    async def press(self, user: str, reply: str) -> None:
        value = str(button(self.slack.posted()[-1], APPROVE_ACTION_ID)["value"])
        body = interaction_body(
            user=user,
            channel=CHANNEL,
            action_id=APPROVE_ACTION_ID,
            value=value,
            response_url=self.slack.response_url(reply),
        )
        async with self.view.session.post(
            f"{self.receiver}/slack/interactions",
            data=body,
            headers=sign_request(self.secret, body),
        ) as response:
            if response.status != 200:
                self.t.fail(f"/slack/interactions answered {response.status}")
                raise StepFailedError("interaction refused")

    def reply(self, name: str) -> dict[str, Any] | None:
        url = self.slack.response_url(name)
        return next((r for r in self.slack.responses if r["url"] == url), None)

    async def run(self) -> None:
        t, view = self.t, self.view
        t.heading(f"{NODE} dies (its kubelet stopped 20 minutes ago)")
        await view.control(NODE, "down", {"sinceSeconds": 1200})
        down_since = datetime.now(UTC) - timedelta(seconds=1200)

        async def hanging() -> bool:
            stuck = {
                p["metadata"]["name"]
                for p in await view.pods(node=NODE)
                if pod_status(p) == "Terminating"
            }
            return all(name in stuck for name in STATEFUL)

        await t.expect("its StatefulSet pods hang Terminating", hanging, within=60)

        t.heading("Alertmanager fires KubeNodeNotReady; the policy asks for approval in Slack")
        decision = await self.alert(down_since + timedelta(minutes=15))
        t.say(f"decision: {decision['verdict']} for {decision['node']}")

        async def asked() -> bool:
            return decision["verdict"] == "await-approval" and len(self.slack.posted()) == 1

        await t.expect("nodefence posts one question to the Slack channel", asked, within=2)
        message = self.slack.posted()[0]
        for block in message["blocks"]:
            if block["type"] == "section":
                t.detail(block["text"]["text"])

        async def not_fenced() -> bool:
            node = await view.node(NODE)
            return not any(x.startswith(OUT_OF_SERVICE_KEY) for x in taints(node))

        await t.expect("nothing is fenced while the question is open", not_fenced, within=2)
        await self.alert(down_since + timedelta(minutes=15))

        async def once() -> bool:
            return len(self.slack.posted()) == 1

        await t.expect(
            "Alertmanager repeats the alert; nodefence does not ask twice", once, within=2
        )

        t.heading("Someone who is not an approver presses Approve")
        await self.press("U0VISITOR", "visitor")

        async def refused() -> bool:
            answer = self.reply("visitor")
            return answer is not None and answer.get("response_type") == "ephemeral"

        await t.expect("they get a private answer; nothing happens", refused, within=10)
        await t.expect("the node is still not fenced", not_fenced, within=2)

        t.heading(f"The on-call ({ONCALL}) presses Approve and confirms")
        await self.press(ONCALL, "oncall")

        async def fenced() -> bool:
            node = await view.node(NODE)
            return any(x.startswith(OUT_OF_SERVICE_KEY) for x in taints(node))

        await t.expect(f"{NODE} carries the out-of-service taint", fenced, within=20)

        async def replaced() -> str:
            answer = self.reply("oncall")
            return str(answer["text"]) if answer and answer.get("replace_original") else ""

        text = await t.expect(
            "the Slack message is replaced by the outcome and who approved", replaced, within=10
        )
        t.detail(text)
        notes = (await view.node(NODE))["metadata"].get("annotations") or {}
        t.detail(f"nodefence.io/approval: {notes.get('nodefence.io/approval')}")

        async def purged() -> bool:
            return not any(pod_status(p) == "Terminating" for p in await view.pods(node=NODE))

        await t.expect(f"no pod is left Terminating on {NODE}", purged, within=30)


async def run_approval_demo(out: TextIO | None = None) -> int:
    timeline = Timeline(out)
    # The refusals this story shows (a non-approver pressing Approve) are logged as warnings;
    # the timeline says what happened, so a raw log line would only interrupt it.
    configure_logging("json", "error")
    sim = Simulation.from_scenario("seed")
    sim.settings.feature_gates["NodeOutOfServiceVolumeDetach"] = True
    token = secrets.token_urlsafe(24)
    bot = "xoxb-demo-" + secrets.token_hex(8)
    secret = secrets.token_hex(16)
    async with running_simulator(sim) as cluster, running_fake_slack(bot) as slack:
        settings = Settings(
            alert_token=SecretStr(token),
            namespace="nodefence",
            identity="nodefence-demo",
            slack_bot_token=SecretStr(bot),
            slack_signing_secret=SecretStr(secret),
            approval_key=SecretStr(secrets.token_hex(32)),
            slack_channel=CHANNEL,
            slack_approvers=[ONCALL],
            slack_api_url=slack.api_url,
        )
        policy = parse_policy({"rules": [{"name": "ask-first", "approval": "slack"}]})
        service = await build_service(settings, policy=policy, kubeconfig=str(cluster.kubeconfig))
        async with (
            serving(settings, service.fencer, service.slack) as receiver,
            aiohttp.ClientSession() as session,
        ):
            timeline.say(
                f"simulated cluster at {cluster.url}; Slack stand-in at {slack.url}; "
                f"nodefence listening at {receiver}"
            )
            story = ApprovalStory(
                view=ClusterView(session, cluster.url),
                receiver=receiver,
                token=token,
                slack=slack,
                secret=secret,
                t=timeline,
            )
            with contextlib.suppress(StepFailedError):
                await story.run()
    return timeline.verdict()


def main(_args: argparse.Namespace) -> int:
    return asyncio.run(run_approval_demo())
