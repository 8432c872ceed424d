"""The simulated cluster, a fake Slack Web API and the real receiver, all on loopback."""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import aiohttp
import pytest
from aiohttp import web
from pydantic import SecretStr

from nodefence.engine import record as fence_record
from nodefence.engine.approval_request import ApprovalRequest
from nodefence.http.app import build_app
from nodefence.policy import parse_policy
from nodefence.runtime import build_service
from nodefence.settings import Settings
from nodefence.shell.fencer import Fencer
from nodefence.slack.messages import APPROVE_ACTION_ID
from nodefence.slack.routes import SLACK, SlackIntegration
from nodefence_sim.demo.payloads import node_alert, webhook
from nodefence_sim.fake_slack import (
    FakeSlack,
    button,
    interaction_body,
    running_fake_slack,
    sign_request,
)
from nodefence_sim.resources import CONFIGMAPS, NODES, PODS
from nodefence_sim.simulation import Simulation
from nodefence_sim.testing import SimulatorHandle, running_simulator

NODE = "control02"
CHANNEL = "C0NODEFENCE"
APPROVER = "U0ONCALL"
SIGNING_SECRET = "signing-" + secrets.token_hex(8)
BOT_TOKEN = "xoxb-" + secrets.token_hex(8)
APPROVAL_KEY = "approval-" + secrets.token_hex(8)
POLICY: dict[str, Any] = {"rules": [{"name": "ask", "approval": "slack"}]}


async def eventually(probe: Callable[[], Any], *, within: float = 60.0) -> Any:
    """Poll until ``probe`` returns something truthy; fail with its last value at the deadline."""
    deadline = time.monotonic() + within
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {within}s (last value {value!r})")
        await asyncio.sleep(0.05)


@dataclass
class World:
    cluster: SimulatorHandle
    slack: FakeSlack
    url: str
    token: str
    session: aiohttp.ClientSession
    integration: SlackIntegration

    def node(self) -> dict[str, Any]:
        return self.cluster.sim.store.get(NODES, None, NODE)

    def terminating(self) -> list[str]:
        return [
            p["metadata"]["name"]
            for p in self.cluster.sim.store.items(PODS)
            if p["spec"].get("nodeName") == NODE and p["metadata"].get("deletionTimestamp")
        ]

    def annotations(self) -> dict[str, str]:
        return dict(self.node()["metadata"].get("annotations") or {})

    def fences_configmap(self) -> dict[str, Any] | None:
        return self.cluster.sim.store.peek(CONFIGMAPS, "nodefence", fence_record.CONFIGMAP)

    def record(self) -> fence_record.FenceRecord:
        """The fence record as the API server holds it: where approval requests live."""
        return fence_record.from_configmap(self.fences_configmap() or {})[0]

    def request(self) -> ApprovalRequest | None:
        """The node's approval request in the fence record."""
        return self.record().approval(NODE)

    async def kubelet_annotates(self, *changes: str) -> None:
        """Edit the node's annotations as its own kubelet can (real kubectl against the
        simulated API server): ``key=value`` sets, ``key-`` removes."""
        proc = await asyncio.create_subprocess_exec(
            "kubectl",
            "--kubeconfig",
            str(self.cluster.kubeconfig),
            "annotate",
            "--overwrite",
            f"node/{NODE}",
            *changes,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, "HOME": str(self.cluster.kubeconfig.parent)},
        )
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, out.decode()

    def oos(self) -> list[dict[str, Any]]:
        return [
            t
            for t in self.node()["spec"].get("taints") or []
            if t["key"] == "node.kubernetes.io/out-of-service"
        ]

    async def alert(self, status: str = "firing") -> tuple[int, dict[str, Any]]:
        started = datetime.now(UTC) - timedelta(minutes=15)
        ends = datetime.now(UTC) if status == "resolved" else None
        payload = webhook([node_alert(NODE, status=status, starts_at=started, ends_at=ends)])
        headers = {"Authorization": f"Bearer {self.token}"}
        async with self.session.post(f"{self.url}/alerts", json=payload, headers=headers) as r:
            return r.status, await r.json()

    def value(self, action_id: str = APPROVE_ACTION_ID, message: int = -1) -> str:
        return str(button(self.slack.posted()[message], action_id)["value"])

    async def click(
        self,
        action_id: str = APPROVE_ACTION_ID,
        *,
        user: str = APPROVER,
        channel: str = CHANNEL,
        value: str | None = None,
        timestamp: int | None = None,
        tamper: bool = False,
        response: str = "1",
    ) -> int:
        body = interaction_body(
            user=user,
            channel=channel,
            action_id=action_id,
            value=self.value(action_id) if value is None else value,
            response_url=self.slack.response_url(response),
        )
        headers = sign_request(SIGNING_SECRET, body, timestamp)
        if tamper:
            body = body.replace(user.encode(), b"U0INTRUDER")
        async with self.session.post(
            f"{self.url}/slack/interactions", data=body, headers=headers
        ) as r:
            return r.status

    async def settle(self) -> None:
        interactions = self.integration.interactions
        assert interactions is not None
        await interactions.tasks.drain(20)
        assert len(interactions.tasks) == 0


W = TypeVar("W", bound=World)


@asynccontextmanager
async def serving_world(
    *,
    policy: dict[str, Any] = POLICY,
    kind: type[W] = World,  # type: ignore[assignment]
    settings_for: Callable[[SimulatorHandle], dict[str, Any]] = lambda _cluster: {},
) -> AsyncIterator[tuple[W, Fencer]]:
    """The seed cluster, the fake Slack and a receiver built as ``serve`` builds it, with the
    Slack settings every approval test shares and those ``settings_for`` adds for the cluster."""
    sim = Simulation.from_scenario("seed")
    sim.settings.feature_gates["NodeOutOfServiceVolumeDetach"] = True
    token = secrets.token_urlsafe(16)
    async with running_simulator(sim) as cluster, running_fake_slack(BOT_TOKEN) as slack:
        settings = Settings(
            alert_token=SecretStr(token),
            namespace="nodefence",
            identity="replica-1",
            slack_bot_token=SecretStr(BOT_TOKEN),
            slack_signing_secret=SecretStr(SIGNING_SECRET),
            approval_key=SecretStr(APPROVAL_KEY),
            slack_channel=CHANNEL,
            slack_approvers=[APPROVER],
            slack_api_url=slack.api_url,
            slack_timeout_seconds=2,
            request_deadline_seconds=10,
            **settings_for(cluster),
        )
        service = await build_service(
            settings, policy=parse_policy(policy), kubeconfig=str(cluster.kubeconfig)
        )
        pipeline = service.fencer
        pipeline.options = type(pipeline.options)(
            namespace="nodefence", identity="replica-1", deadline_seconds=10, settle_seconds=0.5
        )
        app = build_app(settings, pipeline, metrics=pipeline.metrics, slack=service.slack)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        try:
            async with aiohttp.ClientSession() as session:
                yield kind(cluster, slack, url, token, session, app[SLACK]), pipeline
        finally:
            await runner.cleanup()
            await pipeline.close()


@pytest.fixture
async def world() -> AsyncIterator[World]:
    groups = {"slack_approver_groups": ["S0ONCALL"]}
    async with serving_world(settings_for=lambda _cluster: groups) as (built, _pipeline):
        built.slack.groups["S0ONCALL"] = ["U0GROUPIE"]
        yield built
