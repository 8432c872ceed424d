"""The Helm chart (deploy/helm/nodefence) through the real Helm v4 (``make helm`` builds it from
tools/helm; ``make test`` sets ``NODEFENCE_HELM``): ``helm lint``, ``helm template`` for the
defaults and every example values file, strict schema validation of what it renders, the values
schema's refusals, and the monitoring objects for either Prometheus Operator stack.

Without the binary these tests skip on a workstation; under CI they fail instead.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from . import crd_schema
from .conftest import DEPLOY, REPO, Obj, find, one, pod_templates

CHART = DEPLOY / "helm" / "nodefence"
EXAMPLES = sorted((DEPLOY / "helm" / "examples").glob("*.yaml"))
RELEASE = "nodefence"
NAMESPACE = "nodefence"
K8S_VERSION = "1.32"
CUSTOM_GROUPS = {"serving.knative.dev", "monitoring.coreos.com"}
# Custom kinds without a CRD in tests/deploy/crds: the tests check them field by field.
UNSCHEMED = {("cert-manager.io", "Issuer")}
RULES = REPO / "alertrules" / "nodefence.rules.yaml"
UID = 10001
# The networks the BMC inventory requires (networkPolicy.bmcNetworks, apiServerCIDRs).
BMC_NETWORKS = ["10.20.30.0/24", "10.20.40.0/24"]
API_SERVER = ["192.168.10.0/28", "10.96.0.1/32"]
NETWORKS = (
    f"networkPolicy.bmcNetworks={{{','.join(BMC_NETWORKS)}}},"
    f"networkPolicy.apiServerCIDRs={{{','.join(API_SERVER)}}}"
)


def helm_binary() -> str | None:
    configured = os.environ.get("NODEFENCE_HELM")
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    return shutil.which("helm")


MISSING = "Helm is absent (make helm builds it; make test sets NODEFENCE_HELM)"


def need_helm() -> str:
    helm = helm_binary()
    if helm is None:
        if os.environ.get("CI"):
            pytest.fail(MISSING)
        pytest.skip(MISSING)
    return helm


def helm_env(home: Path, **extra: str) -> dict[str, str]:
    """Helm's own state in a directory of the test's, never the user's."""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    env.update(extra)
    return env


def helm(
    *args: str, home: Path, check: bool = True, timeout: float = 120, **env: str
) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(
        [need_helm(), *args],
        capture_output=True,
        text=True,
        env=helm_env(home, **env),
        check=False,
        timeout=timeout,
    )
    if check:
        assert out.returncode == 0, f"helm {' '.join(args)} failed:\n{out.stdout}\n{out.stderr}"
    return out


def template(home: Path, *args: str, release: str = RELEASE) -> list[Obj]:
    out = helm("template", release, str(CHART), "--namespace", NAMESPACE, *args, home=home)
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


_cache: dict[tuple[str, ...], list[Obj]] = {}


def chart(home: Path, *args: str) -> list[Obj]:
    """The chart rendered once per set of arguments in a session."""
    if args not in _cache:
        _cache[args] = template(home, *args)
    return copy.deepcopy(_cache[args])


@pytest.fixture(scope="session")
def helm_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    need_helm()
    return tmp_path_factory.mktemp("helm-home")


def group_of(obj: Obj) -> str:
    api: str = obj["apiVersion"]
    return api.split("/", maxsplit=1)[0] if "/" in api else ""


def validate(objs: list[Obj]) -> set[str]:
    """Every object against its schema, strictly (the custom resources against their CRDs in
    tests/deploy/crds); the kinds checked."""
    checked: set[str] = set()
    for o in objs:
        if group_of(o) in CUSTOM_GROUPS or crd_schema.has_schema(o):
            crd_schema.validate(o)
        elif (group_of(o), o["kind"]) in UNSCHEMED:
            continue
        else:
            kubernetes_validate.validate(o, K8S_VERSION, strict=True)
        checked.add(o["kind"])
    return checked


def test_chart_versions_follow_the_package() -> None:
    from nodefence import __version__ as version

    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert meta["apiVersion"] == "v2"
    assert meta["appVersion"] == version
    assert meta["version"] == version


def test_helm_is_v4(helm_home: Path) -> None:
    out = helm("version", "--short", home=helm_home)
    assert out.stdout.startswith("v4."), out.stdout


