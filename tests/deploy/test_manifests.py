"""The rendered overlays: offline schema validation and the properties an operator relies on."""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from .conftest import (
    DEPLOY,
    NAMESPACE,
    OVERLAYS,
    Obj,
    find,
    kustomize,
    one,
    pod_templates,
    rendered,
    workloads,
)

K8S_VERSION = "1.32"
CUSTOM_GROUPS = {"serving.knative.dev", "monitoring.coreos.com"}
CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "PriorityClass",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}
UID = 10001
# kube-prometheus' Alertmanager Service, asked by the reconcile pass for active node alerts.
ALERTMANAGER_URL = {
    "name": "NODEFENCE_ALERTMANAGER_URL",
    "value": "http://alertmanager-main.monitoring.svc:9093",
}


def rendered_deployment() -> list[Obj]:
    return rendered("deployment")


def rendered_knative() -> list[Obj]:
    return rendered("knative")


def group_of(obj: Obj) -> str:
    api: str = obj["apiVersion"]
    return api.split("/", maxsplit=1)[0] if "/" in api else ""


def test_both_overlays_exist() -> None:
    assert OVERLAYS == ["deployment", "knative"]


# The grants that live where their objects do: Node Events in default, node Leases in
# kube-node-lease (deploy/base/rbac.yaml).
ELSEWHERE = {
    ("Role", "nodefence-node-events"): "default",
    ("RoleBinding", "nodefence-node-events"): "default",
    ("Role", "nodefence-node-leases"): "kube-node-lease",
    ("RoleBinding", "nodefence-node-leases"): "kube-node-lease",
}


def test_overlay_renders_into_the_nodefence_namespace(objs: list[Obj]) -> None:
    assert objs
    seen = set()
    for o in objs:
        assert o["metadata"]["name"]
        key = (o["kind"], o["metadata"]["name"])
        if o["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in o["metadata"]
        elif key in ELSEWHERE:
            assert o["metadata"]["namespace"] == ELSEWHERE[key], o["metadata"]
            seen.add(key)
        else:
            assert o["metadata"]["namespace"] == NAMESPACE, o["metadata"]
    assert seen == set(ELSEWHERE)


def test_builtin_objects_validate_against_kubernetes_schemas(objs: list[Obj]) -> None:
    checked = 0
    for o in objs:
        if group_of(o) in CUSTOM_GROUPS:
            continue
        kubernetes_validate.validate(o, K8S_VERSION, strict=True)
        checked += 1
    assert checked >= 8


def test_validation_catches_a_broken_object(objs: list[Obj]) -> None:
    broken = dict(one(objs, "ServiceAccount"))
    broken["automountServiceAccountToken"] = "yes"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def test_no_secret_values_are_shipped(objs: list[Obj]) -> None:
    assert find(objs, "Secret") == []


def test_images_carry_the_package_version(objs: list[Obj]) -> None:
    # The one source of the version (pyproject.toml reads it too).
    from nodefence import __version__ as version

    templates = pod_templates(objs)
    assert templates
    for label, tpl in templates:
        for c in tpl["spec"]["containers"]:
            assert c["image"] == f"nodefence:{version}", label


def test_pods_are_locked_down(objs: list[Obj]) -> None:
    templates = pod_templates(objs)
    assert {label for label, _ in templates} == workloads(objs)
    for label, tpl in templates:
        spec = tpl["spec"]
        pod_sc = spec.get("securityContext", {})
        assert spec["serviceAccountName"] == "nodefence", label
        assert spec.get("automountServiceAccountToken", True) is True, label
        assert tpl["metadata"]["labels"]["app.kubernetes.io/name"] == "nodefence", label
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["runAsNonRoot"] is True, label
            assert sc["runAsUser"] == UID, label
            assert sc["runAsGroup"] == UID, label
            assert sc["readOnlyRootFilesystem"] is True, label
            assert sc["allowPrivilegeEscalation"] is False, label
            assert sc["capabilities"] == {"drop": ["ALL"]}, label
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}, label
            assert "privileged" not in sc, label
            assert c["envFrom"] == [{"secretRef": {"name": "nodefence-secrets"}}], label
            assert c["resources"]["requests"], label
            assert c["resources"]["limits"]["memory"], label
        if pod_sc:
            assert pod_sc["runAsNonRoot"] is True, label
            assert pod_sc["runAsUser"] == UID, label
            assert pod_sc["seccompProfile"] == {"type": "RuntimeDefault"}, label
        for key in ("hostNetwork", "hostPID", "hostIPC"):
            assert not spec.get(key), label


