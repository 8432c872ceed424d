"""Every request the service really sends during the whole story is one the RBAC roles grant:
the static list in deploy/base/api-calls.yaml is checked against the wire."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.seeded_cluster import eventually, inference, start_receiver, terminating_on

from nodefence_sim.demo.payloads import node_alert, webhook
from nodefence_sim.testing import SimulatorHandle

from .api_calls_support import PATH, granted, named


async def test_every_request_of_the_story_is_granted(cluster: SimulatorHandle) -> None:
    node = "control02"
    start = datetime.now(UTC) - timedelta(minutes=20)
    cluster.sim.node_down(node, since_seconds=1200)
    policy = inference({"rules": [{"name": "all", "volume_attachment_cleanup": True}]})
    async with start_receiver(cluster, policy=policy) as receiver:
        cursor = cluster.faults.cursor
        await receiver.alert(webhook([node_alert(node, starts_at=start)]))
        await eventually(lambda: not terminating_on(cluster, node))
        await receiver.post("/reconcile", {})
        cluster.sim.node_up(node, since_seconds=600, reboot=True)
        await receiver.alert(
            webhook([node_alert(node, status="resolved", ends_at=datetime.now(UTC))])
        )
        requests = cluster.faults.requests(cursor)
    assert requests
    seen = set()
    for request in requests:
        if request.path.rstrip("/") == "/version":
            seen.add("version")
            continue
        match = PATH.match(request.path)
        assert match, request.path
        group = match.group("group") or ""
        resource = match.group("resource")
        seen.add(f"{request.verb} {resource}")
        assert granted(request.verb, group, resource, match.group("namespace"), named(request)), (
            f"{request.method} {request.path} ({request.verb}) is not granted by the roles"
        )
    for essential in ("update nodes", "update configmaps", "delete pods", "create events"):
        assert essential in seen, sorted(seen)
