"""The variants for the monitoring stacks operators run: kube-prometheus (jsonnet) and
kube-prometheus-stack (Helm). Each renders with the labels its Prometheus and Alertmanager select,
leaves out the node alerts the stack already evaluates, points the reconcile pass at the stack's
Alertmanager Service, and passes strict validation against the Prometheus Operator's CRDs."""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from . import crd_schema
from .conftest import DEPLOY, REPO, Obj, find, kustomize, kustomize_run, one, pod_templates

K8S_VERSION = "1.32"
STACKS = DEPLOY / "stacks"
RULES = REPO / "alertrules"
NODE_GROUP = "nodefence-node-alerts"
KUBE_PROMETHEUS_URL = "http://alertmanager-main.monitoring.svc:9093"
SNIPPET = DEPLOY / "alertmanager" / "nodefence-route.yaml"


def rules_file() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((RULES / "nodefence.rules.yaml").read_text())
    return data


def group_names() -> list[str]:
    return [g["name"] for g in rules_file()["groups"]]


def alerts_of(groups: list[dict[str, Any]]) -> set[str]:
    return {r["alert"] for g in groups for r in g["rules"]}


def stack_values() -> dict[str, str]:
    config = yaml.safe_load((STACKS / "kube-prometheus-stack" / "stack.yaml").read_text())
    values: dict[str, str] = config["data"]
    return values


def render(stack: str) -> list[Obj]:
    return kustomize(STACKS / stack)


def custom(objs: list[Obj]) -> list[Obj]:
    return [o for o in objs if o["apiVersion"].startswith("monitoring.coreos.com/")]


def alertmanager_url(template: Obj) -> str:
    container = template["spec"]["containers"][0]
    env = {e["name"]: e.get("value", "") for e in container["env"]}
    return env["NODEFENCE_ALERTMANAGER_URL"]


def test_alertrules_render_with_kustomize_as_the_file_says() -> None:
    (rule,) = kustomize(RULES)
    assert rule == yaml.safe_load((RULES / "prometheusrule.yaml").read_text())
    assert rule["metadata"]["namespace"] == "monitoring"
    assert [g["name"] for g in rule["spec"]["groups"]] == group_names()


def test_the_node_alert_group_comes_first_as_the_components_test_for() -> None:
    """The components drop group 0 after testing its name: the rules files keep it first."""
    assert group_names()[0] == NODE_GROUP
    spec = yaml.safe_load((RULES / "prometheusrule.yaml").read_text())["spec"]
    assert spec["groups"][0]["name"] == NODE_GROUP


@pytest.mark.parametrize("stack", ["kube-prometheus", "kube-prometheus-stack"])
def test_each_stack_loads_every_alert_but_the_stacks_own_node_alerts(stack: str) -> None:
    (rule,) = find(render(stack), "PrometheusRule")
    groups = rule["spec"]["groups"]
    assert [g["name"] for g in groups] == [n for n in group_names() if n != NODE_GROUP]
    loaded = alerts_of(groups)
    node_alerts = alerts_of([g for g in rules_file()["groups"] if g["name"] == NODE_GROUP])
    assert node_alerts == {"KubeNodeNotReady", "KubeNodeUnreachable"}
    # The stack's own KubeNodeNotReady is the only one: ours would double it and flap.
    assert loaded.isdisjoint(node_alerts)
    # The trigger and every alert on nodefence itself are there, rule for rule.
    everything = alerts_of(rules_file()["groups"])
    assert loaded == everything - node_alerts
    assert "NodefenceNodeNotReady" in loaded
    kept = [g for g in rules_file()["groups"] if g["name"] != NODE_GROUP]
    assert groups == kept


def test_kube_prometheus_stack_selects_by_the_release_label() -> None:
    objs = render("kube-prometheus-stack")
    release = stack_values()["release"]
    monitoring = custom(objs)
    assert {o["kind"] for o in monitoring} == {"PrometheusRule", "PodMonitor", "AlertmanagerConfig"}
    for obj in monitoring:
        labels = obj["metadata"]["labels"]
        assert labels["release"] == release, obj["kind"]
        # kube-prometheus' rule labels would select nothing there and mislead a reader.
        assert "prometheus" not in labels, obj["kind"]
        assert "role" not in labels, obj["kind"]
    # The chart's Prometheus reads pods cluster-wide: kube-prometheus' Role is not shipped.
    assert find(objs, "Role", "prometheus-k8s") == []
    assert find(objs, "RoleBinding", "prometheus-k8s") == []
    # The stack's settings are read by Kustomize and never applied.
    assert find(objs, "ConfigMap", "nodefence-stack") == []


