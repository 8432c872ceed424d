"""deploy/admission on a real API server: with the shipped ValidatingAdmissionPolicies and
bindings in force, and nodefence running with its own ServiceAccount's token (granted exactly
the shipped ClusterRole and Roles), a fence still happens end to end (power-off proof, taint,
purge of the stuck pod on the tainted node, unfence on resolve), while the same token is
refused what the policies forbid: a label outside nodefence.io/, spec.unschedulable, another
taint, the exclusion label, and the delete of a pod that is not Terminating.

Everything the test creates (policies, bindings, the account, its grants, a probe pod) is
deleted at the end, so the other tests of the session see the cluster as before.
"""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from bench.processes import Processes, eventually
from kubernetes import client, config
from tests.deploy.conftest import DEPLOY, kustomize
from tests.e2e.harness import Nodefence, Simulator, start_nodefence

from .conftest import RealBackend
from .safety_support import forget_mirror
from .test_seed_story import NOT_READY_WITHIN, POLICY, STEP_WITHIN, oos_taints, post_alert

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(900)]

NAMESPACE = "nodefence"
ACCOUNT = "nodefence"
APP_NAMESPACE = "openstack"
PROBE_POD = "nodefence-admission-probe"
RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}


def kubectl(backend: RealBackend, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(backend.kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
    return done.stdout


def account_kubeconfig(backend: RealBackend, token: str, target: Path) -> Path:
    """The backend's kubeconfig with the account's token as its only credential."""
    kubeconfig = yaml.safe_load(backend.kubeconfig.read_text())
    for user in kubeconfig["users"]:
        user["user"] = {"token": token}
    target.write_text(yaml.safe_dump(kubeconfig))
    return target


def refusal(call: Any) -> client.ApiException:
    with pytest.raises(client.ApiException) as refused:
        call()
    return refused.value


@pytest.fixture
def installed(real_backend: RealBackend, tmp_path: Path) -> Iterator[Path]:
    """The shipped grants for nodefence's account and the shipped admission policies, applied
    with the admin's kubeconfig; yields a kubeconfig holding the account's own token."""
    core = real_backend.core
    existing = {n.metadata.name for n in core.list_namespace().items}
    created_namespace = NAMESPACE not in existing
    if created_namespace:
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
    grants = [o for o in kustomize(DEPLOY / "overlays" / "deployment") if o["kind"] in RBAC_KINDS]
    grants_file = tmp_path / "grants.yaml"
    grants_file.write_text(yaml.safe_dump_all(grants))
    admission = tmp_path / "admission.yaml"
    admission.write_text(yaml.safe_dump_all(kustomize(DEPLOY / "admission")))
    try:
        kubectl(real_backend, "apply", "-f", str(grants_file))
        kubectl(real_backend, "apply", "-f", str(admission))
        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
        )
        token = core.create_namespaced_service_account_token(ACCOUNT, NAMESPACE, request)
        yield account_kubeconfig(real_backend, token.status.token, tmp_path / "account.kubeconfig")
    finally:
        kubectl(real_backend, "delete", "--ignore-not-found", "--wait=false", "-f", str(admission))
        kubectl(
            real_backend, "delete", "--ignore-not-found", "--wait=false", "-f", str(grants_file)
        )
        if created_namespace:
            core.delete_namespace(NAMESPACE)


LIFECYCLE_TAINTS = {"node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"}


def lifecycle_taints(node: client.V1Node) -> list[str]:
    """The node-lifecycle controller's taints on ``node``."""
    return [t.key for t in node.spec.taints or [] if t.key in LIFECYCLE_TAINTS]


def probe_pod(core: client.CoreV1Api, node: str) -> client.V1Pod:
    """A running pod bound to ``node``."""
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name=PROBE_POD, namespace=APP_NAMESPACE),
        spec=client.V1PodSpec(
            node_name=node,
            containers=[client.V1Container(name="probe", image="registry.invalid/probe:1")],
        ),
    )
    created: client.V1Pod = core.create_namespaced_pod(APP_NAMESPACE, pod)
    return created


