"""The admission policies on a real API server, with nodefence's own ServiceAccount token (minted
by the TokenRequest API for the account the shipped grants bind): the policies and grants are
those the Deployment overlay renders by default (with components/finalizer-stripping's pod
patch), applied with the admin's kubeconfig.

What the token is refused: on a Ready node, the out-of-service taint, any other taint,
spec.unschedulable, a label outside nodefence.io/, the exclusion label or annotation
(nodefence.io/exclude, added, changed or taken away); a pod's delete or finalizer strip on a
node that is Ready or that does not carry the taint, Terminating or not; a finalizer strip
from a pod that is not Terminating, or one that changes anything else. What it is allowed, the
writes nodefence itself makes: the taint on a node that is not Ready, taken away again once the
node is Ready; its nodefence.io/ annotations; the grace-0 delete of a pod on the tainted node
that is not Ready, Terminating or not, and the finalizer strip after it; and a whole fence by
``nodefence serve`` with the token (proof, taint, purge, unfence).

Everything the test creates (policies, bindings, the account, its grants, probe pods) is
deleted at the end, and a node it brought down is brought back, so the other tests of the
session see the cluster as before.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from bench.processes import Processes, eventually
from kubernetes import client, config
from tests.deploy.conftest import DEPLOY, kustomize
from tests.e2e.harness import OOS, Nodefence, Simulator, start_nodefence

from .conftest import RealBackend
from .safety_support import forget_mirror, restore, wait_not_ready
from .test_seed_story import NOT_READY_WITHIN, POLICY, STEP_WITHIN, oos_taints, post_alert

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(900)]

NAMESPACE = "nodefence"
ACCOUNT = "nodefence"
APP_NAMESPACE = "openstack"
PROBE_POD = "nodefence-admission-probe"
HOLD = "example.com/hold"
RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
ADMISSION_KINDS = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
# The node the pod refusals and the live-node refusals use, and the one brought down.
LIVE = "compute01"
DOWN = "compute02"


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


def refusal(call: Callable[[], Any]) -> client.ApiException:
    with pytest.raises(client.ApiException) as refused:
        call()
    return refused.value


def refused_by_policy(call: Callable[[], Any], words: str) -> None:
    """``call`` is refused (403) by the admission policy with ``words`` in the message."""
    refused = refusal(call)
    assert refused.status == 403, refused
    assert words in refused.body, refused.body


def default_install(tmp_path: Path) -> list[dict[str, Any]]:
    """The Deployment overlay as an operator renders it, with the finalizer-stripping grant."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    up = Path(os.path.relpath(DEPLOY, overlay))
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [str(up / "overlays" / "deployment")],
                "components": [str(up / "components" / "finalizer-stripping")],
            }
        )
    )
    return kustomize(overlay)


@pytest.fixture
def installed(real_backend: RealBackend, tmp_path: Path) -> Iterator[Path]:
    """The grants for nodefence's account and the admission policies the overlay ships,
    applied with the admin's kubeconfig; yields a kubeconfig holding the account's own token,
    once the API server enforces both policies."""
    core = real_backend.core
    existing = {n.metadata.name for n in core.list_namespace().items}
    created_namespace = NAMESPACE not in existing
    if created_namespace:
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
    rendered = default_install(tmp_path)
    grants_file = tmp_path / "grants.yaml"
    grants_file.write_text(yaml.safe_dump_all([o for o in rendered if o["kind"] in RBAC_KINDS]))
    policies = [o for o in rendered if o["kind"] in ADMISSION_KINDS]
    assert len(policies) == 4, [o["metadata"]["name"] for o in policies]
    admission = tmp_path / "admission.yaml"
    admission.write_text(yaml.safe_dump_all(policies))
    try:
        kubectl(real_backend, "apply", "-f", str(grants_file))
        kubectl(real_backend, "apply", "-f", str(admission))
        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
        )
        token = core.create_namespaced_service_account_token(ACCOUNT, NAMESPACE, request)
        kubeconfig = account_kubeconfig(
            real_backend, token.status.token, tmp_path / "account.kubeconfig"
        )
        wait_enforced(real_backend, kubeconfig)
        yield kubeconfig
    finally:
        kubectl(real_backend, "delete", "--ignore-not-found", "--wait=false", "-f", str(admission))
        kubectl(
            real_backend, "delete", "--ignore-not-found", "--wait=false", "-f", str(grants_file)
        )
        if created_namespace:
            core.delete_namespace(NAMESPACE)


def account_api(kubeconfig: Path) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))


