"""The Grafana dashboard in deploy/monitoring: every metric its queries use is one a live
receiver exposes on /metrics (a renamed metric would leave a panel silently empty), every query
parses as PromQL, and it shows what an operator looks for first."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml
from prometheus_client.parser import text_string_to_metric_families

from nodefence_sim.simulation import Simulation
from nodefence_sim.testing import running_simulator
from reliability.serving import serving

from .conftest import DEPLOY, REPO, kustomize

DASHBOARD = DEPLOY / "monitoring" / "nodefence-dashboard.json"
RULES = REPO / "alertrules" / "nodefence.rules.yaml"
METRIC = re.compile(r"\b(nodefence_[a-z0-9_]+)")
# How Prometheus names the series of each metric type, from the family name (the receiver
# exports no ``_created`` series).
SERIES = {
    "counter": ("_total",),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("", "_sum", "_count"),
    "untyped": ("",),
}
# Grafana's variables, as a query would run with the defaults.
VARIABLES = {"$__rate_interval": "5m", "$job": "nodefence"}


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])


def queries(board: dict[str, Any]) -> list[str]:
    found = [t["expr"] for p in panels(board) for t in p.get("targets", [])]
    for variable in board["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict) and "query" in query:
            found.append(query["query"])
    return found


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def exposed() -> frozenset[str]:
    """Every series name a live receiver exposes, served as ``nodefence serve`` serves it (the
    real pipeline against the simulator, its reconcile loop and fencing probe included),
    including metrics that have no sample yet (their HELP and TYPE lines). Read once for the
    module: its tests only read the names."""
    async with (
        running_simulator(Simulation.from_scenario("seed")) as cluster,
        serving(cluster, interval=3600) as receiver,
        receiver.http.get(receiver.url + "/metrics") as response,
    ):
        text = await response.text()
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.update(family.name + suffix for suffix in SERIES[family.type])
    return frozenset(names)


def test_every_dashboard_metric_is_exposed_by_the_receiver(exposed: frozenset[str]) -> None:
    used = {name for query in queries(dashboard()) for name in METRIC.findall(query)}
    assert used, "the dashboard queries no nodefence metric"
    assert used - exposed == set(), "queried but not exposed"


def test_every_alert_rule_metric_is_exposed_by_the_receiver(exposed: frozenset[str]) -> None:
    rules = yaml.safe_load(RULES.read_text())
    used = {
        name
        for group in rules["groups"]
        for rule in group["rules"]
        for name in METRIC.findall(rule["expr"])
    }
    assert used - exposed == set(), "alerted on but not exposed"


def test_the_check_catches_a_renamed_metric(exposed: frozenset[str]) -> None:
    renamed = json.loads(
        DASHBOARD.read_text().replace("nodefence_refusals_total", "nodefence_refused_total")
    )
    used = {name for query in queries(renamed) for name in METRIC.findall(query)}
    assert used - exposed == {"nodefence_refused_total"}


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_every_query_parses_as_promql(tmp_path: Path) -> None:
    """As recording rules, which promtool parses and checks, with Grafana's variables set."""
    rules = []
    for index, query in enumerate(queries(dashboard())):
        if query.startswith("label_values("):
            continue
        promql = query
        for variable, value in VARIABLES.items():
            promql = promql.replace(variable, value)
        assert "$" not in promql, promql
        rules.append({"record": f"dashboard:query_{index}", "expr": promql})
    path = tmp_path / "dashboard.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    out = subprocess.run(
        ["promtool", "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_dashboard_shows_what_an_operator_looks_for() -> None:
    board = dashboard()
    assert board["uid"] == "nodefence"
    used = " ".join(queries(board))
    for metric in (
        "nodefence_fenced_timestamp_seconds",
        "nodefence_actions_total",
        "nodefence_refusals_total",
        "nodefence_power_actions_total",
        "nodefence_http_request_duration_seconds_bucket",
        "nodefence_kube_api_requests_total",
        "nodefence_kube_api_request_duration_seconds_bucket",
        "nodefence_alertmanager_request_duration_seconds_bucket",
        "nodefence_build_info",
        "nodefence_dry_run_decisions_total",
        "nodefence_volumes_unreleased",
        "nodefence_paused",
        "nodefence_webhook_rejected_total",
        "nodefence_fencing_ready",
    ):
        assert metric in used, metric
    ids = [p["id"] for p in panels(board)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels(board):
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert panel["targets"], panel["title"]
            assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]


def test_the_dashboard_ships_as_a_grafana_configmap() -> None:
    """kube-prometheus-stack's Grafana sidecar picks up ConfigMaps labelled grafana_dashboard."""
    objs = kustomize(DEPLOY / "monitoring")
    [configmap] = [o for o in objs if o["kind"] == "ConfigMap"]
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["nodefence-dashboard.json"]) == dashboard()
