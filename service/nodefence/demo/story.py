"""The seed story, end to end, on the embedded simulated cluster.

control02 dies; its StatefulSet and Deployment pods hang Terminating and the StatefulSet pods are
not replaced; Alertmanager's KubeNodeNotReady webhook reaches nodefence, which verifies the node is
really dead, fences it with the out-of-service taint and purges the stuck pods; the StatefulSet
pods come back on other nodes; control02 reboots; the resolved webhook arrives and nodefence
verifies the node before it removes the taint; the DaemonSet pods return. Every step is a check.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import secrets
import shutil
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO

import aiohttp
from pydantic import SecretStr

from nodefence.demo.cluster_view import ClusterView, owner_kind, pod_status, ready_status, taints
from nodefence.demo.payloads import node_alert, webhook
from nodefence.demo.receiver import serving
from nodefence.demo.timeline import StepFailedError, Timeline
from nodefence.engine.model import OUT_OF_SERVICE_KEY
from nodefence.observability.logging import configure_logging
from nodefence.policy import parse_policy
from nodefence.runtime import build_pipeline
from nodefence.settings import Settings
from nodefence.sim.simulation import Simulation
from nodefence.sim.testing import running_simulator

NODE = "control02"
STATEFUL = ("mariadb-server-1", "rabbitmq-rabbitmq-2", "ingress-0")
NAMESPACE = "openstack"
# The seed cluster runs 1.24 without NodeOutOfServiceVolumeDetach, so the taint alone releases
# neither the stuck pods nor their volumes: the rule lets nodefence finish both.
# The healthy delay is scaled down from 5 minutes to 5 seconds so that the story fits a terminal;
# it is counted on the API server's clock from the moment nodefence first sees the node Ready.
HEALTHY_DELAY_SECONDS = 5
DEMO_POLICY = parse_policy(
    {
        "rules": [
            {
                "name": "seed",
                "volume_attachment_cleanup": True,
                "healthy_delay_seconds": HEALTHY_DELAY_SECONDS,
            }
        ]
    }
)


def _table(pods: list[dict[str, Any]]) -> str:
    rows = [
        f"{p['metadata']['name']:<44} {pod_status(p):<14} {owner_kind(p):<12} "
        f"{p['spec'].get('nodeName', '')}"
        for p in sorted(pods, key=lambda p: p["metadata"]["name"])
    ]
    return "\n".join([f"{'NAME':<44} {'STATUS':<14} {'OWNER':<12} NODE", *rows])


class Story:
    def __init__(
        self,
        view: ClusterView,
        receiver: str,
        token: str,
        timeline: Timeline,
        kubeconfig: str | None = None,
    ) -> None:
        self.view = view
        self.receiver = receiver
        self.token = token
        self.t = timeline
        self.kubeconfig = kubeconfig

    async def kubectl_events(self) -> str | None:
        """The Events section of the real ``kubectl describe node``, where kubectl is installed."""
        kubectl = shutil.which("kubectl")
        if kubectl is None or self.kubeconfig is None:
            return None
        proc = await asyncio.create_subprocess_exec(
            kubectl,
            "--kubeconfig",
            self.kubeconfig,
            "describe",
            "node",
            NODE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await proc.communicate()
        text = out.decode(errors="replace")
        return text[text.find("Events:") :] if "Events:" in text else text

    async def post_alert(self, status: str, starts_at: datetime) -> dict[str, Any]:
        ends = datetime.now(UTC) if status == "resolved" else None
        payload = webhook([node_alert(NODE, status=status, starts_at=starts_at, ends_at=ends)])
        return await self.post("/alerts", payload)

    async def post(self, path: str, payload: Any) -> dict[str, Any]:
        async with self.view.session.post(
            f"{self.receiver}{path}",
            json=payload,
            headers={"Authorization": f"Bearer {self.token}"},
        ) as response:
            body: dict[str, Any] = await response.json()
            if response.status != 200:
                self.t.fail(f"receiver answered {response.status}: {body}")
                raise StepFailedError("webhook rejected")
            return body

    def show_decision(self, body: dict[str, Any]) -> str:
        decision = body["decisions"][0]
        self.t.say(f"decision: {decision['verdict']} for {decision['node']}")
        for reason in decision["reasons"]:
            mark = "+" if reason["passed"] else "x"
            self.t.detail(f"{mark} [{reason['guard']}] {reason['message']}")
        return str(decision["verdict"])

    async def stuck_pods(self) -> list[dict[str, Any]]:
        return [p for p in await self.view.pods(node=NODE) if pod_status(p) == "Terminating"]

    async def run(self) -> None:
        t, view = self.t, self.view

        t.heading("A healthy seed cluster (Kubernetes v1.24.8, NodeOutOfServiceVolumeDetach off)")

        async def healthy() -> bool:
            nodes = await view.nodes()
            pods = await view.pods(node=NODE)
            running = {p["metadata"]["name"] for p in pods if pod_status(p) == "Running"}
            return (
                len(nodes) == 5
                and all(ready_status(n) == "True" for n in nodes)
                and all(name in running for name in STATEFUL)
            )

        await t.expect(
            f"5 nodes Ready; mariadb-server-1, rabbitmq-rabbitmq-2, ingress-0 Running on {NODE}",
            healthy,
            within=60,
        )
        t.detail(_table(await view.pods(node=NODE)))

        t.heading(f"{NODE} dies (its kubelet stopped 20 minutes ago)")
        await view.control(NODE, "down", {"sinceSeconds": 1200})
        down_since = datetime.now(UTC) - timedelta(seconds=1200)

        async def not_ready() -> bool:
            return ready_status(await view.node(NODE)) == "Unknown"

        await t.expect(f"{NODE} is NotReady (Ready=Unknown, unreachable taints)", not_ready)

        async def hanging() -> list[dict[str, Any]]:
            stuck = await self.stuck_pods()
            names = {p["metadata"]["name"] for p in stuck}
            return stuck if all(name in names for name in STATEFUL) else []

        stuck = await t.expect(
            "its StatefulSet and Deployment pods hang Terminating (evicted, kubelet dead)", hanging
        )
        t.detail(_table(await view.pods(node=NODE)))

        async def not_replaced() -> bool:
            for name in STATEFUL:
                pod = await view.pod(NAMESPACE, name)
                if pod is None or pod["spec"].get("nodeName") != NODE:
                    return False
            return True

        await t.expect(
            "the StatefulSet pods are not recreated elsewhere (old objects remain)",
            not_replaced,
            within=2,
        )
        t.say(f"{len(stuck)} pods stuck Terminating on {NODE}")

        t.heading("Alertmanager fires KubeNodeNotReady for control02")
        body = await self.post_alert("firing", down_since + timedelta(minutes=15))
        if self.show_decision(body) != "fence":
            t.fail("nodefence did not decide to fence")
            raise StepFailedError("fence")

        async def fenced() -> list[str]:
            node = await view.node(NODE)
            return [x for x in taints(node) if x.startswith(OUT_OF_SERVICE_KEY)]

        applied = await t.expect(f"{NODE} carries the out-of-service taint", fenced)
        t.detail(", ".join(applied))

        async def purged() -> bool:
            return not await self.stuck_pods()

        await t.expect(
            f"no pod is left Terminating on {NODE} (purged with grace 0)", purged, within=30
        )

        async def moved() -> dict[str, str]:
            placed: dict[str, str] = {}
            for name in STATEFUL:
                pod = await view.pod(NAMESPACE, name)
                if pod is None or pod_status(pod) != "Running":
                    return {}
                node = pod["spec"].get("nodeName", "")
                if node in ("", NODE):
                    return {}
                placed[name] = node
            return placed

        placed = await t.expect("the StatefulSet pods run again on other nodes", moved, within=60)
        t.detail("\n".join(f"{name} -> {node}" for name, node in placed.items()))

        t.heading(f"{NODE} is repaired and rebooted (Ready again for 10 minutes)")
        await view.control(NODE, "up", {"sinceSeconds": 600, "reboot": True})

        async def ready() -> bool:
            return ready_status(await view.node(NODE)) == "True"

        await t.expect(f"{NODE} is Ready", ready)

        async def still_fenced() -> bool:
            return bool(await fenced())

        await t.expect("the taint stays until nodefence verifies the node", still_fenced, within=2)

        t.heading("Alertmanager sends the resolved KubeNodeNotReady")
        body = await self.post_alert("resolved", down_since + timedelta(minutes=15))
        if self.show_decision(body) != "deferred":
            t.fail("nodefence did not wait for the healthy delay")
            raise StepFailedError("healthy delay")
        t.ok(
            f"the {HEALTHY_DELAY_SECONDS}s healthy delay starts now, on the API server's clock: "
            "the kubelet's own 'Ready since' is not trusted"
        )

        t.heading("The reconcile pass (a CronJob) checks again")

        async def unfence_decided() -> dict[str, Any] | None:
            reply = await self.post("/reconcile", {})
            decisions = [d for d in reply["decisions"] if d["node"] == NODE]
            return reply if decisions and decisions[0]["verdict"] == "unfence" else None

        body = await t.expect(
            "nodefence decides to unfence",
            unfence_decided,
            within=HEALTHY_DELAY_SECONDS + 15,
            interval=1.0,
        )
        self.show_decision({"decisions": [d for d in body["decisions"] if d["node"] == NODE]})

        async def unfenced() -> bool:
            return not await fenced()

        await t.expect("the out-of-service taint is removed", unfenced)

        async def daemonsets_back() -> list[str]:
            pods = await view.pods(node=NODE)
            running = [
                p["metadata"]["name"]
                for p in pods
                if owner_kind(p) == "DaemonSet" and pod_status(p) == "Running"
            ]
            return running

        back = await t.expect(f"DaemonSet pods run on {NODE} again", daemonsets_back, within=60)
        t.detail(", ".join(sorted(back)))

        async def stayed() -> bool:
            now = await moved()
            return bool(now) and now == placed

        await t.expect("pods that moved stay where they are", stayed, within=5)

        t.heading(f"What `kubectl describe node {NODE}` shows of nodefence")
        events = sorted(
            (
                e
                for e in await view.node_events(NODE)
                if (e.get("source") or {}).get("component") == "nodefence"
            ),
            key=lambda e: int(e["metadata"]["resourceVersion"]),
        )
        for event in events:
            t.detail(f"{event['type']:<8} {event['reason']:<16} {event['message']}")
        if not events:
            t.fail("no nodefence Event on the node")
            raise StepFailedError("events")
        t.ok("every action is recorded as an Event on the Node")
        described = await self.kubectl_events()
        if described is not None:
            t.detail(described.rstrip())
            if "NodeFenced" not in described or "NodeUnfenced" not in described:
                t.fail("kubectl describe node does not show nodefence's Events")
                raise StepFailedError("kubectl describe")
            t.ok(f"kubectl describe node {NODE} shows them")


async def run_demo(out: TextIO | None = None) -> int:
    timeline = Timeline(out)
    configure_logging("json", "warning")
    sim = Simulation.from_scenario("seed")
    token = secrets.token_urlsafe(24)
    async with running_simulator(sim) as cluster:
        settings = Settings(
            alert_token=SecretStr(token), namespace="nodefence", identity="nodefence-demo"
        )
        pipeline = await build_pipeline(
            settings, policy=DEMO_POLICY, kubeconfig=str(cluster.kubeconfig)
        )
        async with serving(settings, pipeline) as receiver, aiohttp.ClientSession() as session:
            timeline.say(f"simulated cluster at {cluster.url}; nodefence listening at {receiver}")
            if shutil.which("kubectl"):
                timeline.say(
                    f"follow along: kubectl --kubeconfig {cluster.kubeconfig} get pods -A -w"
                )
            story = Story(
                ClusterView(session, cluster.url),
                receiver,
                token,
                timeline,
                str(cluster.kubeconfig),
            )
            with contextlib.suppress(StepFailedError):
                await story.run()
    return timeline.verdict()


def main(_args: argparse.Namespace) -> int:
    return asyncio.run(run_demo())
