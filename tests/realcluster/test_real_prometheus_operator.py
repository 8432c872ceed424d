"""The chart's monitoring objects as the real Prometheus Operator (v0.85.0, ``make
prometheus-operator``) reads them on the real control plane, for kube-prometheus-stack: the chart
installed by the real Helm with ``deploy/helm/examples/kube-prometheus-stack.yaml``, an
Alertmanager and a Prometheus that select by the release label as that stack's are configured
to, and what the operator generates from them:

- Alertmanager's configuration: nodefence's route first under the root, with the namespace
  matcher and ``continue: true`` the operator adds, its receiver's webhook at the chart's Service
  with the token from the Secret; Debian's Alertmanager runs exactly that file (Alertmanager's
  own route tester and a real delivery to ``nodefence serve``).
- Prometheus' rule files: nodefence's rule groups, which promtool accepts; and its scrape jobs:
  the PodMonitor's, labelled job by the pods' ``app.kubernetes.io/name`` as NodefenceDown expects.

The webhook URL is a cluster DNS name (``<fullname>.<namespace>.svc``, port 80) that the host
cannot resolve: instead of rewriting it, Alertmanager runs in a mount namespace of its own whose
``/etc/hosts`` gives that name a loopback address, where ``nodefence serve`` listens on port 80.
That needs root (``unshare``, port 80), as the real nodes' tests do.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from bench.processes import Processes, eventually, free_port, http
from kubernetes import client
from kubernetes.client.rest import ApiException
from tests.deploy.test_helm import CHART, helm

from nodefence_sim.demo.payloads import node_alert
from nodefence_sim.real import prometheus_operator as po
from nodefence_sim.real.rest import Rest

from .conftest import RealBackend

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
VALUES = REPO / "deploy" / "helm" / "examples" / "kube-prometheus-stack.yaml"
RULES = CHART / "files" / "nodefence.rules.yaml"
# As deploy/helm/examples/kube-prometheus-stack.yaml describes the stack: release
# kube-prometheus-stack in namespace monitoring (the chart's monitoringNamespace default).
STACK = "kube-prometheus-stack"
MONITORING = "monitoring"
ALERTMANAGER = f"{STACK}-alertmanager"
PROMETHEUS = f"{STACK}-prometheus"
# nodefence's release: its own namespace and a name that differs from the seed's nodefence.
NAMESPACE = "nodefence-operator"
RELEASE = "fence"
FULLNAME = f"{RELEASE}-nodefence"
SERVICE_HOST = f"{FULLNAME}.{NAMESPACE}.svc"
RECEIVER = f"{MONITORING}/{FULLNAME}/nodefence"
GROUP, VERSION = "monitoring.coreos.com", "v1"
# kube-prometheus-stack's default alertmanager.config (its own templates left out).
BASE_CONFIG = {
    "global": {"resolve_timeout": "5m"},
    "route": {
        "group_by": ["namespace"],
        "group_wait": "30s",
        "group_interval": "5m",
        "repeat_interval": "12h",
        "receiver": "null",
        "routes": [{"receiver": "null", "matchers": ['alertname = "Watchdog"']}],
    },
    "receivers": [{"name": "null"}],
}
WITHIN = 180.0


def debian_version(command: str) -> str:
    """The version a Debian package's binary reports (``version 0.25.0`` -> ``v0.25.0``): the
    operator generates for the version the object names, and Debian's binaries run it."""
    out = subprocess.run(
        [command, "--version"], capture_output=True, text=True, check=True, timeout=30
    )
    found = re.search(r"version (\d+\.\d+\.\d+)", out.stdout + out.stderr)
    assert found, out
    return f"v{found.group(1)}"


@dataclass
class Stack:
    backend: RealBackend
    rest: Rest
    operator: po.PrometheusOperator
    token: str
    helm_home: Path

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.backend.api)

    def why(self) -> str:
        return f"prometheus-operator's log:\n{self.operator.tail()}"


def need_operator() -> Path:
    try:
        return po.find_binary()
    except po.PrometheusOperatorError as exc:
        if os.environ.get("CI"):
            pytest.fail(str(exc))
        pytest.skip(str(exc))