def wait_enforced(backend: RealBackend, kubeconfig: Path) -> None:
    """Both policies are in force once the API server's informers hold them (and the Nodes,
    the pod policy's parameters): dry runs (which admission sees, and which write nothing) of
    a forbidden label and of a pod delete on a live node are refused by each."""
    mine = account_api(kubeconfig)
    eventually(lambda: backend.ready(LIVE) == "True", within=STEP_WITHIN, what=f"{LIVE} Ready")
    label = {"metadata": {"labels": {"example.com/owner": "nodefence"}}}

    def refused_by(policy: str, call: Callable[[], Any]) -> bool:
        try:
            call()
        except client.ApiException as exc:
            return exc.status == 403 and policy in str(exc.body)
        return False

    eventually(
        lambda: refused_by(
            "nodefence-node-writes", lambda: mine.patch_node(LIVE, label, dry_run="All")
        ),
        within=STEP_WITHIN,
        interval=0.5,
        what="node policy enforced",
    )
    pod = probe_pod(backend.core, f"{PROBE_POD}-enforced", LIVE)
    try:
        eventually(
            lambda: refused_by(
                "does not carry the taint",
                lambda: mine.delete_namespaced_pod(
                    pod.metadata.name, APP_NAMESPACE, grace_period_seconds=0, dry_run="All"
                ),
            ),
            within=STEP_WITHIN,
            interval=0.5,
            what="pod policy enforced",
        )
    finally:
        force_delete(backend.core, pod.metadata.name)


LIFECYCLE_TAINTS = {"node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"}


def lifecycle_taints(node: client.V1Node) -> list[str]:
    """The node-lifecycle controller's taints on ``node``."""
    return [t.key for t in node.spec.taints or [] if t.key in LIFECYCLE_TAINTS]


def probe_pod(
    core: client.CoreV1Api, name: str, node: str, *, finalizers: list[str] | None = None
) -> client.V1Pod:
    """A pod bound to ``node`` that tolerates every taint (so that the taint-eviction
    controller leaves it to the test), held by ``finalizers`` once deleted."""
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, namespace=APP_NAMESPACE, finalizers=finalizers),
        spec=client.V1PodSpec(
            node_name=node,
            tolerations=[client.V1Toleration(operator="Exists")],
            containers=[client.V1Container(name="probe", image="registry.invalid/probe:1")],
        ),
    )
    created: client.V1Pod = core.create_namespaced_pod(APP_NAMESPACE, pod)
    return created


def force_delete(core: client.CoreV1Api, name: str) -> None:
    """The admin takes a probe pod away: its finalizers first, then a grace-0 delete."""
    try:
        core.patch_namespaced_pod(name, APP_NAMESPACE, {"metadata": {"finalizers": None}})
        core.delete_namespaced_pod(name, APP_NAMESPACE, grace_period_seconds=0)
    except client.ApiException as exc:
        if exc.status != 404:
            raise


def gone(core: client.CoreV1Api, name: str) -> bool:
    try:
        core.read_namespaced_pod(name, APP_NAMESPACE)
    except client.ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def strip(mine: client.CoreV1Api, pod: client.V1Pod) -> Any:
    """nodefence's finalizer strip, as the executor sends it: a JSON patch with the pod's UID
    and resourceVersion as tests, then the finalizers it keeps (none here)."""
    ops = [
        {"op": "test", "path": "/metadata/uid", "value": pod.metadata.uid},
        {"op": "replace", "path": "/metadata/finalizers", "value": []},
    ]
    return mine.patch_namespaced_pod(pod.metadata.name, APP_NAMESPACE, ops)


def without_oos(node: client.V1Node) -> list[Any]:
    return [t for t in node.spec.taints or [] if t.key != OOS]


def with_oos(node: client.V1Node) -> list[Any]:
    """The node's taints with nodefence's out-of-service taint added, as nodefence writes it."""
    return [*without_oos(node), {"key": OOS, "value": "nodeshutdown", "effect": "NoExecute"}]


def write_taints(
    mine: client.CoreV1Api,
    admin: client.CoreV1Api,
    node: str,
    change: Callable[[client.V1Node], list[Any]],
) -> None:
    """nodefence's taint write as it makes it: the whole list, on the node as read (the
    resourceVersion a test of the patch), again on a conflict, since the node-lifecycle
    controller changes its own taints on a node that goes or comes back."""

    def attempt() -> bool:
        current = admin.read_node(node)
        ops = [
            {
                "op": "test",
                "path": "/metadata/resourceVersion",
                "value": current.metadata.resource_version,
            },
            {"op": "add", "path": "/spec/taints", "value": change(current)},
        ]
        try:
            mine.patch_node(node, ops)
        except client.ApiException as exc:
            if exc.status in (409, 422):
                return False
            raise
        return True

    eventually(attempt, within=STEP_WITHIN, interval=0.2, what=f"taints of {node} written")


