"""The seed story, end to end, on the embedded simulated cluster.

control02 hangs; its StatefulSet and Deployment pods hang Terminating and the StatefulSet pods
are not replaced; Alertmanager's KubeNodeNotReady webhook reaches nodefence, which verifies the
kubelet is really silent. With ``--fencing redfish`` it then powers the machine off through its
(simulated) BMC and reads back Off before the out-of-service taint, purges the stuck pods,
powers the machine on again (``action: reboot``) and unfences once it is back with a new boot ID
and healthy for the delay. Without it, the rule says explicitly that it fences on inference
alone (``fencing.driver: none``) and every decision says "no proof". Every step is a check.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import secrets
import shutil
import time
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

import aiohttp
import yaml
from pydantic import SecretStr

from nodefence.engine.model import OUT_OF_SERVICE_KEY
from nodefence.observability.logging import configure_logging
from nodefence.policy import Policy, parse_policy
from nodefence.runtime import build_fencer
from nodefence.settings import Settings
from nodefence_sim.demo.cluster_view import (
    ClusterView,
    owner_kind,
    pod_status,
    ready_status,
    taints,
)
from nodefence_sim.demo.payloads import node_alert, webhook
from nodefence_sim.demo.receiver import serving
from nodefence_sim.demo.timeline import StepFailedError, Timeline
from nodefence_sim.demo.tls_front import tls_front
from nodefence_sim.redfish import bmcs_of, write_bmc_inventory
from nodefence_sim.simulation import Simulation
from nodefence_sim.testing import running_simulator

NODE = "control02"
STATEFUL = ("mariadb-server-1", "rabbitmq-rabbitmq-2", "ingress-0")
NAMESPACE = "openstack"
# The seed cluster runs 1.24 without NodeOutOfServiceVolumeDetach, so the taint alone releases
# neither the stuck pods nor their volumes: the rule lets nodefence finish both.
# The healthy delay is scaled down from 5 minutes to 5 seconds so that the story fits a terminal;
# it is counted on the API server's clock from the moment nodefence first sees the node Ready.
HEALTHY_DELAY_SECONDS = 5
POWER_TIMEOUT_SECONDS = 10
FENCING = {
    "none": {"driver": "none"},
    "redfish": {"driver": "redfish", "action": "reboot", "timeout_seconds": POWER_TIMEOUT_SECONDS},
    # fence_redfish against the same BMCs, behind a TLS front: each step is a process of its own.
    "fence-agent": {"driver": "fence-agent", "action": "reboot", "timeout_seconds": 30},
}
AGENT = "fence_redfish"
AGENT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
INSTALL_AGENT = (
    "the fence-agent story needs fence_redfish from ClusterLabs' fence agents: on Debian or "
    "Ubuntu `sudo apt-get install fence-agents`, on Fedora, RHEL or CentOS Stream `sudo dnf "
    "install fence-agents-redfish`; then run `nodefence demo --fencing fence-agent` again"
)


def demo_policy(fencing: str) -> Policy:
    return parse_policy(
        {
            "rules": [
                {
                    "name": "seed",
                    "volume_attachment_cleanup": True,
                    "healthy_delay_seconds": HEALTHY_DELAY_SECONDS,
                    "fencing": FENCING[fencing],
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


def _census(pods: list[dict[str, Any]]) -> str:
    """The node's pods in one line: how many, by owner and status."""
    owners = Counter(owner_kind(p) for p in pods)
    states = Counter(pod_status(p) for p in pods)
    by_owner = ", ".join(f"{n} {kind}" for kind, n in sorted(owners.items()))
    by_state = ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
    return f"{len(pods)} pods on {NODE} ({by_owner}): {by_state}"


def _purge_counts(decision: dict[str, Any]) -> str:
    """Why the decision listed fewer pods to purge than the Event says were purged: the taint
    evicts the pods that were not Terminating yet (DaemonSet pods do not tolerate it), and they
    are purged as they turn Terminating. Empty when the two counts agree."""
    listed = sum(1 for a in decision["actions"] if a["type"] == "purge-pod")
    purged = sum(
        1 for r in decision["results"] if r["action"] == "purge" and r["outcome"] == "done"
    )
    if purged <= listed:
        return ""
    return (
        f"{purged} pods purged in all: the {listed} the decision listed, stuck Terminating when "
        f"the alert came, and {purged - listed} the out-of-service taint evicted after it went on "
        "(purged as they turned Terminating); the NodeFenced Event counts all of them"
    )


