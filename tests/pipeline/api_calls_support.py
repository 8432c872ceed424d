"""Which RBAC grant a request on the wire needs, judged against the static list in
deploy/base/api-calls.yaml: shared by the tests that check real traffic against the roles, so
none imports another test module."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qs

import yaml

from nodefence_sim.faults import RequestRecord

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
        # A namespaced grant is nodefence's own namespace's, or the fixed one it names (Node
        # Events in default, node Leases in kube-node-lease).
        if call["scope"] == "namespace" and namespace != call.get("namespace", "nodefence"):
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