@pytest.mark.invariant("S1")
def test_writes_to_a_ready_node_are_refused(real_backend: RealBackend, installed: Path) -> None:
    admin, mine = real_backend.core, account_api(installed)
    # A node an earlier test brought back keeps the node-lifecycle controller's unreachable or
    # not-ready taint until the controller's next pass; the comparison below must not see the
    # controller's own change as one of ours, so it starts once the controller is done.
    eventually(
        lambda: not lifecycle_taints(admin.read_node(LIVE)),
        within=STEP_WITHIN,
        what=f"{LIVE} without the node-lifecycle controller's taints",
    )
    before = admin.read_node(LIVE)

    # The out-of-service taint on a node whose kubelet reports it Ready.
    refused_by_policy(
        lambda: mine.patch_node(LIVE, {"spec": {"taints": with_oos(before)}}),
        f"only to a Node whose Ready condition is not True; {LIVE} is Ready",
    )
    refused_by_policy(
        lambda: mine.patch_node(LIVE, {"metadata": {"labels": {"example.com/owner": "x"}}}),
        "may change only labels under nodefence.io/",
    )
    refused_by_policy(
        lambda: mine.patch_node(LIVE, {"spec": {"unschedulable": True}}),
        "may not change a Node's spec",
    )
    other_taint = [*without_oos(before), {"key": "example.com/other", "effect": "NoSchedule"}]
    refused_by_policy(
        lambda: mine.patch_node(LIVE, {"spec": {"taints": other_taint}}),
        "only the taint node.kubernetes.io/out-of-service",
    )
    # The exclusion, label or annotation, is a person's: added, changed or taken away.
    refused_by_policy(
        lambda: mine.patch_node(LIVE, {"metadata": {"labels": {"nodefence.io/exclude": "false"}}}),
        "never nodefence.io/exclude",
    )
    exclude = "nodefence.io/exclude"
    refused_by_policy(
        lambda: mine.patch_node(LIVE, {"metadata": {"annotations": {exclude: "false"}}}),
        "never nodefence.io/exclude",
    )
    admin.patch_node(LIVE, {"metadata": {"annotations": {exclude: "true"}}})
    try:
        refused_by_policy(
            lambda: mine.patch_node(LIVE, {"metadata": {"annotations": {exclude: None}}}),
            "never nodefence.io/exclude",
        )
        refused_by_policy(
            lambda: mine.patch_node(LIVE, {"metadata": {"annotations": {exclude: "no"}}}),
            "never nodefence.io/exclude",
        )
        assert (admin.read_node(LIVE).metadata.annotations or {})[exclude] == "true"
    finally:
        admin.patch_node(LIVE, {"metadata": {"annotations": {exclude: None}}})
    after = admin.read_node(LIVE)
    assert after.metadata.labels == before.metadata.labels
    assert after.spec.unschedulable == before.spec.unschedulable
    assert after.spec.taints == before.spec.taints
    # What the policy allows on a Ready node: an annotation under nodefence.io/ (and taking
    # it away again).
    mine.patch_node(LIVE, {"metadata": {"annotations": {"nodefence.io/probe": "admission"}}})
    mine.patch_node(LIVE, {"metadata": {"annotations": {"nodefence.io/probe": None}}})


@pytest.mark.invariant("S6")
def test_pods_on_a_ready_node_are_neither_deleted_nor_stripped(
    real_backend: RealBackend, installed: Path
) -> None:
    admin, mine = real_backend.core, account_api(installed)
    eventually(lambda: real_backend.ready(LIVE) == "True", within=STEP_WITHIN, what="Ready")
    words = f"is on {LIVE}, which does not carry the taint"
    running = probe_pod(admin, PROBE_POD, LIVE, finalizers=[HOLD])
    try:
        refused_by_policy(
            lambda: mine.delete_namespaced_pod(PROBE_POD, APP_NAMESPACE, grace_period_seconds=0),
            words,
        )
        # Terminating on the live node (the admin's delete, held by a finalizer): nodefence may
        # neither finish the delete nor strip the finalizer that holds it.
        admin.delete_namespaced_pod(PROBE_POD, APP_NAMESPACE)
        terminating = admin.read_namespaced_pod(PROBE_POD, APP_NAMESPACE)
        assert terminating.metadata.deletion_timestamp is not None
        refused_by_policy(
            lambda: mine.delete_namespaced_pod(PROBE_POD, APP_NAMESPACE, grace_period_seconds=0),
            words,
        )
        refused_by_policy(lambda: strip(mine, terminating), words)
        still = admin.read_namespaced_pod(PROBE_POD, APP_NAMESPACE)
        assert still.metadata.uid == running.metadata.uid
        assert still.metadata.finalizers == [HOLD]
    finally:
        force_delete(admin, PROBE_POD)


