"""A receiver built by the runtime with NODEFENCE_SLACK_NOTIFY posts a notice for a fence it
wrote: the notifier reaches the pipeline through its constructor, with no approval mode."""

from __future__ import annotations

import asyncio
import secrets
import time
from datetime import UTC, datetime, timedelta

import aiohttp
from aiohttp import web
from pydantic import SecretStr

from nodefence.http.app import build_app
from nodefence.policy import parse_policy
from nodefence.runtime import build_service
from nodefence.settings import Settings
from nodefence_sim.demo.payloads import node_alert, webhook
from nodefence_sim.fake_slack import running_fake_slack
from nodefence_sim.resources import PODS
from nodefence_sim.simulation import Simulation
from nodefence_sim.testing import running_simulator

NODE = "control02"
CHANNEL = "C0NOTICES"
BOT_TOKEN = "xoxb-" + secrets.token_hex(8)
INFERENCE = {"rules": [{"name": "default", "fencing": {"driver": "none"}}]}


async def _until_pods_terminating(sim: Simulation, within: float = 30.0) -> None:
    """The taint manager's evictions have begun: the node is seen dead."""
    deadline = time.monotonic() + within
    while not any(
        p["spec"].get("nodeName") == NODE and p["metadata"].get("deletionTimestamp")
        for p in sim.store.items(PODS)
    ):
        assert time.monotonic() < deadline, f"no pod of {NODE} terminating within {within}s"
        await asyncio.sleep(0.05)


async def test_a_written_fence_is_announced_in_the_channel() -> None:
    sim = Simulation.from_scenario("seed")
    token = secrets.token_urlsafe(16)
    async with running_simulator(sim) as cluster, running_fake_slack(BOT_TOKEN) as slack:
        settings = Settings(
            alert_token=SecretStr(token),
            namespace="nodefence",
            identity="replica-1",
            slack_bot_token=SecretStr(BOT_TOKEN),
            slack_channel=CHANNEL,
            slack_notify=True,
            slack_api_url=slack.api_url,
            slack_timeout_seconds=2,
            request_deadline_seconds=10,
        )
        service = await build_service(
            settings, policy=parse_policy(INFERENCE), kubeconfig=str(cluster.kubeconfig)
        )
        assert service.slack.notifier is not None
        assert service.slack.interactions is None
        runner = web.AppRunner(
            build_app(settings, service.fencer, metrics=service.metrics, slack=service.slack)
        )
        await runner.setup()
        try:
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            url = f"http://127.0.0.1:{runner.addresses[0][1]}"
            sim.node_down(NODE, since_seconds=1200)
            await _until_pods_terminating(sim)
            started = datetime.now(UTC) - timedelta(minutes=15)
            payload = webhook([node_alert(NODE, starts_at=started)])
            headers = {"Authorization": f"Bearer {token}"}
            async with (
                aiohttp.ClientSession() as session,
                session.post(f"{url}/alerts", json=payload, headers=headers) as r,
            ):
                assert r.status == 200, await r.text()
                [decision] = (await r.json())["decisions"]
            assert decision["verdict"] == "fence", decision
            [notice] = slack.posted()
            assert notice["channel"] == CHANNEL
            assert "fenced node" in notice["text"]
            assert NODE in notice["text"]
        finally:
            await runner.cleanup()
            await service.close()