def test_kube_prometheus_keeps_its_selector_labels_and_prometheus_role() -> None:
    objs = render("kube-prometheus")
    (rule,) = find(objs, "PrometheusRule")
    assert rule["metadata"]["labels"]["prometheus"] == "k8s"
    assert rule["metadata"]["labels"]["role"] == "alert-rules"
    assert "release" not in rule["metadata"]["labels"]
    one(objs, "Role", "prometheus-k8s")
    one(objs, "RoleBinding", "prometheus-k8s")
    # Its Alertmanager selects no AlertmanagerConfig: the route is merged by hand instead.
    assert find(objs, "AlertmanagerConfig") == []
    (template,) = [t for label, t in pod_templates(objs) if label == "Deployment/nodefence"]
    assert alertmanager_url(template) == KUBE_PROMETHEUS_URL


def test_kube_prometheus_stack_asks_the_charts_alertmanager() -> None:
    objs = render("kube-prometheus-stack")
    url = stack_values()["alertmanagerURL"]
    assert url == "http://kube-prometheus-stack-alertmanager.monitoring.svc:9093"
    (template,) = [t for label, t in pod_templates(objs) if label == "Deployment/nodefence"]
    assert alertmanager_url(template) == url
    # The NetworkPolicy still lets the receivers reach it: the operator labels every
    # Alertmanager pod app.kubernetes.io/name: alertmanager, in the chart's namespace.
    np = one(objs, "NetworkPolicy", "nodefence-receiver-alertmanager")
    (peer,) = np["spec"]["egress"][0]["to"]
    host = re.fullmatch(r"http://([a-z0-9-]+)\.([a-z0-9-]+)\.svc:9093", url)
    assert host is not None
    assert peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": host[2]}


@pytest.mark.parametrize("stack", ["kube-prometheus", "kube-prometheus-stack"])
def test_custom_resources_pass_strict_validation_against_the_operators_crds(stack: str) -> None:
    objs = render(stack)
    checked = {o["kind"] for o in custom(objs)}
    for obj in custom(objs):
        crd_schema.validate(obj)
    assert {"PrometheusRule", "PodMonitor"} <= checked
    # And everything else is a valid built-in object.
    for obj in objs:
        if not crd_schema.has_schema(obj) and "monitoring.coreos.com" not in obj["apiVersion"]:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_strict_validation_refuses_unknown_and_ill_typed_fields() -> None:
    objs = render("kube-prometheus-stack")
    rule = one(objs, "PrometheusRule", "nodefence")
    amcfg = one(objs, "AlertmanagerConfig", "nodefence")
    monitor = one(objs, "PodMonitor", "nodefence")
    broken: list[Obj] = []
    typo = copy.deepcopy(rule)
    typo["spec"]["groups"][0]["rules"][0]["fro"] = "1m"
    broken.append(typo)
    bad_for = copy.deepcopy(rule)
    bad_for["spec"]["groups"][0]["rules"][0]["for"] = "one minute"
    broken.append(bad_for)
    plain_token = copy.deepcopy(amcfg)
    plain_token["spec"]["receivers"][0]["webhookConfigs"][0]["httpConfig"]["authorization"][
        "credentials"
    ] = "the-token"
    broken.append(plain_token)
    snake = copy.deepcopy(amcfg)
    snake["spec"]["route"]["group_wait"] = "30s"
    broken.append(snake)
    port = copy.deepcopy(monitor)
    port["spec"]["podMetricsEndpoints"][0]["targetPorts"] = 8080
    broken.append(port)
    for obj in broken:
        with pytest.raises(jsonschema.ValidationError):
            crd_schema.validate(obj)


