"""deploy/admission: the ValidatingAdmissionPolicies on nodefence's own account render, each
is bound, each matches exactly the account the base's RBAC binds, and every shipped overlay and
stack includes them, cluster-scoped, unless components/without-admission-policies takes them
out (tests/realcluster/test_real_admission.py runs them on a real API server)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .conftest import DEPLOY, NAMESPACE, OVERLAYS, find, kustomize, one, rendered

ACCOUNT = f"system:serviceaccount:{NAMESPACE}:nodefence"


def test_every_policy_is_bound_and_matches_nodefence_s_account() -> None:
    objs = kustomize(DEPLOY / "admission")
    policies = find(objs, "ValidatingAdmissionPolicy")
    bindings = find(objs, "ValidatingAdmissionPolicyBinding")
    assert {p["metadata"]["name"] for p in policies} == {
        "nodefence-node-writes",
        "nodefence-pod-deletes",
    }
    assert sorted(b["spec"]["policyName"] for b in bindings) == sorted(
        p["metadata"]["name"] for p in policies
    )
    for binding in bindings:
        assert binding["spec"]["validationActions"] == ["Deny"]
    for policy in policies:
        assert policy["apiVersion"] == "admissionregistration.k8s.io/v1"
        assert policy["spec"]["failurePolicy"] == "Fail"
        [condition] = policy["spec"]["matchConditions"]
        assert condition["expression"] == f"request.userInfo.username == '{ACCOUNT}'"
    subjects = [
        s for o in find(rendered("deployment"), "ClusterRoleBinding") for s in o["subjects"]
    ]
    assert {f"system:serviceaccount:{s['namespace']}:{s['name']}" for s in subjects} == {ACCOUNT}


def test_the_policies_cover_the_writes_the_grants_allow() -> None:
    """Every write verb the base grants on Nodes and pods is one a policy checks."""
    checked = {
        (resource, operation)
        for policy in find(kustomize(DEPLOY / "admission"), "ValidatingAdmissionPolicy")
        for rule in policy["spec"]["matchConstraints"]["resourceRules"]
        for resource in rule["resources"]
        for operation in rule["operations"]
    }
    assert {("nodes", "UPDATE"), ("pods", "DELETE"), ("pods", "UPDATE")} <= checked


ADMISSION_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
STACKS = sorted(p.name for p in (DEPLOY / "stacks").iterdir() if p.is_dir())


def admission_objects(objs: list[dict[str, object]]) -> list[dict[str, object]]:
    return [o for o in objs if o["kind"] in ADMISSION_KINDS]


@pytest.mark.parametrize(
    "path", [f"overlays/{o}" for o in OVERLAYS] + [f"stacks/{s}" for s in STACKS]
)
def test_every_shipped_install_includes_the_policies_cluster_scoped(path: str) -> None:
    objs = kustomize(DEPLOY / path)
    shipped = kustomize(DEPLOY / "admission")
    included = admission_objects(objs)
    assert sorted((o["kind"], o["metadata"]["name"]) for o in included) == sorted(
        (o["kind"], o["metadata"]["name"]) for o in shipped
    )
    for obj in included:
        # Kustomize does not know these kinds are cluster-scoped; the overlays take away the
        # namespace their namespace transformer gives them.
        assert "namespace" not in obj["metadata"], obj["metadata"]
        assert obj["spec"] == one(shipped, obj["kind"], obj["metadata"]["name"])["spec"]


def test_the_switch_for_older_clusters_takes_out_the_policies_and_nothing_else(
    tmp_path: Path,
) -> None:
    up = Path(os.path.relpath(DEPLOY, tmp_path))
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\n"
        "kind: Kustomization\n"
        f"resources:\n  - {up / 'overlays' / 'deployment'}\n"
        f"components:\n  - {up / 'components' / 'without-admission-policies'}\n"
    )
    without = kustomize(tmp_path)
    assert admission_objects(without) == []
    kept = [o for o in rendered("deployment") if o["kind"] not in ADMISSION_KINDS]
    assert without == kept


def test_the_pod_policy_reads_the_pod_s_node_from_its_parameters() -> None:
    """Every Node is a parameter of the pod policy (a pod request carries no Node); a binding
    without parameters would leave every expression about the Node unevaluated."""
    objs = kustomize(DEPLOY / "admission")
    policy = one(objs, "ValidatingAdmissionPolicy", "nodefence-pod-deletes")
    assert policy["spec"]["paramKind"] == {"apiVersion": "v1", "kind": "Node"}
    binding = one(objs, "ValidatingAdmissionPolicyBinding", "nodefence-pod-deletes")
    assert binding["spec"]["paramRef"] == {"selector": {}, "parameterNotFoundAction": "Deny"}
    node = one(objs, "ValidatingAdmissionPolicy", "nodefence-node-writes")
    assert "paramKind" not in node["spec"]