@pytest.mark.parametrize("values", [None, *EXAMPLES], ids=lambda p: p.name if p else "defaults")
def test_helm_lint_is_clean(helm_home: Path, values: Path | None) -> None:
    args = ["-f", str(values)] if values else []
    out = helm("lint", "--strict", str(CHART), "--namespace", NAMESPACE, *args, home=helm_home)
    assert "1 chart(s) linted, 0 chart(s) failed" in out.stdout, out.stdout


def test_every_example_values_file_is_a_documented_example() -> None:
    assert {p.name for p in EXAMPLES} >= {
        "bmc-inventory.yaml",
        "knative.yaml",
        "kube-prometheus.yaml",
        "kube-prometheus-stack.yaml",
    }
    for path in EXAMPLES:
        assert path.read_text().startswith("# "), f"{path.name} says what it is for"


@pytest.mark.parametrize("values", [None, *EXAMPLES], ids=lambda p: p.name if p else "defaults")
def test_rendered_objects_validate_strictly(helm_home: Path, values: Path | None) -> None:
    objs = chart(helm_home, *(["-f", str(values)] if values else []))
    checked = validate(objs)
    assert {"Deployment", "Service"} & checked, "a receiver is rendered"
    assert {"ClusterRole", "Role", "ServiceAccount", "ConfigMap", "NetworkPolicy"} <= checked
    assert find(objs, "Secret") == [], "the chart never ships a secret value"
    assert find(objs, "Namespace") == [], "helm install --namespace owns the namespace"


def test_strict_validation_catches_an_unknown_field(helm_home: Path) -> None:
    """The validation above would see a mistake: an unknown field in a built-in object, and in
    the Knative Service, where the API server would prune it silently."""
    objs = chart(helm_home, "--set", "mode=knative")
    deployment = one(chart(helm_home), "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)
    ksvc = next(o for o in objs if group_of(o) == "serving.knative.dev")
    crd_schema.validate(ksvc)
    ksvc["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(jsonschema.ValidationError):
        crd_schema.validate(ksvc)


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["--set", "mode=daemonset"], "mode"),
        (["--set", "replica=3"], "replica"),
        (["--set", "bmcInventory.enable=true"], "enable"),
        (["--set", "monitoring.stack=kube-prometheus-stack"], "release"),
        (["--set", "monitoring.stack=prometheus"], "stack"),
        (["--set", "existingSecret="], "existingSecret"),
        (["--set", "reconcileCronJob.enabled=sometimes"], "enabled"),
        (["--set", "alertmanager.url=alertmanager:9093"], "url"),
        (["--set", "networkPolicy.bmcNetworks={bmc.example.internal}"], "bmcNetworks"),
        (["--set", "networkPolicy.apiServerCIDRs={10.0.0.1}"], "apiServerCIDRs"),
    ],
)
def test_values_schema_refuses_mistakes(helm_home: Path, args: list[str], complaint: str) -> None:
    out = helm("template", RELEASE, str(CHART), *args, home=helm_home, check=False)
    assert out.returncode != 0, out.stdout
    assert "schema" in out.stderr, out.stderr
    assert complaint in out.stderr, out.stderr