class Story:
    def __init__(
        self,
        view: ClusterView,
        receiver: str,
        token: str,
        timeline: Timeline,
        kubeconfig: str | None = None,
        *,
        bmc: tuple[str, SecretStr] | None = None,
        agent: str = "",
    ) -> None:
        self.view = view
        self.receiver = receiver
        self.token = token
        self.t = timeline
        self.kubeconfig = kubeconfig
        # The simulated BMC's login, when the story fences through Redfish.
        self.bmc = bmc
        # The fence agent that acts on the BMCs ("" for the native Redfish driver).
        self.agent = agent

    async def power_state(self) -> str:
        """control02's PowerState as its BMC reports it (Redfish, basic auth)."""
        assert self.bmc is not None
        user, password = self.bmc
        auth = aiohttp.BasicAuth(user, password.get_secret_value())
        url = f"{self.view.url}/redfish/v1/Systems/{NODE}"
        async with self.view.session.get(url, auth=auth) as response:
            body: dict[str, Any] = await response.json()
        return str(body.get("PowerState", ""))

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

    async def show_binding(self, body: dict[str, Any]) -> None:
        """An Off read from some machine is no proof for this node (S10): the proof the fence
        keeps must name the system UUID its BMC reported, and that must be the Node's own."""
        verdict = " ".join(
            r["message"] for r in body["decisions"][0]["reasons"] if r["guard"] == "verdict"
        )
        matched = re.search(r"identity matched \(([^)]+)\)", verdict)
        node = await self.view.node(NODE)
        own = str(node.get("status", {}).get("nodeInfo", {}).get("systemUUID", ""))
        if matched is None or not own or matched[1].lower() != own.lower():
            self.t.fail(f"the proof does not show that the machine read Off is {NODE}'s ({own})")
            raise StepFailedError("identity")
        self.t.ok(
            f"the proof is bound to {NODE}'s machine: identity matched ({matched[1]}), the "
            "system UUID its BMC reports is the Node's systemUUID"
        )

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
        # The table is shown once, when the node has died: the same rows twice say nothing new.
        t.detail(_census(await view.pods(node=NODE)))

        if self.bmc is not None and self.agent:
            t.say(
                f"power fencing through a fence agent: the rule's fencing is fence-agent with "
                f"action reboot; {self.agent} reaches each node's simulated BMC over HTTPS, with "
                "its parameters on stdin, and only its separate status run exiting 2 is proof"
            )
            t.heading(f"{NODE} hangs (its kubelet stopped 20 minutes ago; the machine is still on)")
        elif self.bmc is None:
            t.say(
                "inference mode: the rule chose fencing.driver none, so nodefence fences on the "
                'guards alone and says "no proof" (run with --fencing redfish for power fencing)'
            )
            t.heading(f"{NODE} dies (its kubelet stopped 20 minutes ago)")
        else:
            t.say(
                "power fencing: the rule's fencing is redfish with action reboot; every node has a "
                "simulated BMC at /redfish/v1 (NODEFENCE_BMC_INVENTORY points at them)"
            )
            t.heading(f"{NODE} hangs (its kubelet stopped 20 minutes ago; the machine is still on)")
        await view.control(NODE, "down", {"sinceSeconds": 1200})
        died = time.monotonic()
        down_since = datetime.now(UTC) - timedelta(seconds=1200)
        boot_before = (await view.node(NODE))["status"]["nodeInfo"]["bootID"]

        async def not_ready() -> bool:
            return ready_status(await view.node(NODE)) == "Unknown"

        await t.expect(f"{NODE} is NotReady (Ready=Unknown, unreachable taints)", not_ready)
        if self.bmc is not None:

            async def still_on() -> bool:
                return await self.power_state() == "On"

            await t.expect(f"its BMC still reports {NODE} On: nobody has proven it off", still_on)

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
        if self.bmc is not None:
            proof = [
                r["message"]
                for r in body["decisions"][0]["reasons"]
                if r["guard"] == "power-off" and r["passed"]
            ]
            if not any("reports the machine is Off" in m or "Status: OFF" in m for m in proof):
                t.fail("the fence decision does not carry the BMC's Off as its proof")
                raise StepFailedError("proof")
            t.ok(f"the taint came after the BMC read back Off: {proof[-1]}")
            await self.show_binding(body)

        async def purged() -> bool:
            return not await self.stuck_pods()

        await t.expect(
            f"no pod is left Terminating on {NODE} (purged with grace 0)", purged, within=30
        )
        counted = _purge_counts(body["decisions"][0])
        if counted:
            t.say(counted)

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
        t.say(
            f"{time.monotonic() - died:.1f}s in this timeline from the hang to the StatefulSet "
            "pods Running elsewhere (the 20 minutes of silence are backdated, so the "
            "NotReady and Lease waits are already over when the alert arrives)"
        )

        async def ready() -> bool:
            return ready_status(await view.node(NODE)) == "True"

        if self.bmc is None:
            t.heading(f"{NODE} is repaired and rebooted (Ready again for 10 minutes)")
            await view.control(NODE, "up", {"sinceSeconds": 600, "reboot": True})
        else:
            t.heading(f"nodefence powers {NODE} on again through its BMC (action: reboot)")

            async def powered_on() -> bool:
                return await self.power_state() == "On"

            await t.expect(f"its BMC reports {NODE} On again", powered_on, within=30)

        await t.expect(f"{NODE} is Ready", ready, within=30)
        boot_after = (await view.node(NODE))["status"]["nodeInfo"]["bootID"]
        if boot_after == boot_before:
            t.fail(f"{NODE} came back with the boot ID it had before")
            raise StepFailedError("reboot")
        t.ok(f"{NODE} came back with a new boot ID ({boot_before[:8]}… → {boot_after[:8]}…)")

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
        if not events:
            t.fail("no nodefence Event on the node")
            raise StepFailedError("events")
        described = await self.kubectl_events()
        if described is None:
            # Without kubectl the Events are shown as read from the API; with it, once, as
            # kubectl prints them.
            for event in events:
                t.detail(f"{event['type']:<8} {event['reason']:<16} {event['message']}")
        t.ok("every action is recorded as an Event on the Node")
        if described is not None:
            t.detail(described.rstrip())
            if "NodeFenced" not in described or "NodeUnfenced" not in described:
                t.fail("kubectl describe node does not show nodefence's Events")
                raise StepFailedError("kubectl describe")
            t.ok(f"kubectl describe node {NODE} shows them")


