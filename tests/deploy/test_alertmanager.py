"""The Alertmanager route: valid for amtool, routes node alerts to nodefence and to the rest."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import DEPLOY, REPO

AM = DEPLOY / "alertmanager"
EXAMPLE = AM / "alertmanager.example.yaml"
SNIPPET = AM / "nodefence-route.yaml"
AMTOOL = shutil.which("amtool")
needs_amtool = pytest.mark.skipif(
    AMTOOL is None, reason="amtool not installed (Debian package prometheus-alertmanager)"
)


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    return data


def amtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert AMTOOL is not None
    return subprocess.run([AMTOOL, *args], capture_output=True, text=True, check=False)


def routed_receivers(config: Path, *labels: str) -> list[str]:
    out = amtool("config", "routes", "test", f"--config.file={config}", *labels)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().split(",")


@needs_amtool
def test_example_config_passes_amtool() -> None:
    out = amtool("check-config", str(EXAMPLE))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


@needs_amtool
@pytest.mark.parametrize("alertname", ["KubeNodeNotReady", "KubeNodeUnreachable"])
def test_node_alerts_reach_nodefence_and_the_usual_receiver(alertname: str) -> None:
    assert routed_receivers(EXAMPLE, f"alertname={alertname}", "node=n1") == [
        "nodefence",
        "default",
    ]


@needs_amtool
def test_the_trigger_alert_reaches_nodefence_only() -> None:
    """Nobody is paged a minute after a node blips; KubeNodeNotReady still pages at 15m."""
    assert routed_receivers(EXAMPLE, "alertname=NodefenceNodeNotReady", "node=n1") == ["nodefence"]


@needs_amtool
def test_other_alerts_do_not_reach_nodefence() -> None:
    for name in (
        "KubeNodeNotReadyX",
        "NodefenceNodeNotReadyX",
        "KubePodCrashLooping",
        "NodefenceDown",
    ):
        assert routed_receivers(EXAMPLE, f"alertname={name}", "node=n1") == ["default"]


@needs_amtool
def test_snippet_alone_is_a_valid_route(tmp_path: Path) -> None:
    snippet = load(SNIPPET)
    config = {
        "route": {"receiver": "default", "routes": [snippet["route"], snippet["trigger_route"]]},
        "receivers": [{"name": "default"}, snippet["receiver"]],
    }
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config))
    out = amtool("check-config", str(path))
    assert out.returncode == 0, out.stdout + out.stderr


def test_example_carries_the_snippet_first() -> None:
    snippet = load(SNIPPET)
    example = load(EXAMPLE)
    assert example["route"]["routes"][0] == snippet["route"]
    assert example["route"]["routes"][1] == snippet["trigger_route"]
    assert snippet["receiver"] in example["receivers"]


def test_webhook_settings() -> None:
    snippet = load(SNIPPET)
    route = snippet["route"]
    assert route["continue"] is True
    assert route["group_by"] == ["alertname", "node"]
    assert {"group_wait", "group_interval", "repeat_interval"} <= set(route)
    (hook,) = snippet["receiver"]["webhook_configs"]
    assert hook["url"] == "http://nodefence.nodefence.svc/alerts"
    assert hook["send_resolved"] is True
    assert hook["max_alerts"] == 0
    auth = hook["http_config"]["authorization"]
    assert auth["type"] == "Bearer"
    secret_name = Path(auth["credentials_file"]).parent.name
    examples = list(yaml.safe_load_all((DEPLOY / "secret.example.yaml").read_text()))
    token_secret = next(d for d in examples if d["metadata"]["name"] == secret_name)
    assert Path(auth["credentials_file"]).name in token_secret["stringData"]


def test_route_matches_the_node_alerts_of_the_rules() -> None:
    rules = yaml.safe_load((REPO / "alertrules" / "nodefence.rules.yaml").read_text())
    group = next(g for g in rules["groups"] if g["name"] == "nodefence-node-alerts")
    names = {r["alert"] for r in group["rules"]}
    (matcher,) = load(SNIPPET)["route"]["matchers"]
    pattern = re.fullmatch(r'alertname=~"(.*)"', matcher)
    assert pattern is not None
    assert set(pattern.group(1).split("|")) == names


def seconds(duration: str) -> int:
    units = {"s": 1, "m": 60, "h": 3600}
    return sum(int(n) * units[u] for n, u in re.findall(r"(\d+)([smh])", duration))


def test_trigger_route_matches_the_trigger_rule_and_retries_within_minutes() -> None:
    rules = yaml.safe_load((REPO / "alertrules" / "nodefence.rules.yaml").read_text())
    group = next(g for g in rules["groups"] if g["name"] == "nodefence-trigger")
    (rule,) = group["rules"]
    route = load(SNIPPET)["trigger_route"]
    assert route["matchers"] == [f'alertname="{rule["alert"]}"']
    assert route["receiver"] == load(SNIPPET)["receiver"]["name"]
    assert route.get("continue", False) is False
    assert route["group_by"] == ["alertname", "node"]
    # Sent as soon as the rule fires; a refused first delivery comes back within 5 minutes
    # even without the reconcile pass's Alertmanager URL.
    assert seconds(route["group_wait"]) == 0
    assert seconds(route["group_interval"]) <= 60
    assert 0 < seconds(route["repeat_interval"]) <= 300
    assert seconds(route["repeat_interval"]) % seconds(route["group_interval"]) == 0