def test_what_nodefence_does_to_a_node_that_is_not_ready_is_allowed_and_no_more(
    real_backend: RealBackend, installed: Path
) -> None:
    """The node brought down through the real backend's control surface (its kwok stops, the
    real node-lifecycle controller marks it NotReady), tainted, its pods purged, brought back,
    and the taint taken away: each of nodefence's own writes allowed, and beside each the one
    just past it refused."""
    admin, mine = real_backend.core, account_api(installed)
    held_name, loose_name = f"{PROBE_POD}-held", f"{PROBE_POD}-loose"
    try:
        real_backend.control(DOWN, "down")
        wait_not_ready(real_backend, DOWN)
        probe_pod(admin, held_name, DOWN, finalizers=[HOLD])
        loose = probe_pod(admin, loose_name, DOWN, finalizers=[HOLD])
        # Not Ready, but not fenced: no pod of it goes.
        refused_by_policy(
            lambda: mine.delete_namespaced_pod(loose_name, APP_NAMESPACE, grace_period_seconds=0),
            f"is on {DOWN}, which does not carry the taint",
        )

        # The taint on the node that is not Ready: allowed.
        write_taints(mine, admin, DOWN, with_oos)
        assert [t.value for t in oos_taints(admin.read_node(DOWN))] == ["nodeshutdown"]

        # The API server's watch of the Nodes (the pod policy's parameters) sees the taint a
        # moment later: the dry run of nodefence's delete is admitted from then on.
        def admitted() -> bool:
            try:
                mine.delete_namespaced_pod(
                    loose_name, APP_NAMESPACE, grace_period_seconds=0, dry_run="All"
                )
            except client.ApiException as exc:
                if exc.status != 403:
                    raise
                return False
            return True

        eventually(admitted, within=STEP_WITHIN, interval=0.2, what="the taint seen by the policy")

        # A finalizer strip before the delete: refused (the pod is not Terminating).
        refused_by_policy(
            lambda: strip(mine, loose), f"only from a pod that is Terminating; {loose_name}"
        )
        # The purge of a pod that is not Terminating (purge.non_terminating), grace 0: allowed;
        # its finalizer holds it.
        mine.delete_namespaced_pod(loose_name, APP_NAMESPACE, grace_period_seconds=0)
        # The purge of one already Terminating (the seed's stuck pod), then the strip: allowed,
        # and the pod is gone. A strip that changes anything else is refused.
        admin.delete_namespaced_pod(held_name, APP_NAMESPACE)
        mine.delete_namespaced_pod(held_name, APP_NAMESPACE, grace_period_seconds=0)
        terminating = admin.read_namespaced_pod(held_name, APP_NAMESPACE)
        refused_by_policy(
            lambda: mine.patch_namespaced_pod(
                held_name,
                APP_NAMESPACE,
                {"metadata": {"finalizers": None, "labels": {"example.com/moved": "yes"}}},
            ),
            "may change a pod only to remove finalizers",
        )
        strip(mine, terminating)
        eventually(lambda: gone(admin, held_name), within=STEP_WITHIN, what="stripped pod gone")

        # Back up and Ready with the taint still on: no more purges on it.
        real_backend.control(DOWN, "up")
        eventually(lambda: real_backend.ready(DOWN) == "True", within=STEP_WITHIN, what="Ready")
        eventually(
            lambda: not lifecycle_taints(admin.read_node(DOWN)),
            within=STEP_WITHIN,
            what=f"{DOWN} without the node-lifecycle controller's taints",
        )

        def refused_as_ready() -> bool:
            try:
                strip(mine, admin.read_namespaced_pod(loose_name, APP_NAMESPACE))
            except client.ApiException as exc:
                if exc.status != 403:
                    raise
                return f"is on {DOWN}, which is Ready" in exc.body
            raise AssertionError("a finalizer strip on a Ready node was admitted")

        eventually(refused_as_ready, within=STEP_WITHIN, interval=0.2, what="Ready seen")
        assert admin.read_namespaced_pod(loose_name, APP_NAMESPACE).metadata.finalizers == [HOLD]

        # The taint taken away from the Ready node (nodefence's unfence): allowed; put back on
        # the Ready node: refused.
        write_taints(mine, admin, DOWN, without_oos)
        untainted = admin.read_node(DOWN)
        assert not oos_taints(untainted)
        refused_by_policy(
            lambda: mine.patch_node(DOWN, {"spec": {"taints": with_oos(untainted)}}),
            f"{DOWN} is Ready",
        )
    finally:
        for name in (held_name, loose_name):
            force_delete(admin, name)
        restore(real_backend, DOWN)