def test_alertmanagerconfig_routes_as_the_plain_route_does() -> None:
    amcfg = one(render("kube-prometheus-stack"), "AlertmanagerConfig", "nodefence")
    assert amcfg["apiVersion"] == "monitoring.coreos.com/v1alpha1"
    # In kube-state-metrics' namespace, whose label the node alerts carry (the operator
    # restricts a first-level route to its object's namespace), beside the token's Secret.
    assert amcfg["metadata"]["namespace"] == "monitoring"
    snippet = yaml.safe_load(SNIPPET.read_text())
    route = amcfg["spec"]["route"]
    receiver = snippet["receiver"]["name"]
    assert route["receiver"] == receiver
    assert route["groupBy"] == snippet["route"]["group_by"]

    def matched(r: Obj) -> set[str]:
        (m,) = r["matchers"]
        assert m["name"] == "alertname"
        assert m["matchType"] in {"=", "=~"}
        return set(m["value"].split("|"))

    node, trigger = route["routes"]
    node_alerts = alerts_of([g for g in rules_file()["groups"] if g["name"] == NODE_GROUP])
    trigger_alerts = alerts_of([g for g in rules_file()["groups"] if g["name"] != NODE_GROUP])
    assert matched(node) == node_alerts
    assert matched(trigger) == {"NodefenceNodeNotReady"} <= trigger_alerts
    assert matched(route) == matched(node) | matched(trigger)
    for child, plain in ((node, snippet["route"]), (trigger, snippet["trigger_route"])):
        assert child["receiver"] == plain["receiver"]
        assert child["groupWait"] == plain["group_wait"]
        assert child["groupInterval"] == plain["group_interval"]
        assert child["repeatInterval"] == plain["repeat_interval"]
        assert child.get("continue", False) is False
    (plain_hook,) = snippet["receiver"]["webhook_configs"]
    ((name, hooks),) = [(r["name"], r["webhookConfigs"]) for r in amcfg["spec"]["receivers"]]
    assert name == receiver
    (hook,) = hooks
    assert hook["url"] == plain_hook["url"]
    assert hook["sendResolved"] is plain_hook["send_resolved"] is True
    assert hook["maxAlerts"] == plain_hook["max_alerts"] == 0


def test_alertmanagerconfig_reads_the_token_from_the_secret_operators_create() -> None:
    amcfg = one(render("kube-prometheus-stack"), "AlertmanagerConfig", "nodefence")
    (hook,) = amcfg["spec"]["receivers"][0]["webhookConfigs"]
    auth = hook["httpConfig"]["authorization"]
    assert auth["type"] == "Bearer"
    ref = auth["credentials"]
    assert set(ref) == {"name", "key"}
    # A Secret reference only: no token in any field of the object.
    text = yaml.safe_dump(amcfg)
    assert "replace-with" not in text
    examples = [d for d in yaml.safe_load_all((DEPLOY / "secret.example.yaml").read_text()) if d]
    secret = next(d for d in examples if d["metadata"]["name"] == ref["name"])
    assert ref["key"] in secret["stringData"]
    # The operator reads it from the AlertmanagerConfig's own namespace.
    assert secret["metadata"]["namespace"] == amcfg["metadata"]["namespace"]
    readme = (DEPLOY / "README.md").read_text()
    assert (
        f"kubectl -n {secret['metadata']['namespace']} create secret generic {ref['name']} "
        f'--from-literal={ref["key"]}="$TOKEN"' in readme
    )


def test_a_reordered_rules_file_fails_the_build_instead_of_dropping_a_group(
    tmp_path: Path,
) -> None:
    rules = tmp_path / "alertrules"
    rules.mkdir()
    resource = yaml.safe_load((RULES / "prometheusrule.yaml").read_text())
    resource["spec"]["groups"].append(resource["spec"]["groups"].pop(0))
    (rules / "prometheusrule.yaml").write_text(yaml.safe_dump(resource))
    shutil.copy(RULES / "kustomization.yaml", rules / "kustomization.yaml")
    for stack in ("kube-prometheus", "kube-prometheus-stack"):
        top = tmp_path / stack
        top.mkdir()
        (top / "kustomization.yaml").write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kustomize.config.k8s.io/v1beta1",
                    "kind": "Kustomization",
                    "resources": ["../alertrules"],
                    "components": [os.path.relpath(DEPLOY / "components" / stack, top)],
                }
            )
        )
        out = kustomize_run(top, "--load-restrictor", "LoadRestrictionsNone")
        assert out.returncode != 0, stack
        assert "testing value /spec/groups/0/name failed" in out.stderr, out.stderr