def pod_spec(objs: list[Obj], kind: str) -> Obj:
    workload = one(objs, kind)
    if kind == "CronJob":
        spec: Obj = workload["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        return spec
    spec = workload["spec"]["template"]["spec"]
    return spec


def test_modes_render_their_receiver_and_reconcile(helm_home: Path) -> None:
    deployment = chart(helm_home)
    assert {o["kind"] for o in deployment} >= {"Deployment", "PodDisruptionBudget", "Service"}
    assert find(deployment, "CronJob") == []
    knative = chart(helm_home, "--set", "mode=knative")
    assert find(knative, "Deployment") == []
    assert find(knative, "PodDisruptionBudget") == []
    assert [group_of(o) for o in find(knative, "Service")] == ["serving.knative.dev"]
    cron = one(knative, "CronJob")
    assert pod_spec(knative, "CronJob")["containers"][0]["args"] == ["reconcile"]
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    # Forced either way, whatever the mode.
    assert (
        find(chart(helm_home, "--set", "mode=knative,reconcileCronJob.enabled=false"), "CronJob")
        == []
    )
    extra = chart(helm_home, "--set", "reconcileCronJob.enabled=true")
    one(extra, "CronJob")
    policies = {o["metadata"]["name"] for o in find(extra, "NetworkPolicy")}
    assert policies == {
        "nodefence",
        "nodefence-receiver-alertmanager",
        "nodefence-reconcile-alertmanager",
    }


def test_this_clusters_alertmanager_matchers_reach_every_pass(helm_home: Path) -> None:
    """On a shared Alertmanager, the receivers' passes and the CronJob's ask for this cluster's
    alerts only; unset, no variable is rendered (the setting's default)."""
    matchers = 'cluster="prod-a"'
    objs = chart(
        helm_home,
        "--set-string",
        f"alertmanager.matchers={matchers}",
        "--set",
        "reconcileCronJob.enabled=true",
    )
    for kind in ("Deployment", "CronJob"):
        env = {e["name"]: e.get("value") for e in pod_spec(objs, kind)["containers"][0]["env"]}
        assert env["NODEFENCE_ALERTMANAGER_MATCHERS"] == matchers, kind
    plain = pod_spec(chart(helm_home), "Deployment")["containers"][0]["env"]
    assert "NODEFENCE_ALERTMANAGER_MATCHERS" not in {e["name"] for e in plain}


def test_bmc_inventory_comes_from_the_existing_secret_read_only(helm_home: Path) -> None:
    objs = chart(
        helm_home,
        "--set",
        "mode=knative,reconcileCronJob.enabled=true,bmcInventory.enabled=true",
        "--set",
        "bmcInventory.existingSecret=bmcs,bmcInventory.key=site-a.yaml",
        "--set",
        NETWORKS,
    )
    deployment = chart(helm_home, "--set", "bmcInventory.enabled=true", "--set", NETWORKS)
    specs = {
        "Deployment": pod_spec(deployment, "Deployment"),
        "Service": next(o for o in objs if group_of(o) == "serving.knative.dev")["spec"][
            "template"
        ]["spec"],
        "CronJob": pod_spec(objs, "CronJob"),
    }
    for kind, spec in specs.items():
        volume = next(v for v in spec["volumes"] if v["name"] == "bmc-inventory")
        # The Deployment's and CronJob's pods run with fsGroup 10001: 0440 for user 10001 alone;
        # Knative admits no fsGroup, so its files stay root's and are 0444.
        assert volume["secret"]["defaultMode"] == (0o444 if kind == "Service" else 0o440), kind
        container = spec["containers"][0]
        mount = next(m for m in container["volumeMounts"] if m["name"] == "bmc-inventory")
        assert mount["readOnly"] is True, kind
        env = {e["name"]: e.get("value") for e in container["env"]}
        path = Path(env["NODEFENCE_BMC_INVENTORY"])
        assert path.parent == Path(mount["mountPath"]), kind
        if kind != "Deployment":
            assert volume["secret"]["secretName"] == "bmcs", kind
            assert path.name == "site-a.yaml", kind
        else:
            assert volume["secret"]["secretName"] == "nodefence-bmc-inventory"
            assert path.name == "inventory.yaml"
    for spec in specs.values():
        assert spec["containers"][0]["envFrom"] == [{"secretRef": {"name": "nodefence-secrets"}}]
    # Off: nothing mounts it.
    default = pod_spec(chart(helm_home), "Deployment")
    assert "bmc-inventory" not in {v["name"] for v in default["volumes"]}


def test_the_token_secret_is_the_existing_one(helm_home: Path) -> None:
    objs = chart(helm_home, "--set", "existingSecret=nodefence-prod")
    container = pod_spec(objs, "Deployment")["containers"][0]
    assert container["envFrom"] == [{"secretRef": {"name": "nodefence-prod"}}]


def policy_configmap(objs: list[Obj]) -> Obj:
    (cm,) = [o for o in find(objs, "ConfigMap") if o["metadata"]["name"].endswith("-policy")]
    return cm


def test_policy_defaults_to_the_shipped_file_and_can_be_replaced(
    helm_home: Path, tmp_path: Path
) -> None:
    shipped = (DEPLOY / "base" / "policy.yaml").read_text()
    default = chart(helm_home)
    assert policy_configmap(default)["data"]["policy.yaml"] == shipped
    mine = "rules:\n  - name: default\n    fencing: {driver: none}\n"
    (tmp_path / "policy.yaml").write_text(mine)
    replaced = chart(helm_home, "--set-file", f"policy={tmp_path / 'policy.yaml'}")
    assert policy_configmap(replaced)["data"]["policy.yaml"] == mine
    as_yaml = chart(
        helm_home, "--set", "policy.rules[0].name=default,policy.rules[0].approval=slack"
    )
    assert yaml.safe_load(policy_configmap(as_yaml)["data"]["policy.yaml"]) == {
        "rules": [{"name": "default", "approval": "slack"}]
    }

    # A new policy rolls the pods: the checksum on the pod template follows the text.
    def checksum(objs: list[Obj]) -> str:
        annotations = one(objs, "Deployment")["spec"]["template"]["metadata"]["annotations"]
        value: str = annotations["checksum/policy"]
        return value

    assert len({checksum(default), checksum(replaced), checksum(as_yaml)}) == 3
    # The mounted file is the ConfigMap's key.
    container = pod_spec(default, "Deployment")["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert Path(env["NODEFENCE_POLICY_FILE"]).name in policy_configmap(default)["data"]


def test_pods_are_locked_down_in_every_example(helm_home: Path) -> None:
    for values in EXAMPLES:
        templates = pod_templates(chart(helm_home, "-f", str(values)))
        assert templates, values.name
        for label, tpl in templates:
            spec = tpl["spec"]
            where = f"{values.name}: {label}"
            assert spec["serviceAccountName"] == "nodefence", where
            for c in spec["containers"]:
                sc = c["securityContext"]
                assert sc["runAsNonRoot"] is True, where
                assert sc["runAsUser"] == UID, where
                assert sc["readOnlyRootFilesystem"] is True, where
                assert sc["allowPrivilegeEscalation"] is False, where
                assert sc["capabilities"] == {"drop": ["ALL"]}, where
                assert sc["seccompProfile"] == {"type": "RuntimeDefault"}, where
            for key in ("hostNetwork", "hostPID", "hostIPC"):
                assert not spec.get(key), where


def monitoring_objects(objs: list[Obj]) -> dict[str, Obj]:
    return {o["kind"]: o for o in objs if group_of(o) == "monitoring.coreos.com"}


def rules_groups(exclude: set[str]) -> list[Obj]:
    groups: list[Obj] = yaml.safe_load(RULES.read_text())["groups"]
    return [g for g in groups if g["name"] not in exclude]


def test_no_monitoring_object_without_a_stack(helm_home: Path) -> None:
    objs = chart(helm_home)
    assert monitoring_objects(objs) == {}
    assert not [
        o for o in find(objs, "ConfigMap") if "grafana_dashboard" in o["metadata"]["labels"]
    ]


def test_kube_prometheus_selects_the_rules_and_may_scrape(helm_home: Path) -> None:
    objs = chart(helm_home, "--set", "monitoring.stack=kube-prometheus")
    found = monitoring_objects(objs)
    assert set(found) == {"PodMonitor", "PrometheusRule"}
    rule = found["PrometheusRule"]
    assert rule["metadata"]["labels"]["prometheus"] == "k8s"
    assert rule["metadata"]["labels"]["role"] == "alert-rules"
    assert "release" not in rule["metadata"]["labels"]
    # The shipped rules, less the copy of KubeNodeNotReady/KubeNodeUnreachable the stack has.
    assert rule["spec"]["groups"] == rules_groups({"nodefence-node-alerts"})
    assert {g["name"] for g in rule["spec"]["groups"]} >= {"nodefence", "nodefence-trigger"}
    everything = chart(
        helm_home,
        "--set",
        "monitoring.stack=kube-prometheus,monitoring.prometheusRule.excludeGroups=null",
    )
    assert monitoring_objects(everything)["PrometheusRule"]["spec"]["groups"] == rules_groups(set())
    # prometheus-k8s may discover the pods here: read-only.
    role = one(objs, "Role", "prometheus-k8s")
    binding = one(objs, "RoleBinding", "prometheus-k8s")
    assert {v for r in role["rules"] for v in r["verbs"]} == {"get", "list", "watch"}
    assert {"pods", "endpoints", "services"} <= {x for r in role["rules"] for x in r["resources"]}
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring"}
    ]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]