@contextlib.contextmanager
def monitoring_stack(
    backend: RealBackend, workdir: Path, namespace: str, token: str
) -> Iterator[tuple[Rest, po.PrometheusOperator]]:
    """The operator on the real control plane, watching monitoring and ``namespace`` (where a
    test installs the chart); kube-prometheus-stack's Alertmanager and Prometheus there,
    selecting by its release label, with the stack's base configuration and the alert token's
    Secret the chart's AlertmanagerConfig names. Everything, the CRDs included, is removed
    again (``namespace`` too)."""
    binary = need_operator()
    workdir.mkdir(parents=True, exist_ok=True)
    rest = po.rest_from_kubeconfig(backend.kubeconfig, workdir)
    core, custom = backend.core, client.CustomObjectsApi(backend.api)
    crds = po.apply_crds(rest, po.crd_files(binary))
    try:
        for name in (MONITORING, namespace):
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        # The token the AlertmanagerConfig names, in the monitoring namespace (deploy/README.md:
        # the same token as the receivers' Secret).
        core.create_namespaced_secret(
            MONITORING,
            client.V1Secret(
                metadata=client.V1ObjectMeta(name="nodefence-alert-token"),
                string_data={"token": token},
            ),
        )
        # kube-prometheus-stack's base configuration, in the Secret the operator reads by
        # default (alertmanager-<name>).
        core.create_namespaced_secret(
            MONITORING,
            client.V1Secret(
                metadata=client.V1ObjectMeta(name=f"alertmanager-{ALERTMANAGER}"),
                string_data={"alertmanager.yaml": yaml.safe_dump(BASE_CONFIG)},
            ),
        )
        selector = {"matchLabels": {"release": STACK}}
        custom.create_namespaced_custom_object(
            GROUP,
            VERSION,
            MONITORING,
            "alertmanagers",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "Alertmanager",
                "metadata": {"name": ALERTMANAGER},
                "spec": {
                    "version": debian_version("prometheus-alertmanager"),
                    "replicas": 1,
                    "alertmanagerConfigSelector": selector,
                    "alertmanagerConfigNamespaceSelector": {},
                },
            },
        )
        custom.create_namespaced_custom_object(
            GROUP,
            VERSION,
            MONITORING,
            "prometheuses",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "Prometheus",
                "metadata": {"name": PROMETHEUS},
                "spec": {
                    "version": debian_version("promtool"),
                    "replicas": 1,
                    "ruleSelector": selector,
                    "ruleNamespaceSelector": {},
                    "podMonitorSelector": selector,
                    "podMonitorNamespaceSelector": {},
                },
            },
        )
        with po.running_operator(
            binary, backend.kubeconfig, workdir, [MONITORING, namespace]
        ) as operator:
            yield rest, operator
    finally:
        for name in (namespace, MONITORING):
            try:
                core.delete_namespace(name)
            except ApiException as exc:
                if exc.status != 404:
                    raise
        po.delete_crds(rest, crds)


def run_alertmanager(
    procs: Processes,
    workdir: Path,
    config: str,
    hosts: dict[str, str],
    *,
    listen: str,
    netns: str | None = None,
) -> str:
    """Debian's Alertmanager with ``config`` as it is, in a mount namespace of its own whose
    ``/etc/hosts`` adds ``hosts`` (name -> address), the stand-in for cluster DNS; in the
    network namespace ``netns`` when given (the real nodes' cluster, where kube-proxy answers
    for the Services). Its URL once ready (reachable from where it listens)."""
    workdir.mkdir(parents=True, exist_ok=True)
    config_file = workdir / "alertmanager.yaml"
    config_file.write_text(config)
    hosts_file = workdir / "hosts"
    added = "".join(f"{address} {name}\n" for name, address in hosts.items())
    hosts_file.write_text(f"{Path('/etc/hosts').read_text()}\n{added}")
    enter = ["nsenter", f"--net=/run/netns/{netns}"] if netns else []
    alertmanager = procs.start(
        "alertmanager",
        [
            *enter,
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            'mount --bind "$0" /etc/hosts && exec "$@"',
            str(hosts_file),
            "prometheus-alertmanager",
            f"--config.file={config_file}",
            f"--storage.path={workdir / 'data'}",
            f"--web.listen-address={listen}",
            "--cluster.listen-address=",
        ],
        cwd=workdir,
    )
    url = f"http://{listen}"
    if netns is None:
        procs.wait_ready(alertmanager, f"{url}/-/ready")
    return url


