"""deploy/monitoring on stock kube-prometheus: its Prometheus (ServiceAccount prometheus-k8s in
namespace monitoring) may discover nodefence's pods, the PodMonitor or the alternative
ServiceMonitor scrapes them as job "nodefence", and the dashboard ships beside them."""

from __future__ import annotations

import kubernetes_validate
import yaml

from .conftest import DEPLOY, NAMESPACE, Obj, kustomize, one, rendered

K8S_VERSION = "1.32"
SERVICE_MONITOR = DEPLOY / "monitoring" / "servicemonitor.yaml"


def monitoring() -> list[Obj]:
    return kustomize(DEPLOY / "monitoring")


def test_prometheus_k8s_may_discover_the_pods_in_nodefences_namespace() -> None:
    objs = monitoring()
    role = one(objs, "Role", "prometheus-k8s")
    binding = one(objs, "RoleBinding", "prometheus-k8s")
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == NAMESPACE
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    for resource in ("pods", "services", "endpoints"):
        for verb in ("get", "list", "watch"):
            assert ("", resource, verb) in granted
    assert ("discovery.k8s.io", "endpointslices", "list") in granted
    assert {verb for _, _, verb in granted} == {"get", "list", "watch"}, "read only"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "prometheus-k8s",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring"}
    ]
    for obj in (role, binding):
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_the_service_monitor_scrapes_the_deployment_receivers_as_job_nodefence() -> None:
    monitor = yaml.safe_load(SERVICE_MONITOR.read_text())
    assert monitor["kind"] == "ServiceMonitor"
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    service = one(rendered("deployment"), "Service", "nodefence")
    labels = service["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert labels[monitor["spec"]["jobLabel"]] == "nodefence"
    ports = {p["name"] for p in service["spec"]["ports"]}
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= ports
    assert {e["path"] for e in monitor["spec"]["endpoints"]} == {"/metrics"}


def test_one_way_of_scraping_at_a_time() -> None:
    """PodMonitor by default; the ServiceMonitor is there to swap in, never beside it (every
    replica would be scraped twice and every rate doubled)."""
    kinds = {o["kind"] for o in monitoring()}
    assert "PodMonitor" in kinds
    assert "ServiceMonitor" not in kinds
    assert "# - servicemonitor.yaml" in (DEPLOY / "monitoring" / "kustomization.yaml").read_text()
