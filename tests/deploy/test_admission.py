"""deploy/admission: the ValidatingAdmissionPolicies on nodefence's own account render, each
is bound, and each matches exactly the account the base's RBAC binds (tests/realcluster/
test_real_admission.py runs them on a real API server)."""

from __future__ import annotations

from .conftest import DEPLOY, NAMESPACE, find, kustomize, rendered

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
