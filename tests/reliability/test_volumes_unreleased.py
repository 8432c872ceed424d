"""A fence whose volumes stay attached is a loud result: on the seed cluster (Kubernetes 1.24.8
without the NodeOutOfServiceVolumeDetach gate) with volume_attachment_cleanup off, the
decision, the Warning Event on the Node and the receiver's metrics name the VolumeAttachments
that stay, and a fence is still counted as a fence, never as a refusal."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from tests.seeded_cluster import node_events

from nodefence_sim.resources import VOLUME_ATTACHMENTS
from nodefence_sim.testing import SimulatorHandle

from .serving import Serving, holds, serving
from .support import firing, kill_node, until

NODE = "control02"
UNRELEASED = f"nodefence_volumes_unreleased{{node={NODE}}}"


def attached_to(cluster: SimulatorHandle, name: str) -> list[str]:
    return sorted(
        va["metadata"]["name"]
        for va in cluster.sim.store.items(VOLUME_ATTACHMENTS)
        if va["spec"]["nodeName"] == name and (va.get("status") or {}).get("attached")
    )


async def gauge(receiver: Serving) -> float | None:
    return (await receiver.metrics()).get(UNRELEASED)


async def test_volumes_left_attached_are_named_by_decision_event_and_metric(
    cluster: SimulatorHandle,
) -> None:
    await kill_node(cluster, NODE)
    stuck = attached_to(cluster, NODE)
    assert len(stuck) == 2, stuck
    async with serving(cluster) as receiver:
        [decision] = await receiver.alert(firing(NODE))

        async def published() -> bool:
            return await gauge(receiver) == len(stuck)

        await until(published, within=60)
        metrics = await receiver.metrics()
    assert decision["verdict"] == "fence", decision
    [volumes] = [r for r in decision["reasons"] if r["guard"] == "volumes"]
    assert volumes["passed"] is False
    assert decision["summary"] == volumes["message"]
    assert volumes["message"].startswith("VOLUMES NOT RELEASED: 2 VolumeAttachment(s)")
    for name in stuck:
        assert name in volumes["message"]
    assert f"kubectl delete volumeattachment {' '.join(stuck)}" in volumes["message"]

    [event] = [e for e in node_events(cluster, NODE) if e["reason"] == "NodeFenced"]
    assert event["type"] == "Warning"
    assert "VOLUMES NOT RELEASED" in event["message"]
    for name in stuck:
        assert name in event["message"]
    # The verdict and its proof come first, so they survive the API server's 1,024-character
    # cut of a message; the volumes follow (and the decision's summary names them).
    assert event["message"].index("all guards passed") < event["message"].index(
        "VOLUMES NOT RELEASED"
    )

    assert attached_to(cluster, NODE) == stuck, "the simulator detached them after all"
    assert metrics["nodefence_decisions_total{guard=ok,verdict=fence}"] == 1
    assert not [k for k in metrics if k.startswith("nodefence_refusals_total") and metrics[k]]


async def test_volumes_released_by_cleanup_leave_no_warning(cluster: SimulatorHandle) -> None:
    await kill_node(cluster, NODE)
    stuck = attached_to(cluster, NODE)
    policy: dict[str, Any] = {
        "rules": [
            {"name": "default", "healthy_delay_seconds": 0, "volume_attachment_cleanup": True}
        ]
    }
    async with serving(cluster, policy=policy) as receiver:
        [decision] = await receiver.alert(firing(NODE))
        await holds(lambda: attached_to(cluster, NODE) == [])
        await until(receiver.passed, within=60)

        async def cleared() -> bool:
            return await gauge(receiver) is None

        await until(cleared, within=60)
    assert decision["verdict"] == "fence", decision
    messages = [e["message"] for e in node_events(cluster, NODE)]
    assert not [m for m in messages if "VOLUMES NOT RELEASED" in m], messages
    deleted = [
        r
        for r in cluster.faults.requests(0)
        if r.method == "DELETE" and "/volumeattachments/" in r.path and r.status == 200
    ]
    assert sorted(r.path.rsplit("/", 1)[1] for r in deleted) == stuck


async def test_a_receiver_without_a_loop_of_its_own_exports_them_too(
    cluster: SimulatorHandle,
) -> None:
    """A Knative receiver runs no reconcile pass (the CronJob does); its background refresh
    publishes the gauge from the cluster all the same, also for a fence another replica made."""
    await kill_node(cluster, NODE)
    async with serving(cluster, interval=3600) as fencer:
        [decision] = await fencer.alert(firing(NODE))
    assert decision["verdict"] == "fence", decision
    async with serving(cluster, interval=0, identity="replica-k") as receiver:
        async with receiver.http.get(receiver.url + "/readyz") as response:
            assert response.status == 200

        async def published() -> bool:
            return await gauge(receiver) == len(attached_to(cluster, NODE)) == 2

        await until(published, within=60)


async def nodefence(cluster: SimulatorHandle, *args: str) -> str:
    """The command line against the simulator, without blocking the loop that serves it."""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(cluster.kubeconfig.parent),
        "KUBECONFIG": str(cluster.kubeconfig),
        "NODEFENCE_NAMESPACE": "nodefence",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "nodefence",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def test_status_names_the_volumes_a_fence_left_attached(cluster: SimulatorHandle) -> None:
    await kill_node(cluster, NODE)
    stuck = attached_to(cluster, NODE)
    async with serving(cluster, interval=3600) as receiver:
        [decision] = await receiver.alert(firing(NODE))
    assert decision["verdict"] == "fence", decision
    report = json.loads(await nodefence(cluster, "status", "-o", "json"))
    [fenced] = [f for f in report["fenced"] if f["node"] == NODE]
    assert [va["name"] for va in fenced["volumesAttached"]] == stuck
    text = await nodefence(cluster, "status")
    assert "VOLUMES NOT RELEASED" in text
    for name in stuck:
        assert name in text
