"""RBAC grants exactly the API calls listed in deploy/base/api-calls.yaml: no more, no less.

The base grants the calls of the base's features; each optional feature's component adds
exactly the calls listed for it (``component:``), and nothing else grants them."""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodefence.kube.client import KubeClient

from .conftest import DEPLOY, NAMESPACE, Obj, find, kustomize, one, rendered

Grant = tuple[str, ...]
ACCOUNT = {"kind": "ServiceAccount", "name": "nodefence", "namespace": NAMESPACE}


def listed_calls() -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = yaml.safe_load((DEPLOY / "base" / "api-calls.yaml").read_text())[
        "calls"
    ]
    return calls


def call_scope(call: dict[str, Any]) -> str:
    """cluster; namespace (nodefence's own); namespace:NAME (a fixed namespace)."""
    scope: str = call["scope"]
    return f"namespace:{call['namespace']}" if "namespace" in call else scope


def expand_calls(calls: list[dict[str, Any]], components: set[str] | None = None) -> set[Grant]:
    """The grants the calls need: the base's, and those of ``components`` (None: every one)."""
    grants: set[Grant] = set()
    for call in calls:
        if "component" in call and components is not None and call["component"] not in components:
            continue
        scope = call_scope(call)
        for verb in call["verbs"]:
            if "nonResourceURL" in call:
                grants.add((scope, "url", call["nonResourceURL"], verb))
                continue
            for name in call.get("resourceNames") or ["*"]:
                grants.add((scope, call["group"], call["resource"], verb, name))
    return grants


def role_scope(role: Obj) -> str:
    if role["kind"] == "ClusterRole":
        return "cluster"
    namespace = role["metadata"]["namespace"]
    return "namespace" if namespace == NAMESPACE else f"namespace:{namespace}"


def expand_rules(role: Obj) -> set[Grant]:
    scope = role_scope(role)
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


def granted(objs: list[Obj]) -> set[Grant]:
    grants: set[Grant] = set()
    for role in find(objs, "ClusterRole") + find(objs, "Role"):
        grants |= expand_rules(role)
    return grants


@pytest.fixture(params=["deployment", "knative"])
def roles(request: pytest.FixtureRequest) -> tuple[Obj, list[Obj], list[Obj]]:
    objs = rendered(request.param)
    return one(objs, "ClusterRole"), find(objs, "Role"), objs


def test_roles_grant_exactly_the_base_calls(roles: tuple[Obj, list[Obj], list[Obj]]) -> None:
    _, _, objs = roles
    listed = expand_calls(listed_calls(), components=set())
    assert granted(objs) - listed == set(), "granted but not listed"
    assert listed - granted(objs) == set(), "listed but not granted"


FEATURE_COMPONENTS = sorted({c["component"] for c in listed_calls() if "component" in c})


def test_the_optional_calls_are_off_in_the_base() -> None:
    assert FEATURE_COMPONENTS == ["finalizer-stripping", "volume-attachment-cleanup"]
    base = expand_calls(listed_calls(), components=set())
    assert ("cluster", "", "pods", "patch", "*") not in base
    assert ("cluster", "storage.k8s.io", "volumeattachments", "delete", "*") not in base


def with_components(tmp_path: Path, overlay: str, components: list[str]) -> list[Obj]:
    """An operator's overlay: a shipped overlay and some of the shipped components."""
    up = Path(os.path.relpath(DEPLOY, tmp_path))
    lines = ["apiVersion: kustomize.config.k8s.io/v1beta1", "kind: Kustomization"]
    lines += ["resources:", f"  - {up / 'overlays' / overlay}", "components:"]
    lines += [f"  - {up / 'components' / c}" for c in components]
    (tmp_path / "kustomization.yaml").write_text("\n".join(lines) + "\n")
    return kustomize(tmp_path)


@pytest.mark.parametrize("overlay", ["deployment", "knative"])
@pytest.mark.parametrize(
    "components", [[c] for c in FEATURE_COMPONENTS] + [FEATURE_COMPONENTS], ids=str
)
def test_each_feature_component_adds_exactly_its_calls(
    tmp_path: Path, overlay: str, components: list[str]
) -> None:
    objs = with_components(tmp_path, overlay, components)
    listed = expand_calls(listed_calls(), components=set(components))
    assert granted(objs) - listed == set(), "granted but not listed"
    assert listed - granted(objs) == set(), "listed but not granted"
    assert len(find(objs, "ClusterRole")) == 1


