"""nodefence survives the node it should fence: two receivers kept on two nodes by a hard
constraint that still lets a single schedulable node run both, and a PriorityClass that lets a
replacement preempt ordinary pods in a full cluster; the same for the Knative Service where its
feature flags allow it."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from . import crd_schema
from .conftest import DEPLOY, Obj, find, kustomize, one, pod_templates, rendered

K8S_VERSION = "1.32"
# The highest value Kubernetes admits for a class other than the system-* ones.
HIGHEST_USER_PRIORITY = 1_000_000_000
PLACEMENT = DEPLOY / "components" / "knative-placement"


def priority_class(objs: list[Obj]) -> Obj:
    (pc,) = find(objs, "PriorityClass")
    return pc


def receiver_spread(spec: Obj, labels: dict[str, str]) -> Obj:
    (spread,) = spec["topologySpreadConstraints"]
    assert spread["labelSelector"]["matchLabels"].items() <= labels.items()
    return spread


def assert_two_nodes_where_there_are_two(spread: Obj) -> None:
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert spread["maxSkew"] == 1
    # Hard: a second replica never joins the first while another node can take it.
    assert spread["whenUnsatisfiable"] == "DoNotSchedule"
    # A dead (unreachable) or cordoned node is no domain: the replacement of its replica
    # starts on a survivor instead of waiting for it.
    assert spread["nodeTaintsPolicy"] == "Honor"
    assert spread.get("nodeAffinityPolicy", "Honor") == "Honor"
    # One schedulable node runs both replicas rather than leaving one Pending for ever.
    assert "minDomains" not in spread


@pytest.mark.parametrize("overlay", ["deployment", "knative"])
def test_the_priority_class_ranks_above_workloads_and_below_the_system(overlay: str) -> None:
    pc = priority_class(rendered(overlay))
    kubernetes_validate.validate(pc, K8S_VERSION, strict=True)
    assert 0 < pc["value"] <= HIGHEST_USER_PRIORITY
    assert pc["globalDefault"] is False
    assert pc.get("preemptionPolicy", "PreemptLowerPriority") == "PreemptLowerPriority"
    assert not pc["metadata"]["name"].startswith("system-")
    assert "namespace" not in pc["metadata"]


def test_the_receivers_are_spread_hard_and_preempt_in_a_full_cluster() -> None:
    objs = rendered("deployment")
    dep = one(objs, "Deployment", "nodefence")
    spec = dep["spec"]["template"]["spec"]
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert dep["spec"]["replicas"] == 2
    assert spec["priorityClassName"] == priority_class(objs)["metadata"]["name"]
    assert_two_nodes_where_there_are_two(receiver_spread(spec, labels))
    # No required anti-affinity beside it: that would keep a replacement Pending while only
    # its sibling's node is left, and block a surge pod of a rollout on two nodes.
    assert "podAntiAffinity" not in spec.get("affinity", {})
    # A rollout adds one pod before it removes one: a spread of maxSkew 1 over two nodes
    # admits the surge pod (2 + 1), so rollouts never wait on the constraint.
    assert dep["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}


def test_the_reconcile_cronjob_has_the_receivers_priority() -> None:
    objs = rendered("knative")
    templates = dict(pod_templates(objs))
    cron = templates["CronJob/nodefence-reconcile"]["spec"]
    assert cron["priorityClassName"] == priority_class(objs)["metadata"]["name"]
    kubernetes_validate.validate(
        one(objs, "CronJob", "nodefence-reconcile"), K8S_VERSION, strict=True
    )


def knative_service(objs: list[Obj]) -> Obj:
    (service,) = [o for o in objs if o["apiVersion"] == "serving.knative.dev/v1"]
    return service


def test_the_shipped_knative_service_needs_no_feature_flag() -> None:
    """Knative refuses priorityClassName and topologySpreadConstraints unless their feature
    flags are on, so the overlay ships without them; it is valid for the Knative CRD."""
    service = knative_service(rendered("knative"))
    crd_schema.validate(service)
    spec = service["spec"]["template"]["spec"]
    assert "priorityClassName" not in spec
    assert "topologySpreadConstraints" not in spec


def with_placement(tmp_path: Path) -> list[Obj]:
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(DEPLOY / "overlays" / "knative", tmp_path)],
                "components": [os.path.relpath(PLACEMENT, tmp_path)],
            }
        )
    )
    return kustomize(tmp_path, "--load-restrictor", "LoadRestrictionsNone")


def test_the_knative_placement_component_gives_the_deployments_placement(
    tmp_path: Path,
) -> None:
    objs = with_placement(tmp_path)
    service = knative_service(objs)
    crd_schema.validate(service)
    template = service["spec"]["template"]
    spec = template["spec"]
    annotations = template["metadata"]["annotations"]
    assert annotations["autoscaling.knative.dev/min-scale"] == "2"
    assert int(annotations["autoscaling.knative.dev/max-scale"]) >= 2
    assert spec["priorityClassName"] == priority_class(objs)["metadata"]["name"]
    deployment_spread = receiver_spread(
        one(rendered("deployment"), "Deployment", "nodefence")["spec"]["template"]["spec"],
        template["metadata"]["labels"],
    )
    assert receiver_spread(spec, template["metadata"]["labels"]) == deployment_spread
    # The rest of the Service is the overlay's.
    shipped = knative_service(rendered("knative"))["spec"]["template"]["spec"]
    assert spec["containers"] == shipped["containers"]
    assert spec["volumes"] == shipped["volumes"]
    # The flags it needs are named where it is enabled.
    text = (PLACEMENT / "kustomization.yaml").read_text()
    for flag in (
        "kubernetes.podspec-priorityclassname",
        "kubernetes.podspec-topologyspreadconstraints",
    ):
        assert flag in text
    # Knative runs the template as a pod: valid as one, with the probes' port filled in.
    pod_spec = {
        k: v for k, v in spec.items() if k not in {"containerConcurrency", "timeoutSeconds"}
    }
    pod_spec = copy.deepcopy(pod_spec)
    for container in pod_spec["containers"]:
        for probe in ("readinessProbe", "livenessProbe"):
            container[probe]["httpGet"]["port"] = container["ports"][0]["containerPort"]
    kubernetes_validate.validate(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "nodefence", "labels": template["metadata"]["labels"]},
            "spec": pod_spec,
        },
        K8S_VERSION,
        strict=True,
    )


def test_the_knative_crd_refuses_a_misplaced_placement_field(tmp_path: Path) -> None:
    service = knative_service(with_placement(tmp_path))
    misplaced = copy.deepcopy(service)
    spread = misplaced["spec"]["template"]["spec"].pop("topologySpreadConstraints")
    misplaced["spec"]["topologySpreadConstraints"] = spread
    with pytest.raises(jsonschema.ValidationError):
        crd_schema.validate(misplaced)


def test_the_readme_explains_the_placement_and_where_the_monitoring_stack_runs() -> None:
    """nodefence acts only on alerts: an Alertmanager or Prometheus on the dead node stops it."""
    readme = (DEPLOY / "README.md").read_text()
    section = readme.split("\n## Placement: nodefence survives its node\n", 1)[1]
    section = " ".join(section.split("\n## ", 1)[0].split())
    for said in (
        "whenUnsatisfiable: DoNotSchedule",
        "nodeTaintsPolicy: Honor",
        "There is no `minDomains`",
        "required `podAntiAffinity`",
        "`nodefence-critical`",
        "`system-cluster-critical`",
        "`components/knative-placement`" if False else "../../components/knative-placement",
        "Keep Prometheus, Alertmanager and kube-state-metrics off the nodes they watch",
        "run Prometheus and Alertmanager with two replicas on two nodes",
    ):
        assert said in section, said
    pc = priority_class(rendered("deployment"))
    assert f"value {pc['value']}" in section
    assert PLACEMENT.is_dir()
