"""``GET /metrics``: kube-state-metrics series that the kube-prometheus node alerts evaluate."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from nodefence_sim.ksm import add_metrics_route
from nodefence_sim.resources import PODS, STATEFULSETS
from nodefence_sim.simulation import Simulation
from nodefence_sim.store import DeleteOptions, parse_time

from ._cluster import NS, add_node, make_sim, modify_node, pods, set_ready, settle, statefulset

KSM_JOB = "kube-state-metrics"
# The expressions of kube-prometheus' kubernetes-system-kubelet group, verbatim.
NOT_READY = (
    'kube_node_status_condition{job="kube-state-metrics",condition="Ready",status="true"} == 0'
)
UNREACHABLE = (
    '(kube_node_spec_taint{job="kube-state-metrics",key="node.kubernetes.io/unreachable",'
    'effect="NoSchedule"} unless ignoring(key,value) kube_node_spec_taint{job="kube-state-metrics",'
    'key=~"ToBeDeletedByClusterAutoscaler|cloud.google.com/impending-node-termination|'
    'aws-node-termination-handler/spot-itn"}) == 1'
)


def _cluster() -> Simulation:
    sim = make_sim()
    add_node(sim, "control01")
    add_node(sim, "control02")
    sim.store.create(STATEFULSETS, NS, statefulset("mariadb-server", 2, claims=False))
    settle(sim)
    set_ready(sim, "control02", False)
    modify_node(sim, "control02", lambda n: n["spec"].update(unschedulable=True))
    stuck = next(p for p in pods(sim) if p["spec"]["nodeName"] == "control02")
    sim.store.delete(PODS, NS, stuck["metadata"]["name"], DeleteOptions())
    settle(sim)
    return sim


async def _scrape(sim: Simulation) -> tuple[str, str]:
    app = web.Application()
    add_metrics_route(app, sim)
    async with TestClient(TestServer(app)) as client:
        response = await client.get("/metrics")
        assert response.status == 200
        return response.headers["Content-Type"], await response.text()


def _samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        assert family.type == "gauge"
        assert family.documentation
        for sample in family.samples:
            found.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return found


@dataclass
class Scrape:
    sim: Simulation
    content_type: str
    text: str

    @property
    def series(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        return _samples(self.text)


@pytest.fixture
async def scrape() -> Scrape:
    """One scrape of the cluster with control02 NotReady, cordoned, and a pod stuck on it."""
    sim = _cluster()
    content_type, text = await _scrape(sim)
    return Scrape(sim, content_type, text)


def test_metrics_are_the_text_exposition_with_help_and_type(scrape: Scrape) -> None:
    assert scrape.content_type == "text/plain; version=0.0.4; charset=utf-8"
    assert "# HELP kube_node_status_condition The condition of a cluster node." in scrape.text
    assert "# TYPE kube_node_spec_taint gauge" in scrape.text


def test_node_metrics_have_the_real_label_sets(scrape: Scrape) -> None:
    series = scrape.series
    ready = {
        (s["node"], s["status"]): v
        for s, v in series["kube_node_status_condition"]
        if s["condition"] == "Ready"
    }
    assert ready == {
        ("control01", "true"): 1,
        ("control01", "false"): 0,
        ("control01", "unknown"): 0,
        ("control02", "true"): 0,
        ("control02", "false"): 0,
        ("control02", "unknown"): 1,
    }
    assert {s["node"]: v for s, v in series["kube_node_spec_unschedulable"]} == {
        "control01": 0,
        "control02": 1,
    }
    assert sorted(
        (s["node"], s["key"], s["value"], s["effect"])
        for s, v in series["kube_node_spec_taint"]
        if v == 1
    ) == [
        ("control02", "node.kubernetes.io/unreachable", "", "NoExecute"),
        ("control02", "node.kubernetes.io/unreachable", "", "NoSchedule"),
    ]
    info = {s["node"]: s for s, _ in series["kube_node_info"]}
    assert set(info["control01"]) == {
        "node",
        "kernel_version",
        "os_image",
        "container_runtime_version",
        "kubelet_version",
        "kubeproxy_version",
        "provider_id",
        "pod_cidr",
        "system_uuid",
        "internal_ip",
    }
    assert info["control01"]["kubelet_version"] == "v1.24.8"
    assert info["control01"]["internal_ip"] == "192.168.20.31"


def test_pod_metrics_have_the_real_label_sets(scrape: Scrape) -> None:
    series = scrape.series
    pod_info = {s["pod"]: s for s, _ in series["kube_pod_info"]}
    stuck = next(p for p in pods(scrape.sim) if p["spec"]["nodeName"] == "control02")
    name = stuck["metadata"]["name"]
    assert pod_info[name] == {
        "namespace": NS,
        "pod": name,
        "uid": stuck["metadata"]["uid"],
        "node": "control02",
        "created_by_kind": "StatefulSet",
        "created_by_name": "mariadb-server",
        "host_ip": "192.168.0.1",
        "pod_ip": "10.0.0.1",
        "priority_class": "",
        "host_network": "false",
    }
    deleted = parse_time(stuck["metadata"]["deletionTimestamp"])
    assert deleted is not None
    assert series["kube_pod_deletion_timestamp"] == [
        ({"namespace": NS, "pod": name, "uid": stuck["metadata"]["uid"]}, deleted.timestamp())
    ]
    phases = {(s["pod"], s["phase"]): v for s, v in series["kube_pod_status_phase"]}
    assert phases[(name, "Running")] == 1
    assert sum(v for (pod, _), v in phases.items() if pod == name) == 1


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
async def test_promtool_accepts_the_output_and_the_node_alerts_fire(tmp_path: Path) -> None:
    _, text = await _scrape(_cluster())
    lint = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr

    input_series = []
    for name, samples in _samples(text).items():
        if name.startswith("kube_node_"):
            for labels, value in samples:
                rendered = ",".join(f'{k}="{v}"' for k, v in {"job": KSM_JOB, **labels}.items())
                input_series.append({"series": f"{name}{{{rendered}}}", "values": f"{value:g}x20"})
    rules = {
        "groups": [
            {
                "name": "kubernetes-system-kubelet",
                "rules": [
                    {"alert": "KubeNodeNotReady", "expr": NOT_READY, "for": "15m"},
                    {"alert": "KubeNodeUnreachable", "expr": UNREACHABLE, "for": "15m"},
                ],
            }
        ]
    }
    alert_labels = {"job": KSM_JOB, "node": "control02"}
    tests = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": input_series,
                "alert_rule_test": [
                    {
                        "eval_time": "16m",
                        "alertname": "KubeNodeNotReady",
                        "exp_alerts": [
                            {"exp_labels": {**alert_labels, "condition": "Ready", "status": "true"}}
                        ],
                    },
                    {
                        "eval_time": "16m",
                        "alertname": "KubeNodeUnreachable",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    **alert_labels,
                                    "key": "node.kubernetes.io/unreachable",
                                    "effect": "NoSchedule",
                                }
                            }
                        ],
                    },
                ],
            }
        ],
    }
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules))
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests))
    result = subprocess.run(
        ["promtool", "test", "rules", "tests.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