def test_the_kube_prometheus_stack_component_wires_the_knative_overlay_too(
    tmp_path: Path,
) -> None:
    """With Knative the reconcile CronJob asks Alertmanager; the component points it at the
    chart's Service, and the Knative Service stays valid for its CRD."""
    (tmp_path / "stack.yaml").write_text(
        (STACKS / "kube-prometheus-stack" / "stack.yaml").read_text()
    )
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [
                    "stack.yaml",
                    os.path.relpath(DEPLOY / "overlays" / "knative", tmp_path),
                    os.path.relpath(DEPLOY / "monitoring", tmp_path),
                ],
                "components": [
                    os.path.relpath(DEPLOY / "components" / "kube-prometheus-stack", tmp_path)
                ],
            }
        )
    )
    objs = kustomize(tmp_path, "--load-restrictor", "LoadRestrictionsNone")
    templates = dict(pod_templates(objs))
    assert (
        alertmanager_url(templates["CronJob/nodefence-reconcile"])
        == (stack_values()["alertmanagerURL"])
    )
    service = next(o for o in objs if o["apiVersion"] == "serving.knative.dev/v1")
    crd_schema.validate(service)
    assert (
        one(objs, "PodMonitor", "nodefence")["metadata"]["labels"]["release"]
        == (stack_values()["release"])
    )


def readme_section(title: str) -> str:
    text = (DEPLOY / "README.md").read_text()
    return text.split(f"\n### {title}\n", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]


def joined(block: str) -> str:
    """Shell lines with their backslash continuations joined, as the shell reads them."""
    return re.sub(r"\s*\\\n\s*", " ", block)


def shell_blocks(section: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", section, flags=re.S)


@pytest.mark.parametrize("stack", ["kube-prometheus", "kube-prometheus-stack"])
def test_each_stack_section_is_a_sequence_that_applies_its_kustomization(stack: str) -> None:
    first = shell_blocks(readme_section(stack))[0]
    lines = [line for line in joined(first).splitlines() if line.strip()]
    # The Secrets before the manifests (the pods need nodefence-secrets), then the stack.
    applies = [i for i, line in enumerate(lines) if "kubectl apply -k" in line]
    (apply_at,) = applies
    assert lines[apply_at].split("kubectl apply -k ", 1)[1].strip() == f"deploy/stacks/{stack}"
    secrets = [i for i, line in enumerate(lines) if "create secret generic" in line]
    assert secrets
    assert max(secrets) < apply_at
    text = "\n".join(lines)
    objs = render(stack)
    (template,) = [t for label, t in pod_templates(objs) if label == "Deployment/nodefence"]
    (env_from,) = template["spec"]["containers"][0]["envFrom"]
    assert (
        f"-n nodefence create secret generic {env_from['secretRef']['name']} "
        '--from-literal=NODEFENCE_ALERT_TOKEN="$TOKEN"' in text
    )
    token_secret = "kubectl -n monitoring create secret generic nodefence-alert-token"
    assert f'{token_secret} --from-literal=token="$TOKEN"' in text
    for amcfg in find(objs, "AlertmanagerConfig"):
        ref = amcfg["spec"]["receivers"][0]["webhookConfigs"][0]["httpConfig"]["authorization"]
        assert ref["credentials"] == {"name": "nodefence-alert-token", "key": "token"}
        assert amcfg["metadata"]["namespace"] == "monitoring"


def test_the_copy_for_another_release_renders_for_that_release(tmp_path: Path) -> None:
    """The README's commands that copy and edit the stack directory, run as written on a copy
    of the repository's manifests; the Service name is what `kubectl get service` would print."""
    (block,) = [b for b in shell_blocks(readme_section("kube-prometheus-stack")) if "RELEASE=" in b]
    commands = joined(block)
    edits = [line for line in commands.splitlines() if line.startswith(("cp ", "sed "))]
    assert len(edits) == 2, edits
    shutil.copytree(DEPLOY, tmp_path / "deploy")
    shutil.copytree(RULES, tmp_path / "alertrules")
    release, service = "prometheus", "prometheus-kube-prometheus-alertmanager"
    script = tmp_path / "edit.sh"
    script.write_text("set -eu\n" + "\n".join(edits) + "\n")
    out = subprocess.run(
        ["bash", str(script)],
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"], "RELEASE": release, "SERVICE": service},
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert re.search(r"^RELEASE=\S+", block, flags=re.M)
    assert "SERVICE=$(kubectl -n monitoring get service" in commands
    assert 'kubectl apply -k "deploy/stacks/release-$RELEASE"' in commands
    objs = kustomize(tmp_path / "deploy" / "stacks" / f"release-{release}")
    for obj in custom(objs):
        assert obj["metadata"]["labels"]["release"] == release, obj["kind"]
    (template,) = [t for label, t in pod_templates(objs) if label == "Deployment/nodefence"]
    assert alertmanager_url(template) == f"http://{service}.monitoring.svc:9093"
    # The shipped directory is left as it was.
    assert stack_values()["release"] == "kube-prometheus-stack"
