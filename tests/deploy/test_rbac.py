"""RBAC grants exactly the API calls listed in deploy/base/api-calls.yaml: no more, no less."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
import yaml

from nodefence.kube.client import KubeClient

from .conftest import DEPLOY, NAMESPACE, Obj, one, rendered

Grant = tuple[str, ...]

SCOPE_OF_KIND = {"ClusterRole": "cluster", "Role": "namespace"}


def listed_calls() -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = yaml.safe_load((DEPLOY / "base" / "api-calls.yaml").read_text())[
        "calls"
    ]
    return calls


def expand_calls(calls: list[dict[str, Any]]) -> set[Grant]:
    grants: set[Grant] = set()
    for call in calls:
        scope = call["scope"]
        for verb in call["verbs"]:
            if "nonResourceURL" in call:
                grants.add((scope, "url", call["nonResourceURL"], verb))
                continue
            for name in call.get("resourceNames") or ["*"]:
                grants.add((scope, call["group"], call["resource"], verb, name))
    return grants


def expand_rules(role: Obj) -> set[Grant]:
    scope = SCOPE_OF_KIND[role["kind"]]
    grants: set[Grant] = set()
    for rule in role["rules"]:
        for verb in rule["verbs"]:
            for url in rule.get("nonResourceURLs", []):
                grants.add((scope, "url", url, verb))
            for group in rule.get("apiGroups", []):
                for resource in rule.get("resources", []):
                    for name in rule.get("resourceNames") or ["*"]:
                        grants.add((scope, group, resource, verb, name))
    return grants


@pytest.fixture(params=["deployment", "knative"])
def roles(request: pytest.FixtureRequest) -> tuple[Obj, Obj, list[Obj]]:
    objs = rendered(request.param)
    return one(objs, "ClusterRole"), one(objs, "Role"), objs


def test_roles_grant_exactly_the_listed_calls(roles: tuple[Obj, Obj, list[Obj]]) -> None:
    cluster_role, role, _ = roles
    granted = expand_rules(cluster_role) | expand_rules(role)
    listed = expand_calls(listed_calls())
    assert granted - listed == set(), "granted but not listed"
    assert listed - granted == set(), "listed but not granted"


# Each KubeClient method (the only way the service reaches the API) and the calls it makes.
CODE_CALLS: dict[str, set[tuple[str, ...]]] = {
    "version": {("cluster", "url", "/version", "get")},
    "list_nodes": {("cluster", "", "nodes", "list", "*")},
    # The node index behind the cluster-wide counts: a paged list, then a watch.
    "list_node_page": {("cluster", "", "nodes", "list", "*")},
    "watch_nodes": {("cluster", "", "nodes", "watch", "*")},
    "get_node": {("cluster", "", "nodes", "get", "*")},
    "patch_node_json": {("cluster", "", "nodes", "patch", "*")},
    "replace_node": {("cluster", "", "nodes", "update", "*")},
    "list_pods_on_node": {("cluster", "", "pods", "list", "*")},
    "delete_pod": {("cluster", "", "pods", "delete", "*")},
    "patch_pod_json": {("cluster", "", "pods", "patch", "*")},
    # Node heartbeats in kube-node-lease.
    "get_lease": {("cluster", "coordination.k8s.io", "leases", "get", "*")},
    # The pause switch and external fencing's written proofs (nodefence-power.<node>, names
    # that follow the nodes), all in nodefence's namespace.
    "get_configmap": {("namespace", "", "configmaps", "get", "*")},
    # The fence record (and the pause switch) in nodefence's namespace.
    "get_configmap_dated": {
        ("namespace", "", "configmaps", "get", "*"),
        ("namespace", "", "configmaps", "get", "nodefence-fences"),
    },
    # The pause switch, followed by a watch by name.
    "list_configmap_named": {("namespace", "", "configmaps", "list", "nodefence-control")},
    "watch_configmap_named": {("namespace", "", "configmaps", "watch", "nodefence-control")},
    "create_configmap": {("namespace", "", "configmaps", "create", "*")},
    # The fence record; the probe record (each node's last power-state probe).
    "replace_configmap": {
        ("namespace", "", "configmaps", "update", "nodefence-fences"),
        ("namespace", "", "configmaps", "update", "nodefence-fencing-probes"),
    },
    "create_event": {("cluster", "", "events", "create", "*")},
    "patch_event": {("cluster", "", "events", "patch", "*")},
    "list_volume_attachments": {("cluster", "storage.k8s.io", "volumeattachments", "list", "*")},
    "delete_volume_attachment": {("cluster", "storage.k8s.io", "volumeattachments", "delete", "*")},
}


def test_every_client_method_is_accounted_for() -> None:
    """A new API call means a new KubeClient method: it must be mapped here and granted."""
    methods = {
        name
        for name, member in inspect.getmembers(KubeClient, inspect.iscoroutinefunction)
        if not name.startswith("_") and name != "close"
    }
    assert methods == set(CODE_CALLS)


def test_the_roles_grant_exactly_the_calls_the_code_makes() -> None:
    listed = expand_calls(listed_calls())
    from_code = set().union(*CODE_CALLS.values())
    assert listed - from_code == set(), "granted but never called"
    assert from_code - listed == set(), "called but not granted"


def test_an_extra_grant_is_detected(roles: tuple[Obj, Obj, list[Obj]]) -> None:
    cluster_role, role, _ = roles
    widened = {
        **cluster_role,
        "rules": [
            *cluster_role["rules"],
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
        ],
    }
    assert expand_rules(widened) | expand_rules(role) != expand_calls(listed_calls())


def test_no_wildcards_secrets_or_escalation(roles: tuple[Obj, Obj, list[Obj]]) -> None:
    for role in roles[:2]:
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
                assert "*" not in rule.get(field, []), (role["kind"], rule)
            assert "secrets" not in rule.get("resources", [])
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"])


def test_bindings_bind_the_service_account(roles: tuple[Obj, Obj, list[Obj]]) -> None:
    cluster_role, role, objs = roles
    subject = {"kind": "ServiceAccount", "name": "nodefence", "namespace": NAMESPACE}
    crb = one(objs, "ClusterRoleBinding")
    assert crb["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": cluster_role["metadata"]["name"],
    }
    assert crb["subjects"] == [subject]
    rb = one(objs, "RoleBinding")
    assert rb["metadata"]["namespace"] == NAMESPACE == role["metadata"]["namespace"]
    assert rb["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert rb["subjects"] == [subject]
    one(objs, "ServiceAccount", "nodefence")
