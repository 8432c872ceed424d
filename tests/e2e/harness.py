"""The end-to-end tests' processes: the simulated cluster, ``nodefence serve``, Prometheus and
Alertmanager, started and stopped by the process helpers the benchmarks use too
(``bench.processes``: output to files, every wait with a deadline, every process stopped however
the test ends).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from bench.processes import (
    Process,
    Processes,
    eventually,
    free_port,
    get_json,
    http,
    tail,
)

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "alertrules" / "nodefence.rules.yaml"
AM_EXAMPLE = REPO / "deploy" / "alertmanager" / "alertmanager.example.yaml"
AM_SNIPPET = REPO / "deploy" / "alertmanager" / "nodefence-route.yaml"
OOS = "node.kubernetes.io/out-of-service"
LISTENING = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")


# --------------------------------------------------------------------------- the simulator


@dataclass
class Simulator:
    url: str
    kubeconfig: Path
    # None for a simulator served in the test's own process (``running_simulator``).
    process: Process | None = None

    def control(self, node: str, action: str, body: Mapping[str, Any]) -> dict[str, Any]:
        status, raw = http("POST", f"{self.url}/sim/v1/nodes/{node}/{action}", dict(body))
        assert status == 200, f"{action} {node} -> {status}: {raw!r}"
        result: dict[str, Any] = json.loads(raw)
        return result

    def node(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = get_json(f"{self.url}/api/v1/nodes/{name}")
        return result

    def oos_taints(self, name: str) -> list[dict[str, Any]]:
        return [t for t in self.node(name)["spec"].get("taints") or [] if t["key"] == OOS]

    def pods_on(self, name: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = get_json(
            f"{self.url}/api/v1/pods?fieldSelector=spec.nodeName%3D{name}"
        )["items"]
        return items

    def terminating_on(self, name: str) -> list[str]:
        return [
            p["metadata"]["name"]
            for p in self.pods_on(name)
            if p["metadata"].get("deletionTimestamp")
        ]

    def nodefence_events(self, node: str) -> list[dict[str, Any]]:
        items = get_json(f"{self.url}/api/v1/events")["items"]
        return [
            e
            for e in items
            if e["involvedObject"].get("kind") == "Node"
            and e["involvedObject"].get("name") == node
            and (e.get("source") or {}).get("component") == "nodefence"
        ]

    def cursor(self) -> int:
        value: int = get_json(f"{self.url}/sim/v1/requests?since=0")["cursor"]
        return value

    def requests(self, since: int = 0) -> list[dict[str, Any]]:
        """The Kubernetes API requests served after ``since``; the simulator's own controllers
        and the ``/sim`` control surface do not appear here, only clients over HTTP."""
        records: list[dict[str, Any]] = get_json(f"{self.url}/sim/v1/requests?since={since}")[
            "requests"
        ]
        return records


def start_simulator(procs: Processes, *, within: float = 30.0) -> Simulator:
    kubeconfig = procs.workdir / "kubeconfig"
    argv = [sys.executable, "-m", "nodefence", "simulate", "--port", "0", "--scenario", "seed"]
    process = procs.start("simulator", [*argv, "--kubeconfig-out", str(kubeconfig)])

    def listening() -> str:
        if not process.alive():
            raise AssertionError(f"simulator exited during startup:\n{tail(process.output())}")
        found = LISTENING.search(process.output())
        return found.group(1) if found and kubeconfig.exists() else ""

    url = eventually(listening, within=within, what="simulator listening")
    procs.wait_ready(process, f"{url}/api/v1/nodes", within=within)
    return Simulator(url, kubeconfig, process)


# --------------------------------------------------------------------------- nodefence


INFERENCE_POLICY = Path(__file__).with_name("policy.yaml")


@dataclass
class Nodefence:
    url: str
    token: str
    process: Process


def start_nodefence(
    procs: Processes,
    sim: Simulator,
    token: str,
    *,
    identity: str = "nodefence-e2e",
    env: Mapping[str, str] | None = None,
) -> Nodefence:
    port = free_port()
    settings = {
        "PORT": str(port),
        "NODEFENCE_HOST": "127.0.0.1",
        "NODEFENCE_ALERT_TOKEN": token,
        "KUBECONFIG": str(sim.kubeconfig),
        "NODEFENCE_NAMESPACE": "nodefence",
        "NODEFENCE_IDENTITY": identity,
        "NODEFENCE_LOG_FORMAT": "json",
        "NODEFENCE_LOG_LEVEL": "debug",
        # The simulated machines have no BMC in this chain: the rule fences on inference alone.
        "NODEFENCE_POLICY_FILE": str(INFERENCE_POLICY),
    }
    settings.update(env or {})
    process = procs.start("nodefence", [sys.executable, "-m", "nodefence", "serve"], env=settings)
    url = f"http://127.0.0.1:{port}"
    procs.wait_ready(process, f"{url}/readyz")
    return Nodefence(url, token, process)


# --------------------------------------------------------------------------- Prometheus


def shortened_rules(target: Path, for_duration: str = "2s") -> Path:
    """The shipped rules with every ``for:`` cut to ``for_duration``; nothing else changes."""
    rules = yaml.safe_load(RULES.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = for_duration
    target.write_text(yaml.safe_dump(rules, sort_keys=False))
    return target


@dataclass
class Prometheus:
    url: str
    process: Process

    def alerts(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = get_json(f"{self.url}/api/v1/alerts")["data"]["alerts"]
        return found

    def firing(self, alertname: str, node: str) -> bool:
        return any(
            a["labels"].get("alertname") == alertname
            and a["labels"].get("node") == node
            and a["state"] == "firing"
            for a in self.alerts()
        )


def start_prometheus(
    procs: Processes, sim: Simulator, nodefence: Nodefence, alertmanagers: Sequence[str]
) -> Prometheus:
    workdir = procs.workdir / "prometheus"
    workdir.mkdir()
    rules = shortened_rules(workdir / "nodefence.rules.yaml")
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "alerting": {
            "alertmanagers": [
                {
                    "api_version": "v2",
                    "static_configs": [
                        {"targets": [a.removeprefix("http://") for a in alertmanagers]}
                    ],
                }
            ]
        },
        "scrape_configs": [
            {
                "job_name": "kube-state-metrics",
                "static_configs": [{"targets": [sim.url.removeprefix("http://")]}],
            },
            {
                "job_name": "nodefence",
                "static_configs": [{"targets": [nodefence.url.removeprefix("http://")]}],
            },
        ],
    }
    config_file = workdir / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config, sort_keys=False))
    port = free_port()
    process = procs.start(
        "prometheus",
        [
            "prometheus",
            f"--config.file={config_file}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=debug",
        ],
        cwd=workdir,
    )
    url = f"http://127.0.0.1:{port}"
    procs.wait_ready(process, f"{url}/-/ready")
    return Prometheus(url, process)


# --------------------------------------------------------------------------- Alertmanager

# Only these settings differ from the shipped files: the timings are cut from minutes and hours
# to seconds so that a test takes seconds, and the URL and the token's path point at this test.
TIMINGS = {"group_wait": "1s", "group_interval": "1s", "repeat_interval": "10s"}
RESOLVE_TIMEOUT = "10s"


def alertmanager_config(nodefence: Nodefence, token_file: Path) -> dict[str, Any]:
    """``alertmanager.example.yaml`` (which carries ``nodefence-route.yaml`` as its first child
    route) with the nodefence receiver pointed at this test's receiver and token file."""
    config: dict[str, Any] = yaml.safe_load(AM_EXAMPLE.read_text())
    snippet = yaml.safe_load(AM_SNIPPET.read_text())
    assert config["route"]["routes"][0] == snippet["route"], "example and snippet disagree"
    assert snippet["receiver"] in config["receivers"], "example and snippet disagree"
    config.setdefault("global", {})["resolve_timeout"] = RESOLVE_TIMEOUT
    for route in [config["route"], *config["route"]["routes"]]:
        for key, value in TIMINGS.items():
            if key in route:
                route[key] = value
    (receiver,) = (r for r in config["receivers"] if r["name"] == snippet["receiver"]["name"])
    for hook in receiver["webhook_configs"]:
        hook["url"] = f"{nodefence.url}/alerts"
        hook["http_config"]["authorization"]["credentials_file"] = str(token_file)
    return config