@contextlib.asynccontextmanager
async def _no_front() -> AsyncIterator[None]:
    yield None


def _agent_inventory(path: Path, port: int, sim: Simulation) -> Path:
    """Every node behind fence_redfish with shared parameters and its own system ({node}).
    No entry states an identity: nodefence reads the Redfish system UUID of the very system the
    agent acts on, through the same TLS front and credentials, and binds it to the Node's
    systemUUID (the simulated BMCs report each node's, as real hardware does)."""
    bmcs = bmcs_of(sim)
    parameters = {
        "ip": "127.0.0.1",
        "ipport": str(port),
        "username": bmcs.username,
        "password": bmcs.password.get_secret_value(),
        "ssl_insecure": "1",
        "systems_uri": "/redfish/v1/Systems/{node}",
    }
    nodes = {str(state["name"]): {"driver": "fence-agent"} for state in sim.node_states()}
    data = {"defaults": {"fence-agent": {"agent": AGENT, "parameters": parameters}}}
    path.touch(mode=0o600, exist_ok=True)
    path.write_text(yaml.safe_dump({**data, "nodes": nodes}, sort_keys=True))
    return path


async def run_demo(out: TextIO | None = None, *, fencing: str = "none") -> int:
    timeline = Timeline(out)
    # Expected refusals are shown by the timeline; a raw log line would only interrupt it.
    configure_logging("json", "error")
    sim = Simulation.from_scenario("seed")
    token = secrets.token_urlsafe(24)
    async with running_simulator(sim) as cluster, contextlib.AsyncExitStack() as stack:
        workdir = Path(cluster.kubeconfig).parent
        inventory = None
        bmc: tuple[str, SecretStr] | None = None
        if fencing == "redfish":
            inventory = write_bmc_inventory(workdir / "bmc-inventory.yaml", cluster.url, sim)
            bmcs = bmcs_of(sim)
            bmc = (bmcs.username, bmcs.password)
        front: contextlib.AbstractAsyncContextManager[int | None] = _no_front()
        if fencing == "fence-agent":
            if shutil.which(AGENT, path=AGENT_PATH) is None:
                timeline.fail(INSTALL_AGENT)
                return 2
            bmcs = bmcs_of(sim)
            bmc = (bmcs.username, bmcs.password)
            front = tls_front(int(cluster.url.rsplit(":", 1)[1]))
        port = await stack.enter_async_context(front)
        if port is not None:
            inventory = _agent_inventory(workdir / "bmc-inventory.yaml", port, sim)
        settings = Settings(
            alert_token=SecretStr(token),
            namespace="nodefence",
            identity="nodefence-demo",
            bmc_inventory=inventory,
        )
        fencer = await build_fencer(
            settings, policy=demo_policy(fencing), kubeconfig=str(cluster.kubeconfig)
        )
        async with serving(settings, fencer) as receiver, aiohttp.ClientSession() as session:
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
                bmc=bmc,
                agent=AGENT if fencing == "fence-agent" else "",
            )
            with contextlib.suppress(StepFailedError):
                await story.run()
    return timeline.verdict()


def main(args: argparse.Namespace) -> int:
    return asyncio.run(run_demo(fencing=getattr(args, "fencing", "none")))
