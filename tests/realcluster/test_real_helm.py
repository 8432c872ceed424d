"""The Helm chart installed by the real Helm v4 on the real control plane: ``helm install --wait``
returns only once the Deployment's replicas are available (kwok runs them on its nodes and marks
them Running and Ready), the restricted Pod Security profile admits the pods, the scheduler
places the two replicas on two nodes at the chart's own priority, the ServiceAccount may make
exactly nodefence's calls, a new policy given to ``helm upgrade`` replaces the pods, and
``helm uninstall`` takes every object away again, the cluster-scoped ones included.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from bench.processes import eventually
from kubernetes import client
from kubernetes.client.rest import ApiException
from tests.deploy.test_helm import CHART, helm, nodefence_commands

from .conftest import RealBackend

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(600)]

NAMESPACE = "nodefence-helm"
RELEASE = "helm-test"
NAME = f"{RELEASE}-nodefence"
ACCOUNT = f"system:serviceaccount:{NAMESPACE}:{NAME}"


def may(backend: RealBackend, verb: str, resource: str, **attrs: Any) -> bool:
    """Whether nodefence's ServiceAccount may, by the API server's own authorizer."""
    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=ACCOUNT,
            groups=["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}"],
            resource_attributes=client.V1ResourceAttributes(verb=verb, resource=resource, **attrs),
        )
    )
    answer = client.AuthorizationV1Api(backend.api).create_subject_access_review(review)
    allowed: bool = answer.status.allowed
    return allowed


# The receivers tolerate a dead node's NoExecute taints for 30 s, and no other taint.
TOLERATED = {"node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"}


def schedulable(node: client.V1Node) -> bool:
    """Whether the scheduler counts the node as a domain of the chart's spread (nodeTaintsPolicy
    Honor: a node whose taints the pod does not tolerate is none)."""
    ready = {c.type: c.status for c in node.status.conditions or []}.get("Ready") == "True"
    blocking = [
        t
        for t in node.spec.taints or []
        if t.effect in {"NoSchedule", "NoExecute"}
        and not (t.effect == "NoExecute" and t.key in TOLERATED)
    ]
    return ready and not node.spec.unschedulable and not blocking


def placement(core: client.CoreV1Api, namespace: str) -> str:
    """What a failed ``--wait`` saw: whether each node can take a replica and its taints, the
    release's pods and where they are, and the namespace's Events (the scheduler's reasons)."""
    lines = [
        f"node {n.metadata.name}: Ready={schedulable(n)}"
        f" unschedulable={bool(n.spec.unschedulable)}"
        f" taints={[(t.key, t.effect) for t in n.spec.taints or []]}"
        for n in core.list_node().items
    ]
    lines += [
        f"pod {p.metadata.name}: {p.status.phase} on {p.spec.node_name}"
        f" deleting={p.metadata.deletion_timestamp is not None}"
        f" {[(c.type, c.status, c.reason) for c in p.status.conditions or []]}"
        for p in core.list_namespaced_pod(namespace).items
    ]
    lines += [
        f"event {e.involved_object.name}: {e.reason} {e.message}"
        for e in core.list_namespaced_event(namespace).items
    ]
    return "\n".join(lines)


def absent(read: Any, *args: str) -> bool:
    try:
        read(*args)
    except ApiException as e:
        if e.status == 404:
            return True
        raise
    return False


def test_helm_install_waits_for_the_receivers_and_uninstall_cleans_up(
    real_backend: RealBackend, tmp_path: Path
) -> None:
    core = real_backend.core
    apps = client.AppsV1Api(real_backend.api)
    rbac = client.RbacAuthorizationV1Api(real_backend.api)
    scheduling = client.SchedulingV1Api(real_backend.api)
    admission = client.AdmissionregistrationV1Api(real_backend.api)
    kubeconfig = str(real_backend.kubeconfig)
    home = tmp_path / "helm"
    # Earlier tests of the session bring their nodes back: wait until every node whose kubelet
    # runs again can take a replica, so that the scheduler does not place one on a node that is
    # still coming back (the test is of Helm's wait, not of a node's recovery).
    try:
        eventually(
            lambda: all(schedulable(n) for n in core.list_node().items),
            within=180,
            what="every node Ready and untainted",
        )
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n{placement(core, NAMESPACE)}") from exc

    # The namespace as deploy/base makes it (restricted Pod Security, enforced by the real
    # admission plugin) and the existing Secret the chart reads the token from.
    core.create_namespace(
        client.V1Namespace(
            metadata=client.V1ObjectMeta(
                name=NAMESPACE,
                labels={
                    "pod-security.kubernetes.io/enforce": "restricted",
                    "pod-security.kubernetes.io/enforce-version": "latest",
                },
            )
        )
    )
    try:
        core.create_namespaced_secret(
            NAMESPACE,
            client.V1Secret(
                metadata=client.V1ObjectMeta(name="nodefence-secrets"),
                string_data={"NODEFENCE_ALERT_TOKEN": "helm-install-test-token"},
            ),
        )
        install = helm(
            "install",
            RELEASE,
            str(CHART),
            "--namespace",
            NAMESPACE,
            "--wait",
            "--timeout",
            "5m",
            home=home,
            timeout=420,
            check=False,
            KUBECONFIG=kubeconfig,
        )
        assert install.returncode == 0, f"{install.stderr}\n{placement(core, NAMESPACE)}"
        assert "STATUS: deployed" in install.stdout, install.stdout

        status = json.loads(
            helm(
                "status",
                RELEASE,
                "--namespace",
                NAMESPACE,
                "-o",
                "json",
                home=home,
                KUBECONFIG=kubeconfig,
            ).stdout
        )
        assert status["info"]["status"] == "deployed"

        # --wait returned: the replicas are available now, not eventually.
        deployment = apps.read_namespaced_deployment(NAME, NAMESPACE)
        assert deployment.status.available_replicas == 2
        pods = core.list_namespaced_pod(
            NAMESPACE, label_selector=f"app.kubernetes.io/instance={RELEASE}"
        ).items
        running = [p for p in pods if p.status.phase == "Running"]
        assert len(running) == 2, [(p.metadata.name, p.status.phase) for p in pods]
        # Two nodes, as the hard spread asks, wherever two nodes can take a replica (earlier
        # tests of the session may have left a node fenced or down).
        eligible = [n.metadata.name for n in core.list_node().items if schedulable(n)]
        assert len({p.spec.node_name for p in running}) == min(2, len(eligible)), eligible
        for pod in running:
            assert pod.spec.priority_class_name == f"{NAME}-critical"
            assert pod.spec.priority == 1_000_000_000
            ready = {c.type: c.status for c in pod.status.conditions}
            assert ready["Ready"] == "True", pod.metadata.name
            assert pod.spec.containers[0].env_from[0].secret_ref.name == "nodefence-secrets"

        # A new policy rolls the receivers (the checksum on the pod template): helm upgrade
        # --wait returns with both replicas replaced and serving the new ConfigMap.
        before = {p.metadata.name for p in running}
        policy = tmp_path / "policy.yaml"
        policy.write_text("rules:\n  - name: default\n    approval: slack\n")
        upgrade = helm(
            "upgrade",
            RELEASE,
            str(CHART),
            "--namespace",
            NAMESPACE,
            "--reuse-values",
            "--set-file",
            f"policy={policy}",
            "--wait",
            "--timeout",
            "5m",
            home=home,
            timeout=420,
            check=False,
            KUBECONFIG=kubeconfig,
        )
        assert upgrade.returncode == 0, f"{upgrade.stderr}\n{placement(core, NAMESPACE)}"
        configmap = core.read_namespaced_config_map(f"{NAME}-policy", NAMESPACE)
        assert configmap.data["policy.yaml"] == policy.read_text()
        rolled = apps.read_namespaced_deployment(NAME, NAMESPACE).status
        assert rolled.updated_replicas == rolled.available_replicas == 2
        serving = [
            p
            for p in core.list_namespaced_pod(
                NAMESPACE, label_selector=f"app.kubernetes.io/instance={RELEASE}"
            ).items
            if p.status.phase == "Running" and p.metadata.deletion_timestamp is None
        ]
        assert {p.metadata.name for p in serving}.isdisjoint(before)
        assert len(serving) == 2

        # The admission policies the API server enforces on this release's account.
        for policy in ("node-writes", "pod-deletes"):
            found = admission.read_validating_admission_policy(f"{NAME}-{policy}")
            (condition,) = found.spec.match_conditions
            assert ACCOUNT in condition.expression

        # The API server's authorizer grants the account exactly what nodefence does.
        assert may(real_backend, "update", "nodes")
        assert may(real_backend, "delete", "pods", namespace="openstack")
        assert may(
            real_backend, "update", "configmaps", namespace=NAMESPACE, name="nodefence-fences"
        )
        assert may(
            real_backend, "get", "leases", group="coordination.k8s.io", namespace="kube-node-lease"
        )
        assert may(real_backend, "create", "events", namespace="default")
        assert not may(
            real_backend, "get", "leases", group="coordination.k8s.io", namespace="default"
        )
        # The optional features' grants are off with the features.
        assert not may(real_backend, "patch", "pods", namespace="openstack")
        assert not may(real_backend, "delete", "volumeattachments", group="storage.k8s.io")
        assert not may(real_backend, "delete", "nodes")
        assert not may(real_backend, "get", "secrets", namespace=NAMESPACE)
        assert not may(
            real_backend, "update", "configmaps", namespace=NAMESPACE, name="someone-elses"
        )
        assert not may(real_backend, "update", "configmaps", namespace="default", name="x")

        helm(
            "uninstall",
            RELEASE,
            "--namespace",
            NAMESPACE,
            "--wait",
            "--timeout",
            "3m",
            home=home,
            timeout=240,
            KUBECONFIG=kubeconfig,
        )
        for read, args in (
            (rbac.read_cluster_role, (NAME,)),
            (rbac.read_cluster_role_binding, (NAME,)),
            (scheduling.read_priority_class, (f"{NAME}-critical",)),
            (apps.read_namespaced_deployment, (NAME, NAMESPACE)),
            (core.read_namespaced_config_map, (f"{NAME}-policy", NAMESPACE)),
            (admission.read_validating_admission_policy, (f"{NAME}-node-writes",)),
        ):
            assert absent(read, *args), args
        eventually(
            lambda: (
                not core.list_namespaced_pod(
                    NAMESPACE, label_selector=f"app.kubernetes.io/instance={RELEASE}"
                ).items
            ),
            within=120,
            what="the receivers' pods gone",
        )
    finally:
        core.delete_namespace(NAMESPACE)


SEED_NAMESPACE = "nodefence"


def test_the_chart_installs_on_the_seed_cluster_and_its_notes_work(
    real_backend: RealBackend, tmp_path: Path
) -> None:
    """The chart with its defaults (release nodefence, namespace nodefence, the admission
    policies on) on the seed cluster, where nodefence's namespace already holds the policy
    ConfigMap deploy/base leaves there: Helm adopts nothing it does not own and collides with
    nothing; the NOTES' own commands run against the cluster as printed; uninstall leaves the
    seed's ConfigMap as it was."""
    core = real_backend.core
    admission = client.AdmissionregistrationV1Api(real_backend.api)
    kubeconfig = str(real_backend.kubeconfig)
    home = tmp_path / "helm"
    seeded = [
        c
        for c in core.list_namespaced_config_map(SEED_NAMESPACE).items
        if c.metadata.name.startswith("nodefence-policy")
    ]
    assert seeded, "the seed scenario holds nodefence's policy ConfigMap"
    core.create_namespaced_secret(
        SEED_NAMESPACE,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name="nodefence-secrets"),
            string_data={"NODEFENCE_ALERT_TOKEN": "helm-seed-test-token"},
        ),
    )
    installed = False
    try:
        install = helm(
            "install",
            "nodefence",
            str(CHART),
            "--namespace",
            SEED_NAMESPACE,
            home=home,
            timeout=300,
            check=False,
            KUBECONFIG=kubeconfig,
        )
        assert install.returncode == 0, install.stderr
        installed = True
        assert "STATUS: deployed" in install.stdout, install.stdout
        chart_policy = core.read_namespaced_config_map("nodefence-policy", SEED_NAMESPACE)
        assert chart_policy.metadata.labels["app.kubernetes.io/managed-by"] == "Helm"
        for policy in ("nodefence-node-writes", "nodefence-pod-deletes"):
            found = admission.read_validating_admission_policy(policy)
            (condition,) = found.spec.match_conditions
            assert "system:serviceaccount:nodefence:nodefence" in condition.expression

        notes = install.stdout.split("NOTES:", 1)[1]
        status = next(c for c in nodefence_commands(notes) if c[0] == "status")
        done = subprocess.run(
            [sys.executable, "-m", "nodefence", *status, "-o", "json"],
            env={**os.environ, "KUBECONFIG": kubeconfig},
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert done.returncode == 0, (status, done.stdout, done.stderr)
        assert "fenced" in json.loads(done.stdout), done.stdout
    finally:
        if installed:
            helm(
                "uninstall",
                "nodefence",
                "--namespace",
                SEED_NAMESPACE,
                "--wait",
                "--timeout",
                "3m",
                home=home,
                timeout=240,
                KUBECONFIG=kubeconfig,
            )
        core.delete_namespaced_secret("nodefence-secrets", SEED_NAMESPACE)
    after = [
        c
        for c in core.list_namespaced_config_map(SEED_NAMESPACE).items
        if c.metadata.name.startswith("nodefence-policy")
    ]
    assert [(c.metadata.name, c.data) for c in after] == [(c.metadata.name, c.data) for c in seeded]
    assert absent(admission.read_validating_admission_policy, "nodefence-node-writes")