@pytest.mark.parametrize("mode", ["deployment", "knative"])
def test_pod_monitor_scrapes_the_receivers_as_job_nodefence(helm_home: Path, mode: str) -> None:
    objs = chart(helm_home, "--set", f"mode={mode},monitoring.stack=kube-prometheus")
    monitor = monitoring_objects(objs)["PodMonitor"]
    selector = monitor["spec"]["selector"]["matchLabels"]
    receivers = [
        o
        for o in objs
        if o["kind"] in {"Deployment", "Service"} and "template" in o.get("spec", {})
    ]
    (receiver,) = receivers
    template = receiver["spec"]["template"]
    assert selector.items() <= template["metadata"]["labels"].items()
    assert template["metadata"]["labels"][monitor["spec"]["jobLabel"]] == "nodefence"
    ports = {p["name"] for p in template["spec"]["containers"][0]["ports"]}
    endpoints = monitor["spec"]["podMetricsEndpoints"]
    assert ports <= {e["port"] for e in endpoints}
    assert {e["path"] for e in endpoints} == {"/metrics"}
    # The reconcile pods are not scraped.
    for cron in find(objs, "CronJob"):
        labels = cron["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
        assert not selector.items() <= labels.items()


def test_kube_prometheus_stack_selects_by_release(helm_home: Path) -> None:
    objs = chart(
        helm_home,
        "--set",
        "monitoring.stack=kube-prometheus-stack,monitoring.release=kps",
    )
    found = monitoring_objects(objs)
    assert set(found) == {"PodMonitor", "PrometheusRule", "AlertmanagerConfig"}
    for kind, obj in found.items():
        assert obj["metadata"]["labels"]["release"] == "kps", kind
        assert "prometheus" not in obj["metadata"]["labels"], kind
    assert found["PrometheusRule"]["spec"]["groups"] == rules_groups({"nodefence-node-alerts"})
    # The routes to this release's receivers, beside kube-state-metrics (whose namespace the
    # node alerts carry), with the token from a Secret there.
    config = found["AlertmanagerConfig"]
    assert config["metadata"]["namespace"] == "monitoring"
    (receiver,) = config["spec"]["receivers"]
    (webhook,) = receiver["webhookConfigs"]
    assert webhook["url"] == f"http://nodefence.{NAMESPACE}.svc/alerts"
    assert webhook["sendResolved"] is True
    assert webhook["httpConfig"]["authorization"]["credentials"] == {
        "name": "nodefence-alert-token",
        "key": "token",
    }
    alerts = {
        name
        for m in config["spec"]["route"]["matchers"]
        if m["name"] == "alertname"
        for name in m["value"].split("|")
    }
    assert alerts == {"KubeNodeNotReady", "KubeNodeUnreachable", "NodefenceNodeNotReady"}
    # Its Prometheus reads every namespace already: no Role for prometheus-k8s.
    assert "prometheus-k8s" not in [r["metadata"]["name"] for r in find(objs, "Role")]
    dashboard = one(objs, "ConfigMap", "nodefence-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = (DEPLOY / "monitoring" / "nodefence-dashboard.json").read_text()
    assert dashboard["data"]["nodefence-dashboard.json"].strip() == shipped.strip()


def test_network_policy_follows_the_monitoring_namespace(helm_home: Path) -> None:
    objs = chart(helm_home, "--set", "monitoringNamespace=observability")
    namespaces = {
        peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
        for np in find(objs, "NetworkPolicy")
        for rule in np["spec"].get("ingress", []) + np["spec"]["egress"]
        for peer in rule.get("to", rule.get("from", []))
        if "podSelector" in peer and "k8s-app" not in peer["podSelector"]["matchLabels"]
    }
    assert namespaces == {"observability"}
    assert find(chart(helm_home, "--set", "networkPolicy.enabled=false"), "NetworkPolicy") == []


@pytest.mark.parametrize(
    ("listed", "missing"),
    [
        ("networkPolicy.apiServerCIDRs={10.96.0.1/32}", "networkPolicy.bmcNetworks"),
        ("networkPolicy.bmcNetworks={10.20.30.0/24}", "networkPolicy.apiServerCIDRs"),
    ],
)
def test_bmc_inventory_does_not_render_without_the_networks(
    helm_home: Path, listed: str, missing: str
) -> None:
    """With the inventory, a chart that would open the BMC ports or the API server's ports to
    any address fails with a message naming the value to set."""
    for args in (["--set", "bmcInventory.enabled=true"], ["--set", listed]):
        out = helm(
            "template",
            RELEASE,
            str(CHART),
            "--set",
            "bmcInventory.enabled=true",
            *args,
            home=helm_home,
            check=False,
        )
        assert out.returncode != 0, out.stdout
        assert "networkPolicy." in out.stderr, out.stderr
    out = helm(
        "template",
        RELEASE,
        str(CHART),
        "--set",
        f"bmcInventory.enabled=true,{listed}",
        home=helm_home,
        check=False,
    )
    assert out.returncode != 0, out.stdout
    assert f"{missing}: list" in out.stderr, out.stderr


def _reach(objs: list[Obj]) -> dict[tuple[int, str], list[str] | None]:
    """Per port, what the receivers may reach (None: any address)."""
    labels = pod_spec_labels(objs)
    reach: dict[tuple[int, str], list[str] | None] = {}
    for np in find(objs, "NetworkPolicy"):
        if not np["spec"]["podSelector"]["matchLabels"].items() <= labels.items():
            continue
        for rule in np["spec"].get("egress", []):
            for p in rule["ports"]:
                key = (p["port"], p["protocol"])
                if "to" not in rule:
                    reach[key] = None
                elif key not in reach or reach[key] is not None:
                    cidrs = [peer["ipBlock"]["cidr"] for peer in rule["to"] if "ipBlock" in peer]
                    reach[key] = [*(reach.get(key) or []), *cidrs]
    return reach


def pod_spec_labels(objs: list[Obj]) -> dict[str, str]:
    labels: dict[str, str] = one(objs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    return labels


def test_network_policy_egress_by_default_and_with_the_bmc_inventory(helm_home: Path) -> None:
    """By default: DNS and the API server's ports (to any address), no BMC port. With the
    inventory: the BMC ports to exactly bmcNetworks, the API server's to exactly
    apiServerCIDRs, nothing to any address; slackEgress adds 443 to public addresses only."""
    default = _reach(chart(helm_home))
    assert set(default) == {(53, "UDP"), (53, "TCP"), (443, "TCP"), (6443, "TCP"), (9093, "TCP")}
    assert default[(443, "TCP")] is None
    assert default[(6443, "TCP")] is None
    objs = chart(helm_home, "--set", "bmcInventory.enabled=true", "--set", NETWORKS)
    validate(objs)
    reach = _reach(objs)
    assert set(reach) == {
        (53, "UDP"),
        (53, "TCP"),
        (443, "TCP"),
        (6443, "TCP"),
        (8443, "TCP"),
        (623, "UDP"),
        (9093, "TCP"),
    }
    assert all(v is not None for v in reach.values()), reach
    assert reach[(623, "UDP")] == reach[(8443, "TCP")] == BMC_NETWORKS
    assert reach[(6443, "TCP")] == API_SERVER
    assert sorted(reach[(443, "TCP")] or []) == sorted(API_SERVER + BMC_NETWORKS)
    narrowed = _reach(
        chart(helm_home, "--set", f"networkPolicy.apiServerCIDRs={{{API_SERVER[1]}}}")
    )
    assert narrowed[(443, "TCP")] == narrowed[(6443, "TCP")] == [API_SERVER[1]]
    slack = chart(helm_home, "--set", "networkPolicy.slackEgress=true", "--set", NETWORKS)
    validate(slack)
    (policy,) = [
        np for np in find(slack, "NetworkPolicy") if np["metadata"]["name"].endswith("-slack")
    ]
    (rule,) = policy["spec"]["egress"]
    assert rule["ports"] == [{"port": 443, "protocol": "TCP"}]
    public = {peer["ipBlock"]["cidr"]: set(peer["ipBlock"]["except"]) for peer in rule["to"]}
    assert public.keys() == {"0.0.0.0/0", "::/0"}
    assert {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"} <= public[
        "0.0.0.0/0"
    ]


def test_a_release_of_another_name_keeps_its_objects_apart(helm_home: Path) -> None:
    objs = template(helm_home, release="site-a")
    names = {o["metadata"]["name"] for o in objs}
    assert "site-a-nodefence" in names
    binding = one(objs, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == "site-a-nodefence"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "site-a-nodefence", "namespace": NAMESPACE}
    ]
    deployment = one(objs, "Deployment")
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "site-a-nodefence"
    service = one(objs, "Service")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert labels["app.kubernetes.io/instance"] == "site-a"
    assert labels["app.kubernetes.io/name"] == "nodefence", "the scrape job's name"


def test_tls_serves_https_with_a_certificate_from_cert_manager(helm_home: Path) -> None:
    objs = chart(helm_home, "--set", "tls.enabled=true,monitoring.stack=kube-prometheus")
    # The reduced PodMonitor CRD in tests/deploy/crds leaves out an endpoint's scheme and
    # tlsConfig: the PodMonitor is checked field by field below.
    checked = validate([o for o in objs if o["kind"] != "PodMonitor"])
    assert {"Certificate", "Deployment", "Service"} <= checked
    certificate = one(objs, "Certificate", "nodefence-tls")
    assert certificate["spec"]["secretName"] == "nodefence-tls"
    assert f"nodefence.{NAMESPACE}.svc" in certificate["spec"]["dnsNames"]
    # Signed by the release's own CA, which a self-signed issuer signs.
    assert certificate["spec"]["issuerRef"]["name"] == "nodefence-ca"
    ca = one(objs, "Issuer", "nodefence-ca")
    assert (
        one(objs, "Certificate", "nodefence-ca")["spec"]["secretName"]
        == ca["spec"]["ca"]["secretName"]
    )
    one(objs, "Issuer", "nodefence-selfsigned")
    spec = pod_spec(objs, "Deployment")
    container = spec["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    mount = next(m for m in container["volumeMounts"] if m["name"] == "tls")
    volume = next(v for v in spec["volumes"] if v["name"] == "tls")
    assert volume["secret"]["secretName"] == "nodefence-tls"
    assert volume["secret"]["defaultMode"] == 0o440
    assert Path(env["NODEFENCE_TLS_CERT_FILE"]).parent == Path(mount["mountPath"])
    assert Path(env["NODEFENCE_TLS_KEY_FILE"]).parent == Path(mount["mountPath"])
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert container["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    (port,) = one(objs, "Service", "nodefence")["spec"]["ports"]
    assert (port["name"], port["port"], port["targetPort"]) == ("https", 443, "http")
    endpoint = monitoring_objects(objs)["PodMonitor"]["spec"]["podMetricsEndpoints"][0]
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"]["ca"]["secret"] == {"name": "nodefence-tls", "key": "ca.crt"}


def test_tls_from_an_issuer_or_a_secret_of_ones_own(helm_home: Path) -> None:
    issued = chart(
        helm_home,
        "--set",
        "tls.enabled=true,tls.issuerRef.name=corp-ca,tls.issuerRef.kind=ClusterIssuer",
    )
    assert find(issued, "Issuer") == []
    assert one(issued, "Certificate")["spec"]["issuerRef"] == {
        "name": "corp-ca",
        "kind": "ClusterIssuer",
    }
    provided = chart(helm_home, "--set", "tls.enabled=true,tls.existingSecret=my-tls")
    assert find(provided, "Certificate") == []
    assert find(provided, "Issuer") == []
    volume = next(v for v in pod_spec(provided, "Deployment")["volumes"] if v["name"] == "tls")
    assert volume["secret"]["secretName"] == "my-tls"
    # Knative encrypts in its own layer: its Service is left alone.
    knative = chart(helm_home, "--set", "mode=knative,tls.enabled=true")
    assert find(knative, "Certificate") == []
    ksvc = next(o for o in knative if group_of(o) == "serving.knative.dev")
    container = ksvc["spec"]["template"]["spec"]["containers"][0]
    assert "NODEFENCE_TLS_CERT_FILE" not in {e["name"] for e in container["env"]}


def test_kube_prometheus_stack_posts_over_https_when_tls_is_on(helm_home: Path) -> None:
    objs = chart(
        helm_home,
        "--set",
        "tls.enabled=true,monitoring.stack=kube-prometheus-stack,monitoring.release=kps",
    )
    config = monitoring_objects(objs)["AlertmanagerConfig"]
    (webhook,) = config["spec"]["receivers"][0]["webhookConfigs"]
    (port,) = one(objs, "Service", "nodefence")["spec"]["ports"]
    assert webhook["url"] == f"https://nodefence.{NAMESPACE}.svc/alerts"
    assert port["port"] == 443
    tls = webhook["httpConfig"]["tlsConfig"]
    assert tls["ca"]["secret"] == {"name": "nodefence-tls-ca", "key": "ca.crt"}
    assert tls["serverName"] == f"nodefence.{NAMESPACE}.svc"
    # The token is still sent.
    assert webhook["httpConfig"]["authorization"]["credentials"]["name"] == "nodefence-alert-token"


def test_admission_policies_bind_this_releases_account(helm_home: Path) -> None:
    objs = template(helm_home, release="site-a")
    validate(objs)
    policies = find(objs, "ValidatingAdmissionPolicy")
    bindings = find(objs, "ValidatingAdmissionPolicyBinding")
    assert {p["metadata"]["name"] for p in policies} == {
        "site-a-nodefence-node-writes",
        "site-a-nodefence-pod-deletes",
    }
    assert {b["spec"]["policyName"] for b in bindings} == {p["metadata"]["name"] for p in policies}
    for policy in policies:
        (condition,) = policy["spec"]["matchConditions"]
        account = f"system:serviceaccount:{NAMESPACE}:site-a-nodefence"
        assert condition["expression"] == f"request.userInfo.username == '{account}'"
        assert policy["spec"]["failurePolicy"] == "Fail"
    # The pod policy's parameters are every Node.
    pods = one(objs, "ValidatingAdmissionPolicyBinding", "site-a-nodefence-pod-deletes")
    assert pods["spec"]["paramRef"] == {"selector": {}, "parameterNotFoundAction": "Deny"}


def test_admission_policies_are_on_by_default_and_refused_where_not_served(
    helm_home: Path,
) -> None:
    assert len(find(chart(helm_home), "ValidatingAdmissionPolicy")) == 2
    off = chart(helm_home, "--set", "admissionPolicies.enabled=false")
    assert find(off, "ValidatingAdmissionPolicy") == []
    assert find(off, "ValidatingAdmissionPolicyBinding") == []
    # An API server older than 1.30 serves no ValidatingAdmissionPolicy: the install says so
    # and names the switch, instead of running without the policies unnoticed.
    old = helm(
        "template",
        RELEASE,
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--kube-version",
        "1.29.4",
        home=helm_home,
        check=False,
    )
    assert old.returncode != 0
    assert "admissionPolicies.enabled=false" in old.stderr, old.stderr
    assert "Kubernetes 1.30 or newer" in old.stderr, old.stderr
    older = chart(helm_home, "--kube-version", "1.29.4", "--set", "admissionPolicies.enabled=false")
    assert find(older, "Deployment")


def notes(helm_home: Path, *args: str) -> str:
    """The NOTES ``helm install`` prints, rendered without a cluster."""
    out = helm(
        "install",
        RELEASE,
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--dry-run=client",
        *args,
        home=helm_home,
    ).stdout
    assert "NOTES:" in out, out
    return out.split("NOTES:", 1)[1]


def nodefence_commands(text: str) -> list[list[str]]:
    """The commands the NOTES give to run (indented lines), without the program's name."""
    return [line.split()[1:] for line in text.splitlines() if line.startswith("  nodefence ")]


def test_the_notes_commands_are_ones_the_cli_accepts(helm_home: Path) -> None:
    commands = nodefence_commands(notes(helm_home))
    assert [c[0] for c in commands] == ["status", "check-fencing"], commands
    for command in commands:
        assert command[1:] == ["-n", NAMESPACE], command
        parsed = subprocess.run(
            [sys.executable, "-m", "nodefence", *command, "--help"],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert parsed.returncode == 0, (command, parsed.stderr)
    # The order the NOTES had before: refused by the CLI.
    wrong = subprocess.run(
        [sys.executable, "-m", "nodefence", "-n", NAMESPACE, "status", "--help"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert wrong.returncode == 2


def test_the_notes_name_the_route_to_merge_only_when_the_chart_did_not_install_it(
    helm_home: Path,
) -> None:
    plain = notes(helm_home)
    assert "deploy/alertmanager/nodefence-route.yaml" in plain
    assert "AlertmanagerConfig" not in plain
    stack = "monitoring.stack=kube-prometheus-stack,monitoring.release=kps"
    installed = notes(helm_home, "--set", stack)
    assert "nodefence-route.yaml" not in installed
    assert "installed the AlertmanagerConfig nodefence in namespace monitoring" in installed
    assert "nodefence-alert-token" in installed
    without = notes(helm_home, "--set", f"{stack},monitoring.alertmanagerConfig.enabled=false")
    assert "deploy/alertmanager/nodefence-route.yaml" in without
    tls = notes(helm_home, "--set", "tls.enabled=true")
    assert f"https://nodefence.{NAMESPACE}.svc/alerts" in tls