def test_a_pod_bound_to_no_node_is_what_the_pod_policy_cannot_judge(
    real_backend: RealBackend, installed: Path
) -> None:
    """What SECURITY.md says stays possible: a pod whose spec.nodeName names no Node has no
    evaluation about its Node, so none refuses its delete (no kubelet runs it either)."""
    admin, mine = real_backend.core, account_api(installed)
    name = f"{PROBE_POD}-nowhere"
    probe_pod(admin, name, "no-such-node")
    try:
        mine.delete_namespaced_pod(name, APP_NAMESPACE, grace_period_seconds=0)
        assert gone(admin, name)
    finally:
        force_delete(admin, name)


def test_a_fence_by_nodefence_s_own_account_is_admitted(
    procs: Processes, real_backend: RealBackend, installed: Path
) -> None:
    """The seed story's fence, purge and unfence, by ``nodefence serve`` with the account."""
    core = real_backend.core
    pods = core.list_namespaced_pod(APP_NAMESPACE, label_selector="application=mariadb")
    victim = next(p for p in pods.items if p.status.phase == "Running")
    node, pod_name, pod_uid = victim.spec.node_name, victim.metadata.name, victim.metadata.uid
    boot_before = core.read_node(node).status.node_info.boot_id
    policy_file = procs.workdir / "policy.yaml"
    policy_file.write_text(yaml.safe_dump(POLICY))
    nodefence: Nodefence = start_nodefence(
        procs,
        Simulator(real_backend.url, installed, real_backend.process),
        secrets.token_urlsafe(24),
        identity="nodefence-admission",
        env={
            "NODEFENCE_POLICY_FILE": str(policy_file),
            "NODEFENCE_BMC_INVENTORY": str(real_backend.inventory),
            "NODEFENCE_RECONCILE_INTERVAL": "0",
        },
    )
    try:
        real_backend.control(node, "down")
        eventually(
            lambda: real_backend.ready(node) == "Unknown", within=NOT_READY_WITHIN, what="NotReady"
        )
        core.delete_namespaced_pod(pod_name, APP_NAMESPACE)

        decisions: list[dict[str, Any]] = []

        def fenced() -> dict[str, Any] | None:
            decision = post_alert(nodefence, node, "firing")
            decisions.append(decision)
            return decision if decision["verdict"] == "fence" else None

        eventually(fenced, within=STEP_WITHIN, interval=1.0, what="fence decision")
        tainted = eventually(
            lambda: oos_taints(core.read_node(node)), within=STEP_WITHIN, what="taint"
        )
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
        # The purge nodefence sent right after its taint was admitted, not refused while the
        # policy's view of the Node still lacked the taint.
        purges = [
            r
            for d in decisions
            for r in d["results"]
            if r["action"] == "purge" and r["target"] == f"{APP_NAMESPACE}/{pod_name}"
        ]
        print(purges)
        assert purges, decisions
        assert all(r["outcome"] != "failed" for r in purges), purges

        # The reboot's power-on is a later decision's: Alertmanager sends the firing alert
        # again while the node stays NotReady (no reconcile pass runs here).
        def rebooted() -> bool:
            current = core.read_node(node)
            ready = any(c.type == "Ready" and c.status == "True" for c in current.status.conditions)
            if not ready:
                post_alert(nodefence, node, "firing")
            return ready and current.status.node_info.boot_id != boot_before

        eventually(rebooted, within=STEP_WITHIN, interval=1.0, what="powered on with a new bootID")

        def unfenced() -> bool:
            post_alert(nodefence, node, "resolved")
            return not oos_taints(core.read_node(node))

        eventually(unfenced, within=STEP_WITHIN, interval=1.0, what="unfenced")
        forget_mirror(real_backend, node)
    finally:
        restore(real_backend, node, nodefence)