def test_fences_work_and_forbidden_writes_are_refused_under_the_admission_policy(
    procs: Processes, real_backend: RealBackend, installed: Path
) -> None:
    admin = real_backend.core
    mine = client.CoreV1Api(config.new_client_from_config(config_file=str(installed)))
    live = "compute01"
    eventually(lambda: real_backend.ready(live) == "True", within=STEP_WITHIN, what=f"{live} Ready")
    # A node an earlier test brought back keeps the node-lifecycle controller's unreachable or
    # not-ready taint until the controller's next pass; the comparison below must not see the
    # controller's own change as one of ours, so it starts once the controller is done.
    eventually(
        lambda: not lifecycle_taints(admin.read_node(live)),
        within=STEP_WITHIN,
        what=f"{live} without the node-lifecycle controller's taints",
    )
    before = admin.read_node(live)

    # The policies are in force once the API server's informers have them: a dry run (which
    # admission sees, and which writes nothing) of a forbidden label is refused.
    label = {"metadata": {"labels": {"example.com/owner": "nodefence"}}}

    def policy_active() -> client.ApiException | None:
        try:
            mine.patch_node(live, label, dry_run="All")
        except client.ApiException as exc:
            return exc if "nodefence-node-writes" in str(exc.body) else None
        return None

    active = eventually(policy_active, within=STEP_WITHIN, interval=0.5, what="policy active")
    assert active.status == 403, active

    # Forbidden writes with nodefence's own token.
    refused = refusal(lambda: mine.patch_node(live, label))
    assert refused.status == 403
    assert "may change only labels under nodefence.io/" in refused.body, refused.body
    refused = refusal(lambda: mine.patch_node(live, {"spec": {"unschedulable": True}}))
    assert refused.status == 403
    assert "may not change a Node's spec" in refused.body, refused.body
    other_taint = [
        *(before.spec.taints or []),
        {"key": "example.com/other", "effect": "NoSchedule"},
    ]
    refused = refusal(lambda: mine.patch_node(live, {"spec": {"taints": other_taint}}))
    assert refused.status == 403
    assert "only the taint node.kubernetes.io/out-of-service" in refused.body, refused.body
    exclude = {"metadata": {"labels": {"nodefence.io/exclude": "false"}}}
    refused = refusal(lambda: mine.patch_node(live, exclude))
    assert refused.status == 403
    after = admin.read_node(live)
    assert after.metadata.labels == before.metadata.labels
    assert after.spec.unschedulable == before.spec.unschedulable
    assert after.spec.taints == before.spec.taints
    # What the policy allows: an annotation under nodefence.io/ (and taking it away again).
    mine.patch_node(live, {"metadata": {"annotations": {"nodefence.io/probe": "admission"}}})
    mine.patch_node(live, {"metadata": {"annotations": {"nodefence.io/probe": None}}})

    probe = probe_pod(admin, live)
    try:
        refused = refusal(
            lambda: mine.delete_namespaced_pod(PROBE_POD, APP_NAMESPACE, grace_period_seconds=0)
        )
        assert refused.status == 403
        assert f"only a pod that is Terminating on a Node; {PROBE_POD} is not" in refused.body
        assert (
            admin.read_namespaced_pod(PROBE_POD, APP_NAMESPACE).metadata.uid == probe.metadata.uid
        )
    finally:
        admin.delete_namespaced_pod(PROBE_POD, APP_NAMESPACE, grace_period_seconds=0)

    fence_and_unfence(procs, real_backend, installed)


def fence_and_unfence(procs: Processes, backend: RealBackend, kubeconfig: Path) -> None:
    """The seed story's fence, purge and unfence, by ``nodefence serve`` with the account."""
    core = backend.core
    pods = core.list_namespaced_pod(APP_NAMESPACE, label_selector="application=mariadb")
    victim = next(p for p in pods.items if p.status.phase == "Running")
    node, pod_name, pod_uid = victim.spec.node_name, victim.metadata.name, victim.metadata.uid
    boot_before = core.read_node(node).status.node_info.boot_id
    policy_file = procs.workdir / "policy.yaml"
    policy_file.write_text(yaml.safe_dump(POLICY))
    nodefence: Nodefence = start_nodefence(
        procs,
        Simulator(backend.url, kubeconfig, backend.process),
        secrets.token_urlsafe(24),
        identity="nodefence-admission",
        env={
            "NODEFENCE_POLICY_FILE": str(policy_file),
            "NODEFENCE_BMC_INVENTORY": str(backend.inventory),
            "NODEFENCE_RECONCILE_INTERVAL": "0",
        },
    )
    backend.control(node, "down")
    eventually(lambda: backend.ready(node) == "Unknown", within=NOT_READY_WITHIN, what="NotReady")
    core.delete_namespaced_pod(pod_name, APP_NAMESPACE)

    def fenced() -> dict[str, Any] | None:
        decision = post_alert(nodefence, node, "firing")
        return decision if decision["verdict"] == "fence" else None

    eventually(fenced, within=STEP_WITHIN, interval=1.0, what="fence decision")
    tainted = eventually(lambda: oos_taints(core.read_node(node)), within=STEP_WITHIN, what="taint")
    assert [(t.value, t.effect) for t in tainted] == [("nodeshutdown", "NoExecute")]
    annotations = core.read_node(node).metadata.annotations or {}
    assert any(key.startswith("nodefence.io/") for key in annotations), annotations

    def purged() -> bool:
        try:
            current = core.read_namespaced_pod(pod_name, APP_NAMESPACE)
        except client.ApiException as exc:
            return exc.status == 404
        return bool(current.metadata.uid != pod_uid)

    eventually(purged, within=STEP_WITHIN, interval=1.0, what="stuck pod purged")

    def rebooted() -> bool:
        current = core.read_node(node)
        ready = any(c.type == "Ready" and c.status == "True" for c in current.status.conditions)
        return ready and current.status.node_info.boot_id != boot_before

    eventually(rebooted, within=STEP_WITHIN, what="powered on with a new bootID")

    def unfenced() -> bool:
        post_alert(nodefence, node, "resolved")
        return not oos_taints(core.read_node(node))

    eventually(unfenced, within=STEP_WITHIN, interval=1.0, what="unfenced")
    forget_mirror(backend, node)