def write_token_file(workdir: Path, token: str) -> Path:
    """The token where kube-prometheus would mount the Secret: one file per key, no newline."""
    shipped = yaml.safe_load(AM_SNIPPET.read_text())
    credentials = Path(
        shipped["receiver"]["webhook_configs"][0]["http_config"]["authorization"][
            "credentials_file"
        ]
    )
    folder = workdir / "secrets" / credentials.parent.name
    folder.mkdir(parents=True)
    path = folder / credentials.name
    path.write_text(token)
    path.chmod(0o600)
    return path


@dataclass
class Alertmanager:
    url: str
    process: Process

    def webhook_counts(self) -> tuple[int, int]:
        """Webhook notifications attempted and failed, from Alertmanager's own metrics."""
        status, raw = http("GET", f"{self.url}/metrics")
        assert status == 200, f"alertmanager metrics -> {status}"
        sent = failed = 0
        for line in raw.decode().splitlines():
            if 'integration="webhook"' not in line or line.startswith("#"):
                continue
            value = int(float(line.rsplit(" ", 1)[1]))
            if line.startswith("alertmanager_notifications_total{"):
                sent += value
            elif line.startswith("alertmanager_notifications_failed_total{"):
                failed += value
        return sent, failed

    def webhook_requests(self) -> int:
        """Webhook requests answered (or failed), from Alertmanager's own metrics: a
        notification is counted in ``webhook_counts`` when it starts, a request only once the
        receiver has answered it."""
        status, raw = http("GET", f"{self.url}/metrics")
        assert status == 200, f"alertmanager metrics -> {status}"
        return sum(
            int(float(line.rsplit(" ", 1)[1]))
            for line in raw.decode().splitlines()
            if line.startswith("alertmanager_notification_requests_total{")
            and 'integration="webhook"' in line
        )

    def alerts(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = get_json(f"{self.url}/api/v2/alerts")
        return found


def start_alertmanager(
    procs: Processes, name: str, nodefence: Nodefence, token_file: Path
) -> Alertmanager:
    workdir = procs.workdir / name
    workdir.mkdir()
    config_file = workdir / "alertmanager.yml"
    config_file.write_text(yaml.safe_dump(alertmanager_config(nodefence, token_file)))
    port = free_port()
    process = procs.start(
        name,
        [
            "prometheus-alertmanager",
            f"--config.file={config_file}",
            f"--storage.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            # Empty: no gossip, so each instance notifies on its own like an HA pair does
            # while its peers are partitioned away.
            "--cluster.listen-address=",
            "--log.level=debug",
        ],
        cwd=workdir,
    )
    url = f"http://127.0.0.1:{port}"
    procs.wait_ready(process, f"{url}/-/ready")
    return Alertmanager(url, process)