@pytest.fixture(scope="module")
def stack(real_backend: RealBackend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The monitoring stack, and the chart installed beside it with the stack's example
    values; the release is uninstalled again."""
    need_operator()
    if os.geteuid() != 0:
        pytest.skip("Alertmanager's mount namespace and port 80 need root")
    workdir = tmp_path_factory.mktemp("prometheus-operator")
    token = secrets.token_urlsafe(24)
    helm_home = workdir / "helm"
    with monitoring_stack(real_backend, workdir, NAMESPACE, token) as (rest, operator):
        real_backend.core.create_namespaced_secret(
            NAMESPACE,
            client.V1Secret(
                metadata=client.V1ObjectMeta(name="nodefence-secrets"),
                string_data={"NODEFENCE_ALERT_TOKEN": token},
            ),
        )
        install = helm(
            "install",
            RELEASE,
            str(CHART),
            "--namespace",
            NAMESPACE,
            "-f",
            str(VALUES),
            home=helm_home,
            timeout=300,
            check=False,
            KUBECONFIG=str(real_backend.kubeconfig),
        )
        assert install.returncode == 0, install.stderr
        try:
            yield Stack(real_backend, rest, operator, token, helm_home)
        finally:
            helm(
                "uninstall",
                RELEASE,
                "--namespace",
                NAMESPACE,
                home=helm_home,
                timeout=240,
                check=False,
                KUBECONFIG=str(real_backend.kubeconfig),
            )


def nodefence_route(config: dict[str, Any], receiver: str = RECEIVER) -> dict[str, Any] | None:
    """The first-level route to nodefence's ``receiver`` (the release's), once generated."""
    return next(
        (r for r in config["route"].get("routes") or [] if r.get("receiver") == receiver), None
    )


def generated(stack: Stack) -> dict[str, Any]:
    """The Alertmanager configuration the operator generated once it holds nodefence's route."""
    try:
        text = po.generated_alertmanager_config(
            stack.rest,
            MONITORING,
            ALERTMANAGER,
            until=lambda t: nodefence_route(yaml.safe_load(t)) is not None,
            within=WITHIN,
        )
    except po.PrometheusOperatorError as exc:
        raise AssertionError(f"{exc}\n{stack.why()}") from exc
    config: dict[str, Any] = yaml.safe_load(text)
    return config