def test_namespaced_grants_are_roles_in_their_namespace(
    roles: tuple[Obj, list[Obj], list[Obj]],
) -> None:
    """Node Events and node Leases: a Role where they live, no cluster-wide rule."""
    cluster_role, namespaced, _ = roles
    where = {r["metadata"]["name"]: r["metadata"]["namespace"] for r in namespaced}
    assert where == {
        "nodefence": NAMESPACE,
        "nodefence-node-events": "default",
        "nodefence-node-leases": "kube-node-lease",
    }
    resources = {res for rule in cluster_role["rules"] for res in rule.get("resources", [])}
    assert not {"events", "leases", "configmaps"} & resources
    for call in listed_calls():
        if call["scope"] == "namespace" and "namespace" in call:
            assert call["namespace"] in where.values(), call


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
    # Where a fenced node's StatefulSet and Deployment pods run again (the recovery measure):
    # the namespaces are whichever its pods were in.
    "list_pods_in": {("cluster", "", "pods", "list", "*")},
    "delete_pod": {("cluster", "", "pods", "delete", "*")},
    "patch_pod_json": {("cluster", "", "pods", "patch", "*")},
    # Node heartbeats in kube-node-lease.
    "get_lease": {("namespace:kube-node-lease", "coordination.k8s.io", "leases", "get", "*")},
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
    # The fence record; the probe record (each node's last power-state probe); Alertmanager's
    # silences as last read.
    "replace_configmap": {
        ("namespace", "", "configmaps", "update", "nodefence-fences"),
        ("namespace", "", "configmaps", "update", "nodefence-fencing-probes"),
        ("namespace", "", "configmaps", "update", "nodefence-silences"),
    },
    # Events on Nodes (in default) and on nodefence itself (in its namespace).
    "create_event": {
        ("namespace:default", "", "events", "create", "*"),
        ("namespace", "", "events", "create", "*"),
    },
    # A repeat counted onto a Node's Event.
    "patch_event": {("namespace:default", "", "events", "patch", "*")},
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


def test_an_extra_grant_is_detected(roles: tuple[Obj, list[Obj], list[Obj]]) -> None:
    cluster_role, namespaced, objs = roles
    widened = {
        **cluster_role,
        "rules": [
            *cluster_role["rules"],
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
        ],
    }
    others = [o for o in objs if o is not cluster_role]
    base = expand_calls(listed_calls(), components=set())
    assert granted([*others, widened]) != base
    # A Role moved to another namespace is another grant.
    moved = [{**r, "metadata": {**r["metadata"], "namespace": NAMESPACE}} for r in namespaced]
    assert granted([cluster_role, *moved]) != base


def test_no_wildcards_secrets_or_escalation(roles: tuple[Obj, list[Obj], list[Obj]]) -> None:
    for role in [roles[0], *roles[1]]:
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
                assert "*" not in rule.get(field, []), (role["kind"], rule)
            assert "secrets" not in rule.get("resources", [])
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"])


def test_bindings_bind_the_service_account(roles: tuple[Obj, list[Obj], list[Obj]]) -> None:
    cluster_role, namespaced, objs = roles
    crb = one(objs, "ClusterRoleBinding")
    assert crb["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": cluster_role["metadata"]["name"],
    }
    assert crb["subjects"] == [ACCOUNT]
    bindings = find(objs, "RoleBinding")
    assert len(bindings) == len(namespaced)
    for role in namespaced:
        [rb] = [
            b
            for b in bindings
            if b["metadata"]["namespace"] == role["metadata"]["namespace"]
            and b["roleRef"]["name"] == role["metadata"]["name"]
        ]
        assert rb["roleRef"]["kind"] == "Role"
        assert rb["roleRef"]["apiGroup"] == "rbac.authorization.k8s.io"
        assert rb["subjects"] == [ACCOUNT]
    one(objs, "ServiceAccount", "nodefence")