def test_policy_configmap_is_generated_and_mounted(objs: list[Obj]) -> None:
    cms = [
        o for o in find(objs, "ConfigMap") if o["metadata"]["name"].startswith("nodefence-policy")
    ]
    assert len(cms) == 1
    cm = cms[0]
    assert re.fullmatch(r"nodefence-policy-[a-z0-9]{10}", cm["metadata"]["name"])
    assert cm["data"]["policy.yaml"] == (DEPLOY / "base" / "policy.yaml").read_text()
    assert isinstance(yaml.safe_load(cm["data"]["policy.yaml"]), dict)
    for label, tpl in pod_templates(objs):
        spec = tpl["spec"]
        volumes = {v["name"]: v for v in spec["volumes"]}
        container = spec["containers"][0]
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        policy_file = Path(env["NODEFENCE_POLICY_FILE"])
        mount = next(
            m for m in container["volumeMounts"] if Path(m["mountPath"]) == policy_file.parent
        )
        assert mount["readOnly"] is True, label
        assert volumes[mount["name"]]["configMap"]["name"] == cm["metadata"]["name"], label
        assert policy_file.name in cm["data"], label


def test_read_only_root_has_a_writable_tmp_where_pod_volumes_allow() -> None:
    for label, tpl in pod_templates(rendered_deployment()):
        container = tpl["spec"]["containers"][0]
        tmp = next(m for m in container["volumeMounts"] if m["mountPath"] == "/tmp")
        volume = next(v for v in tpl["spec"]["volumes"] if v["name"] == tmp["name"])
        assert "emptyDir" in volume, label


def test_deployment_is_highly_available() -> None:
    objs = rendered_deployment()
    dep = one(objs, "Deployment", "nodefence")
    spec = dep["spec"]
    pod_labels = spec["template"]["metadata"]["labels"]
    assert spec["replicas"] == 2
    assert spec["selector"]["matchLabels"].items() <= pod_labels.items()
    spread = spec["template"]["spec"]["topologySpreadConstraints"]
    assert [s["topologyKey"] for s in spread] == ["kubernetes.io/hostname"]
    assert spread[0]["labelSelector"]["matchLabels"].items() <= pod_labels.items()
    pdb = one(objs, "PodDisruptionBudget", "nodefence")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    tolerations = {t["key"]: t for t in spec["template"]["spec"]["tolerations"]}
    assert tolerations["node.kubernetes.io/unreachable"]["tolerationSeconds"] < 300