def routes_test(config_file: Path, *labels: str) -> str:
    """Alertmanager's own route tester: the receivers an alert of ``labels`` goes to."""
    out = subprocess.run(
        ["amtool", "config", "routes", "test", f"--config.file={config_file}", *labels],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_the_operator_routes_nodefence_s_alerts_to_the_chart_s_service(
    stack: Stack, tmp_path: Path
) -> None:
    config = generated(stack)
    route = nodefence_route(config)
    assert route is not None
    # First under the root, before the stack's own routes, and it lets alerts go on to them.
    assert config["route"]["routes"][0] is route
    assert config["route"]["routes"][1:] == BASE_CONFIG["route"]["routes"]
    assert route["continue"] is True
    # The chart's matcher and the namespace the operator adds: the AlertmanagerConfig's own
    # (monitoringNamespace, kube-state-metrics' namespace, which the node alerts carry).
    assert route["matchers"] == [
        'alertname=~"KubeNodeNotReady|KubeNodeUnreachable|NodefenceNodeNotReady"',
        f'namespace="{MONITORING}"',
    ]
    assert route["group_by"] == ["alertname", "node"]
    children = route["routes"]
    assert [c["receiver"] for c in children] == [RECEIVER, RECEIVER]
    assert [c["group_wait"] for c in children] == ["30s", "0s"]
    assert [c["repeat_interval"] for c in children] == ["1h", "2m"]
    assert not any(c.get("continue") for c in children)

    (receiver,) = [r for r in config["receivers"] if r["name"] == RECEIVER]
    (webhook,) = receiver["webhook_configs"]
    # The chart's Service, by its cluster DNS name; plain HTTP, so port 80, the Service's.
    assert webhook["url"] == f"http://{SERVICE_HOST}/alerts"
    service = stack.backend.core.read_namespaced_service(FULLNAME, NAMESPACE)
    assert [(p.name, p.port) for p in service.spec.ports] == [("http", 80)]
    assert webhook["send_resolved"] is True
    # maxAlerts 0 is left out of the file: Alertmanager's default, every alert of the group.
    assert webhook.get("max_alerts", 0) == 0
    # The Secret's value, inlined by the operator into the generated Secret.
    assert webhook["http_config"]["authorization"] == {
        "type": "Bearer",
        "credentials": stack.token,
    }

    # Alertmanager's own router, on exactly the generated file: the node alerts of
    # kube-state-metrics' namespace reach nodefence; the same alert from any other namespace
    # (or none) does not, which is why the AlertmanagerConfig lives in monitoringNamespace.
    config_file = tmp_path / "alertmanager.yaml"
    config_file.write_text(yaml.safe_dump(config))
    check = subprocess.run(
        ["amtool", "check-config", str(config_file)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    for alertname in ("KubeNodeNotReady", "KubeNodeUnreachable", "NodefenceNodeNotReady"):
        found = routes_test(
            config_file, f"alertname={alertname}", "node=n1", "namespace=monitoring"
        )
        assert found == RECEIVER, (alertname, found)
    assert routes_test(config_file, "alertname=KubeNodeNotReady", "node=n1") == "null"
    assert (
        routes_test(config_file, "alertname=KubeNodeNotReady", "node=n1", "namespace=openstack")
        == "null"
    )
    assert routes_test(config_file, "alertname=Watchdog", "namespace=monitoring") == "null"


def metric(url: str, sample: str) -> float:
    code, raw = http("GET", f"{url}/metrics")
    if code != 200:
        return 0.0
    for line in raw.decode().splitlines():
        if line.startswith(sample + " "):
            return float(line.split()[1])
    return 0.0


def test_debian_s_alertmanager_delivers_with_the_generated_configuration_to_nodefence(
    stack: Stack, procs: Processes
) -> None:
    """The generated file, unchanged, in Debian's Alertmanager: a KubeNodeNotReady alert from
    kube-state-metrics' namespace reaches ``nodefence serve`` at the Service's name and port
    with the Secret's token, which nodefence accepts and decides on (a Ready node: refused by
    S1, in dry-run)."""
    text = po.generated_alertmanager_config(
        stack.rest,
        MONITORING,
        ALERTMANAGER,
        until=lambda t: nodefence_route(yaml.safe_load(t)) is not None,
        within=WITHIN,
    )
    # The Service's name on a loopback address of this test's, for Alertmanager only.
    address = "127." + ".".join(str(random.randint(2, 254)) for _ in range(3))

    core = stack.backend.core
    node = next(
        n.metadata.name
        for n in core.list_node().items
        if any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
    )
    nodefence_url = f"http://{address}:80"
    nodefence = procs.start(
        "nodefence",
        [sys.executable, "-m", "nodefence", "serve"],
        env={
            "PORT": "80",
            "NODEFENCE_HOST": address,
            "NODEFENCE_ALERT_TOKEN": stack.token,
            "KUBECONFIG": str(stack.backend.kubeconfig),
            "NODEFENCE_NAMESPACE": "nodefence",
            "NODEFENCE_IDENTITY": "nodefence-operator-test",
            "NODEFENCE_LOG_FORMAT": "json",
            "NODEFENCE_DRY_RUN": "true",
            "NODEFENCE_RECONCILE_INTERVAL": "0",
            "NODEFENCE_BMC_INVENTORY": str(stack.backend.inventory),
        },
    )
    procs.wait_ready(nodefence, f"{nodefence_url}/readyz")

    am_url = run_alertmanager(
        procs,
        procs.workdir / "alertmanager",
        text,
        {SERVICE_HOST: address},
        listen=f"127.0.0.1:{free_port()}",
    )

    now = datetime.now(UTC)
    alert = node_alert(node)
    code, raw = http(
        "POST",
        f"{am_url}/api/v2/alerts",
        [
            {
                "labels": alert["labels"],
                "annotations": alert["annotations"],
                "startsAt": (now - timedelta(minutes=20)).isoformat(),
                "endsAt": (now + timedelta(hours=1)).isoformat(),
            }
        ],
    )
    assert code == 200, raw

    def logged() -> list[dict[str, Any]]:
        lines = nodefence.output().splitlines()
        return [json.loads(line) for line in lines if line.startswith("{")]

    def answered() -> list[dict[str, Any]]:
        return [e for e in logged() if e["event"] == "http_request" and e["path"] == "/alerts"]

    # At once: the alert started before the route's group_wait (30s) ago.
    (request,) = eventually(
        answered, within=120, interval=1.0, what="nodefence answered Alertmanager's webhook"
    )
    # Accepted (the Secret's token) from nodefence's receiver of the generated file, and
    # decided for the alert's node: a Ready node, refused, nothing written (dry run).
    assert (request["method"], request["status"], request["receiver"]) == ("POST", 200, RECEIVER)
    assert request["alerts"] == 1
    assert f'namespace="{MONITORING}"' in request["group_key"]
    received = 'nodefence_alerts_received_total{alertname="KubeNodeNotReady",status="firing"}'
    assert metric(nodefence_url, received) == 1
    (decision,) = [e for e in logged() if e["event"] == "decision"]
    assert (decision["node"], decision["alertname"], decision["status"]) == (
        node,
        "KubeNodeNotReady",
        "firing",
    )
    assert decision["blocked_by"] == "ready"
    assert decision["actions"] == []
    exposition = http("GET", f"{nodefence_url}/metrics")[1].decode()
    assert not re.search(r"nodefence_webhook_rejected_total\{[^}]*\} [1-9]", exposition)
    # Alertmanager's own account: delivered to nodefence's receiver, nowhere failed.
    status = http("GET", f"{am_url}/metrics")[1].decode()
    assert re.search(
        r'alertmanager_notifications_total\{integration="webhook"[^}]*\} [1-9]', status
    ), status
    assert not re.search(
        r'alertmanager_notifications_failed_total\{integration="webhook"[^}]*\} [1-9]', status
    ), status


def test_the_operator_selects_the_chart_s_rules_and_pod_monitor(
    stack: Stack, tmp_path: Path
) -> None:
    shipped = yaml.safe_load(RULES.read_text())["groups"]
    # The chart's default excludeGroups: the stack evaluates the node alerts itself.
    expected = [g["name"] for g in shipped if g["name"] != "nodefence-node-alerts"]
    assert expected

    def nodefence_file(files: dict[str, str]) -> list[str]:
        return [k for k in files if k.startswith(f"{MONITORING}-{FULLNAME}-")]

    try:
        files = po.generated_rule_files(
            stack.rest,
            MONITORING,
            PROMETHEUS,
            until=lambda f: bool(nodefence_file(f)),
            within=WITHIN,
        )
    except po.PrometheusOperatorError as exc:
        raise AssertionError(f"{exc}\n{stack.why()}") from exc
    (name,) = nodefence_file(files)
    groups = yaml.safe_load(files[name])["groups"]
    # Every group the chart ships but the excluded one, rule for rule as written.
    assert [g["name"] for g in groups] == expected
    assert groups == [g for g in shipped if g["name"] in expected]
    rule_file = tmp_path / name
    rule_file.write_text(files[name])
    check = subprocess.run(
        ["promtool", "check", "rules", str(rule_file)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert check.returncode == 0, check.stdout + check.stderr

    # The PodMonitor's scrape jobs, one per endpoint, with the job label from the pods'
    # app.kubernetes.io/name (NodefenceDown's job="nodefence").
    prefix = f"podMonitor/{NAMESPACE}/{FULLNAME}/"
    try:
        text = po.generated_prometheus_config(
            stack.rest, MONITORING, PROMETHEUS, until=lambda t: prefix in t, within=WITHIN
        )
    except po.PrometheusOperatorError as exc:
        raise AssertionError(f"{exc}\n{stack.why()}") from exc
    jobs = [j for j in yaml.safe_load(text)["scrape_configs"] if j["job_name"].startswith(prefix)]
    assert [j["job_name"] for j in jobs] == [f"{prefix}0", f"{prefix}1"]
    for job in jobs:
        assert job["kubernetes_sd_configs"][0]["namespaces"]["names"] == [NAMESPACE]
        assert any(
            r.get("source_labels") == ["__meta_kubernetes_pod_label_app_kubernetes_io_name"]
            and r.get("target_label") == "job"
            for r in job["relabel_configs"]
        ), job["relabel_configs"]
    template = client.AppsV1Api(stack.backend.api).read_namespaced_deployment(FULLNAME, NAMESPACE)
    assert template.spec.template.metadata.labels["app.kubernetes.io/name"] == "nodefence"
