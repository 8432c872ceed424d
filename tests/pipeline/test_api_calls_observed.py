"""Every request the service really sends during the whole story is one the RBAC roles grant:
the static list in deploy/base/api-calls.yaml is checked against the wire."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qs

import yaml

from nodefence.demo.payloads import node_alert, webhook
from nodefence_sim.faults import RequestRecord
from nodefence_sim.testing import SimulatorHandle

from .harness import eventually, inference, start_receiver, terminating_on

CALLS = Path(__file__).parents[2] / "deploy" / "base" / "api-calls.yaml"
PATH = re.compile(
    r"^/(?:api/v1|apis/(?P<group>[^/]+)/[^/]+)"
    r"(?:/namespaces/(?P<namespace>[^/]+))?/(?P<resource>[^/]+)(?:/(?P<name>[^/]+))?$"
)


def granted(method_verb: str, group: str, resource: str, namespace: str | None, name: str) -> bool:
    for call in yaml.safe_load(CALLS.read_text())["calls"]:
        if call.get("group") != group or call.get("resource") != resource:
            continue
        if method_verb not in call["verbs"]:
            continue
        if call["scope"] == "namespace" and namespace != "nodefence":
            continue
        names = call.get("resourceNames")
        if names and name not in names:
            continue
        return True
    return False


def named(request: RequestRecord) -> str:
    """The object name RBAC authorizes the request for: the path's, or for a list or watch the
    field selector metadata.name=NAME (how a Role grants them for one name)."""
    match = PATH.match(request.path)
    assert match, request.path
    if match.group("name"):
        return match.group("name")
    selector = (parse_qs(request.query).get("fieldSelector") or [""])[0]
    prefix = "metadata.name="
    return selector[len(prefix) :] if selector.startswith(prefix) else ""


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