def test_deployment_probes_and_port() -> None:
    objs = rendered_deployment()
    dep = one(objs, "Deployment", "nodefence")
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["serve"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": 8080}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["PORT"] == "8080"
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}

    svc = one(objs, "Service", "nodefence")
    assert svc["spec"]["ports"] == [
        {"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}
    ]
    assert svc["spec"]["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()


def env_of(template: Obj) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in template["spec"]["containers"][0]["env"]}


def test_deployment_replicas_reconcile_themselves_and_knative_keeps_the_cronjob() -> None:
    """Receivers that run all the time pass themselves (so their metrics show what reconcile
    does) and ask Alertmanager for the active node alerts; a receiver that scales to zero has
    no process while idle, so there the CronJob passes and the Service runs none."""
    deployment = rendered_deployment()
    assert find(deployment, "CronJob") == []
    receiver = dict(pod_templates(deployment))["Deployment/nodefence"]
    assert float(env_of(receiver)["NODEFENCE_RECONCILE_INTERVAL"]) > 0
    assert env_of(receiver)["NODEFENCE_ALERTMANAGER_URL"] == ALERTMANAGER_URL["value"]
    knative = rendered_knative()
    one(knative, "CronJob", "nodefence-reconcile")
    service = dict(pod_templates(knative))["Service/nodefence"]
    assert env_of(service)["NODEFENCE_RECONCILE_INTERVAL"] == "0"


def test_reconcile_cronjob_matches_the_receiver() -> None:
    """Same image, account, security and configuration as the receiver, every minute: a fence
    refused for a passing reason is retried within a minute of being allowed."""
    for objs in (rendered_knative(),):
        cron = one(objs, "CronJob", "nodefence-reconcile")
        assert cron["spec"]["schedule"] == "* * * * *"
        assert cron["spec"]["concurrencyPolicy"] == "Forbid"
        # A late start is dropped before the next slot would be due, never run late in a pile.
        assert 10 <= cron["spec"]["startingDeadlineSeconds"] < 60
        job = cron["spec"]["jobTemplate"]["spec"]
        # A hung pass holds back (Forbid) at most one later slot; the next slot is the retry.
        assert job["activeDeadlineSeconds"] < 120
        assert job["backoffLimit"] == 0
        pod = job["template"]["spec"]
        container = pod["containers"][0]
        assert container["args"] == ["reconcile"]
        assert pod["restartPolicy"] == "Never"
    templates = dict(pod_templates(rendered_knative()))
    service_pod = templates["Service/nodefence"]
    cron_pod = templates["CronJob/nodefence-reconcile"]
    service_container = service_pod["spec"]["containers"][0]
    cron_container = cron_pod["spec"]["containers"][0]
    for field in ("image", "securityContext", "envFrom"):
        assert service_container[field] == cron_container[field], field
    # Whatever the receiver mounts (the policy), the CronJob mounts the same way.
    for mount in service_container["volumeMounts"]:
        assert mount in cron_container["volumeMounts"], mount
    # The same settings, less the receiver's own (it runs no pass), plus Alertmanager.
    own = {"PORT", "NODEFENCE_RECONCILE_INTERVAL"}
    service_env = [e for e in service_container["env"] if e["name"] not in own]
    assert cron_container["env"] == [*service_env, ALERTMANAGER_URL]
    for volume in service_pod["spec"]["volumes"]:
        assert volume in cron_pod["spec"]["volumes"], volume


@pytest.mark.parametrize(
    ("overlay", "policy", "passing"),
    [
        ("deployment", "nodefence-receiver-alertmanager", "Deployment/"),
        ("knative", "nodefence-reconcile-alertmanager", "CronJob/"),
    ],
)
def test_reconcile_pods_may_reach_alertmanager_and_nothing_more(
    overlay: str, policy: str, passing: str
) -> None:
    """The base policy allows no egress to port 9093; the pods that run reconcile passes (the
    Deployment's receivers, the Knative overlay's CronJob) get exactly that path to the
    Alertmanager pods the URL names, and no other pod does."""
    for objs in (rendered(overlay),):
        np = one(objs, "NetworkPolicy", policy)
        spec = np["spec"]
        assert spec["policyTypes"] == ["Egress"]
        assert "ingress" not in spec
        (rule,) = spec["egress"]
        (peer,) = rule["to"]
        assert peer["namespaceSelector"]["matchLabels"] == {
            "kubernetes.io/metadata.name": "monitoring"
        }
        assert peer["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "alertmanager"}
        assert rule["ports"] == [{"port": 9093, "protocol": "TCP"}]
        assert ALERTMANAGER_URL["value"].endswith(".monitoring.svc:9093")
        selector = spec["podSelector"]["matchLabels"].items()
        for label, template in pod_templates(objs):
            selected = selector <= template["metadata"]["labels"].items()
            assert selected == label.startswith(passing), label


def test_network_policy_limits_ingress_to_monitoring() -> None:
    np = one(rendered_deployment(), "NetworkPolicy", "nodefence")
    spec = np["spec"]
    assert sorted(spec["policyTypes"]) == ["Egress", "Ingress"]
    assert spec["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "nodefence"}
    (rule,) = spec["ingress"]
    sources = {
        (
            s["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
            s["podSelector"]["matchLabels"]["app.kubernetes.io/name"],
        )
        for s in rule["from"]
    }
    assert sources == {("monitoring", "alertmanager"), ("monitoring", "prometheus")}
    assert rule["ports"] == [{"port": "http", "protocol": "TCP"}]
    dns, api = spec["egress"]
    assert {(p["port"], p["protocol"]) for p in dns["ports"]} == {(53, "UDP"), (53, "TCP")}
    (resolver,) = dns["to"]
    assert resolver["podSelector"]["matchLabels"] == {"k8s-app": "kube-dns"}
    # The API server: its ports, to any address until the bmc-inventory component narrows them;
    # no BMC port (IPMI's UDP 623) without that component.
    assert api["ports"] == [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}]
    assert "to" not in api


def _knative_service() -> Obj:
    objs = rendered_knative()
    ksvcs = [o for o in find(objs, "Service") if group_of(o) == "serving.knative.dev"]
    assert len(ksvcs) == 1
    return ksvcs[0]


# Fields Knative Serving admits in a revision's pod spec and container (its PodSpecMask and
# ContainerMask, plus the feature-flagged ones we do not use left out).
KNATIVE_POD_FIELDS = {
    "serviceAccountName",
    "containers",
    "volumes",
    "imagePullSecrets",
    "enableServiceLinks",
    "containerConcurrency",
    "timeoutSeconds",
    "responseStartTimeoutSeconds",
    "idleTimeoutSeconds",
}
KNATIVE_CONTAINER_FIELDS = {
    "name",
    "args",
    "command",
    "env",
    "workingDir",
    "envFrom",
    "image",
    "imagePullPolicy",
    "livenessProbe",
    "ports",
    "readinessProbe",
    "resources",
    "securityContext",
    "terminationMessagePath",
    "terminationMessagePolicy",
    "volumeMounts",
}


def test_knative_service_shape() -> None:
    ksvc = _knative_service()
    assert ksvc["apiVersion"] == "serving.knative.dev/v1"
    assert ksvc["metadata"]["name"] == "nodefence"
    assert ksvc["metadata"]["labels"]["networking.knative.dev/visibility"] == "cluster-local"
    template = ksvc["spec"]["template"]
    annotations = template["metadata"]["annotations"]
    assert annotations["autoscaling.knative.dev/min-scale"] in {"0", "1"}
    assert int(annotations["autoscaling.knative.dev/max-scale"]) >= 1
    spec = template["spec"]
    assert set(spec) <= KNATIVE_POD_FIELDS
    assert isinstance(spec["containerConcurrency"], int)
    assert spec["containerConcurrency"] > 0
    (container,) = spec["containers"]
    assert set(container) <= KNATIVE_CONTAINER_FIELDS
    assert container["ports"] == [{"name": "http1", "containerPort": 8080}]
    assert "PORT" not in {e["name"] for e in container.get("env", [])}, "Knative reserves PORT"
    for probe in ("readinessProbe", "livenessProbe"):
        assert "port" not in container[probe]["httpGet"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"


def test_knative_pod_spec_is_a_valid_kubernetes_pod_spec() -> None:
    """Knative runs the template as a pod; its defaulting fills in the probes' port first."""
    template = copy.deepcopy(_knative_service()["spec"]["template"])
    spec: dict[str, Any] = {
        k: v
        for k, v in template["spec"].items()
        if k not in {"containerConcurrency", "timeoutSeconds"}
    }
    for container in spec["containers"]:
        for probe in ("readinessProbe", "livenessProbe"):
            container[probe]["httpGet"]["port"] = container["ports"][0]["containerPort"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "nodefence", "labels": template["metadata"]["labels"]},
        "spec": spec,
    }
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)


def test_knative_overlay_replaces_the_plain_service_and_opens_the_knative_path() -> None:
    objs = rendered_knative()
    assert [o for o in find(objs, "Service") if group_of(o) == ""] == []
    assert find(objs, "Deployment") == []
    assert find(objs, "PodDisruptionBudget") == []
    assert find(objs, "PingSource") == []
    np = one(objs, "NetworkPolicy", "nodefence")
    namespaces = {
        s["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
        for s in np["spec"]["ingress"][0]["from"]
    }
    assert "knative-serving" in namespaces
    ns = one(objs, "Namespace", "nodefence")
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"


def test_deployment_namespace_enforces_restricted_pod_security() -> None:
    ns = one(rendered_deployment(), "Namespace", "nodefence")
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_pod_monitor_scrapes_the_receivers_as_job_nodefence() -> None:
    objs = kustomize(DEPLOY / "monitoring")
    pm = one(objs, "PodMonitor", "nodefence")
    assert pm["apiVersion"] == "monitoring.coreos.com/v1"
    assert pm["metadata"]["namespace"] == NAMESPACE
    selector = pm["spec"]["selector"]["matchLabels"]
    ports = {e["port"] for e in pm["spec"]["podMetricsEndpoints"]}
    assert {e["path"] for e in pm["spec"]["podMetricsEndpoints"]} == {"/metrics"}
    for label, tpl in pod_templates(rendered_deployment()) + pod_templates(rendered_knative()):
        labels = tpl["metadata"]["labels"]
        selected = selector.items() <= labels.items()
        assert selected == label.startswith(("Deployment/", "Service/")), label
        if selected:
            assert labels[pm["spec"]["jobLabel"]] == "nodefence", label
            names = {p["name"] for p in tpl["spec"]["containers"][0]["ports"]}
            assert names & ports, label


def test_secret_example_is_outside_every_kustomization() -> None:
    example = DEPLOY / "secret.example.yaml"
    docs = [d for d in yaml.safe_load_all(example.read_text()) if d]
    secret = next(d for d in docs if d["metadata"]["name"] == "nodefence-secrets")
    assert secret["metadata"]["namespace"] == NAMESPACE
    assert all(key.startswith("NODEFENCE_") for key in secret["stringData"])
    assert "NODEFENCE_ALERT_TOKEN" in secret["stringData"]
    for kustomization in DEPLOY.rglob("kustomization.yaml"):
        assert "secret.example" not in kustomization.read_text(), kustomization


def test_shipped_policy_passes_check_config(tmp_path: Path) -> None:
    """The policy the ConfigMap carries is accepted by the service's own validation."""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "NODEFENCE_ALERT_TOKEN": "check-config-token",
        "NODEFENCE_POLICY_FILE": str(DEPLOY / "base" / "policy.yaml"),
    }
    out = subprocess.run(
        [sys.executable, "-m", "nodefence", "check-config", "--offline"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert env["NODEFENCE_POLICY_FILE"] in out.stdout
