"""Time to recovery, end to end with the real Prometheus and Alertmanager: a node of the seed
cluster dies (its kubelet stops, its Lease stops renewing; nothing is backdated) and the clock
runs until its StatefulSet pods run on other nodes.

Every configured delay on the way (the node lifecycle controller's grace period, the scrape and
evaluation intervals, the rule's ``for``, Alertmanager's group timings, the policy's NotReady and
Lease waits, the reconcile CronJob's period, the simulated cluster's eviction toleration) is
divided by one factor, in copies of the shipped files written to a temporary directory, so that
a run takes minutes; nodefence's own work and the processes' real latencies are not scaled. The
measured intervals are then split into the scaled configured waits and what is left over, which
is nodefence's own overhead. ``estimate`` turns the same delays, unscaled, into the expected
time to recovery of a default install.

``python -m bench.recovery`` runs this section alone; ``python -m bench`` includes it.
``--backend real`` runs the chain unscaled on the real control plane instead
(``bench.recovery_real``).
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import re
import ssl
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from bench.common import Row
from bench.processes import (
    Process,
    Processes,
    eventually,
    free_port,
    get_json,
    http,
    processes,
    tail,
)
from nodefence.policy import parse_policy
from nodefence_sim.demo.cluster_view import pod_status
from nodefence_sim.server import LISTENING
from nodefence_sim.simulation import SimSettings

REPO = Path(__file__).resolve().parents[1]
RULES = REPO / "alertrules" / "nodefence.rules.yaml"
AM_EXAMPLE = REPO / "deploy" / "alertmanager" / "alertmanager.example.yaml"
AM_SNIPPET = REPO / "deploy" / "alertmanager" / "nodefence-route.yaml"
POLICY = REPO / "deploy" / "base" / "policy.yaml"
CRONJOB = REPO / "deploy" / "components" / "reconcile-cronjob" / "cronjob.yaml"

TRIGGER = "NodefenceNodeNotReady"
NODE = "control02"
NAMESPACE = "openstack"
# With real kubelets (``simulate --real-nodes 2``): the machine that dies, the one its pod moves
# to, and the benchmark's own StatefulSet there (the seed's pods stay on kwok nodes).
REAL_NODE, REAL_OTHER = "real01", "real02"
REAL_NAMESPACE = "default"
REAL_STATEFULSET = "db"
# Every real node runs this image from its own containerd; no kubelet pulls.
REAL_IMAGE = "nodefence-sim/busybox:1"
# The real nodes' machines boot after the seed is loaded, under the same busy machine.
REAL_NODES_START_SECONDS = 300.0
OOS = "node.kubernetes.io/out-of-service"
TOKEN = "bench-recovery-token"  # noqa: S105 - a loopback-only receiver started by the benchmark
# The first release with NodeOutOfServiceVolumeDetach locked on: the out-of-service taint then
# releases the dead node's volumes, as on any supported cluster a newcomer installs on.
K8S_VERSION = "1.28.0"

DEFAULT_FACTOR = 5.0
# A cold start of the real control plane on a busy 2-core machine: etcd, the API server, the
# controllers, five kwoks and the seed's pods scheduled and Running.
REAL_START_SECONDS = 600.0
POLL_SECONDS = 0.05
LOG_WAIT_SECONDS = 60.0
# The real API server writes an audit record for each of the benchmark's reads; a slower poll
# keeps that load small beside waits of minutes.
REAL_POLL_SECONDS = 0.25
# kube-prometheus scrapes kube-state-metrics and evaluates rules every 30 s (Prometheus' own
# default is 1 m for both); the benchmark and the estimate assume kube-prometheus.
SCRAPE_SECONDS = 30.0
EVALUATION_SECONDS = 30.0
# The kubelet renews its Lease every 10 s (a quarter of leaseDurationSeconds 40).
KUBELET_LEASE_RENEW_SECONDS = 10.0
# Assumptions of the estimate, not measured here: a CronJob pod from a cached image is running
# a few seconds after its slot; a StatefulSet pod whose volume must detach and attach (CSI) and
# whose image is cached runs about half a minute after its predecessor is gone.
JOB_START_SECONDS = 5.0
POD_START_SECONDS = 30.0
# Kubernetes 1.29 and later mark a silent node Unknown after 50 s, not 40 s.
NEWER_GRACE_SECONDS = 50.0
OVERHEAD_TARGET_SECONDS = 10.0
INSTALL_TARGET_SECONDS = 8 * 60.0

_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
_TIMINGS = ("group_wait", "group_interval", "repeat_interval")


# ------------------------------------------------------------------------ durations and scaling


def parse_duration(text: str) -> float:
    """Seconds of a Prometheus/Alertmanager duration such as ``1m``, ``1h30m`` or ``500ms``."""
    if text == "0":
        return 0.0
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a Prometheus duration: {text!r}")
    return sum(int(n) * _UNITS[u] for n, u in parts)


def format_duration(seconds: float) -> str:
    """A duration Prometheus and Alertmanager accept; they take integers only, so a fraction of
    a second is written in milliseconds."""
    millis = round(seconds * 1000)
    if millis % 1000 == 0:
        return f"{millis // 1000}s"
    return f"{millis}ms"


def scale_duration(text: str, factor: float) -> str:
    return format_duration(parse_duration(text) / factor)


def cron_period(schedule: str) -> float:
    """Seconds between the slots of a CronJob schedule that runs every N minutes."""
    minute, *rest = schedule.split()
    if len(rest) != 4 or any(field != "*" for field in rest):
        raise ValueError(f"not an every-N-minutes schedule: {schedule!r}")
    if minute == "*":
        return 60.0
    if minute.startswith("*/") and minute[2:].isdigit():
        return 60.0 * int(minute[2:])
    raise ValueError(f"not an every-N-minutes schedule: {schedule!r}")


@dataclass(frozen=True)
class Delays:
    """The configured delays on the way from a dead node to its pods running elsewhere, in
    seconds."""

    node_monitor_grace: float
    lease_renew: float
    pod_eviction_toleration: float
    scrape_interval: float
    evaluation_interval: float
    rule_for: float
    group_wait: float
    group_interval: float
    repeat_interval: float
    min_not_ready: float
    lease_staleness: float
    reconcile_period: float

    def scaled(self, factor: float) -> Delays:
        return Delays(**{f.name: getattr(self, f.name) / factor for f in fields(self)})

    def fence_allowed_after_death(self) -> float:
        """When the policy first allows the fence, counted from the kubelet's last renewal:
        the node's NotReady duration runs from the moment the controller marked it Unknown."""
        return max(self.node_monitor_grace + self.min_not_ready, self.lease_staleness)

    def alert_after_death(self) -> tuple[float, float]:
        """The earliest and latest moment the trigger alert can fire: the grace period and the
        rule's ``for``, plus up to one scrape and two evaluations of alignment."""
        earliest = self.node_monitor_grace + self.rule_for
        return earliest, earliest + self.scrape_interval + 2 * self.evaluation_interval


def _trigger_route(config: Mapping[str, Any]) -> Mapping[str, Any]:
    for route in config["route"].get("routes") or []:
        if any(TRIGGER in str(m) for m in route.get("matchers") or []):
            return dict(route)
    raise LookupError(f"no route for {TRIGGER} in {AM_EXAMPLE}")


def _rule_for(rules: Mapping[str, Any], name: str) -> float:
    for group in rules["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == name:
                return parse_duration(str(rule.get("for", "0s")))
    raise LookupError(f"no rule {name} in {RULES}")


def shipped_delays() -> Delays:
    """The delays a default install runs with, read from the shipped files (and, for
    Kubernetes, the simulator's defaults, which are the real components')."""
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    route = _trigger_route(yaml.safe_load(AM_EXAMPLE.read_text(encoding="utf-8")))
    rule = parse_policy(yaml.safe_load(POLICY.read_text(encoding="utf-8"))).rules[0]
    cronjob = yaml.safe_load(CRONJOB.read_text(encoding="utf-8"))
    sim = SimSettings()
    return Delays(
        node_monitor_grace=sim.node_monitor_grace_seconds,
        lease_renew=KUBELET_LEASE_RENEW_SECONDS,
        pod_eviction_toleration=float(sim.pod_eviction_toleration_seconds),
        scrape_interval=SCRAPE_SECONDS,
        evaluation_interval=EVALUATION_SECONDS,
        rule_for=_rule_for(rules, TRIGGER),
        group_wait=parse_duration(str(route["group_wait"])),
        group_interval=parse_duration(str(route["group_interval"])),
        repeat_interval=parse_duration(str(route["repeat_interval"])),
        min_not_ready=float(rule.min_not_ready_seconds),
        lease_staleness=float(rule.lease_staleness_seconds),
        reconcile_period=cron_period(str(cronjob["spec"]["schedule"])),
    )


# ------------------------------------------------------------------ config files for one run


def scaled_rules(
    rules: Mapping[str, Any], factor: float, *, trigger_for: float | None = None
) -> dict[str, Any]:
    """The shipped rules with every ``for:`` divided by ``factor``, the trigger's set to
    ``trigger_for`` seconds when given; nothing else changes."""
    copy: dict[str, Any] = json.loads(json.dumps(rules))
    for group in copy["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == TRIGGER and trigger_for is not None:
                rule["for"] = format_duration(trigger_for)
            elif "for" in rule:
                rule["for"] = scale_duration(str(rule["for"]), factor)
    return copy


def scaled_alertmanager(
    config: Mapping[str, Any], factor: float, *, receiver_url: str, token_file: Path
) -> dict[str, Any]:
    """``alertmanager.example.yaml`` with every route's group timings and the resolve timeout
    divided by ``factor`` and the nodefence receiver pointed at this run's receiver."""
    copy: dict[str, Any] = json.loads(json.dumps(config))
    snippet = yaml.safe_load(AM_SNIPPET.read_text(encoding="utf-8"))
    glob = copy.setdefault("global", {})
    glob["resolve_timeout"] = scale_duration(str(glob.get("resolve_timeout", "5m")), factor)
    pending = [copy["route"]]
    while pending:
        route = pending.pop()
        for key in _TIMINGS:
            if key in route:
                route[key] = scale_duration(str(route[key]), factor)
        pending.extend(route.get("routes") or [])
    for receiver in copy["receivers"]:
        if receiver["name"] != snippet["receiver"]["name"]:
            continue
        for hook in receiver["webhook_configs"]:
            hook["url"] = receiver_url
            hook["http_config"]["authorization"]["credentials_file"] = str(token_file)
    return copy


def prometheus_config(
    delays: Delays, *, rules_file: Path, metrics: str, alertmanager: str
) -> dict[str, Any]:
    interval = format_duration(delays.scrape_interval)
    return {
        "global": {
            "scrape_interval": interval,
            "scrape_timeout": interval,
            "evaluation_interval": format_duration(delays.evaluation_interval),
        },
        "rule_files": [str(rules_file)],
        "alerting": {
            "alertmanagers": [
                {
                    "api_version": "v2",
                    "static_configs": [{"targets": [alertmanager.removeprefix("http://")]}],
                }
            ]
        },
        "scrape_configs": [
            {
                "job_name": "kube-state-metrics",
                "static_configs": [{"targets": [metrics.removeprefix("http://")]}],
            }
        ],
    }


def seed_scenario(delays: Delays, factor: float) -> dict[str, Any]:
    """The seed cluster on a current Kubernetes with the run's kubelet renewal, grace and
    eviction toleration, and the simulated controllers' other periods divided by ``factor``."""
    text = resources.files("nodefence_sim").joinpath("scenarios", "seed.yaml").read_text("utf-8")
    scenario: dict[str, Any] = yaml.safe_load(text)
    defaults = SimSettings()
    scenario["simulation"] = {
        **(scenario.get("simulation") or {}),
        "k8s_version": K8S_VERSION,
        "feature_gates": {},
        "lease_renew_seconds": delays.lease_renew,
        "node_monitor_grace_seconds": delays.node_monitor_grace,
        "node_status_report_seconds": defaults.node_status_report_seconds / factor,
        "pod_eviction_toleration_seconds": max(1, round(delays.pod_eviction_toleration)),
        "lease_duration_seconds": max(1, round(defaults.lease_duration_seconds / factor)),
        "orphan_pod_quarantine_seconds": defaults.orphan_pod_quarantine_seconds / factor,
    }
    return scenario


@dataclass(frozen=True)
class Case:
    key: str
    title: str
    fencing: Mapping[str, Any] | None
    # True: the policy's waits are already over when the trigger alert fires, so the first
    # delivery fences. False: the shipped waits, so the first delivery is refused as too early.
    first_delivery_fences: bool
    # Set in the policy's cluster section, over the shipped policy's.
    cluster: Mapping[str, Any] = field(default_factory=dict)
    # How the node dies: "hung", its kubelet stops and its BMC still reads On (a hang, a
    # kernel panic, a partition); "off", the machine loses power: the BMC reads Off as the
    # kubelet stops.
    failure: str = "hung"
    # False: no Alertmanager and no Prometheus; nodefence's NODEFENCE_ALERTMANAGER_URL names
    # a closed port, so no alert is ever delivered and the Node watch or the fallback decides.
    alertmanager: bool = True
    # Who runs the reconcile passes: "cronjob", the CronJob alone, the receiver running none
    # (the Knative overlay: one reconcile period on the path, not two interleaved);
    # "receiver", the receiver itself every period, with its Node watch and wake-ups, and no
    # CronJob (the Deployment overlay and the Helm chart's default).
    passes: str = "cronjob"
    # Whose node dies: "kwok", the seed's control02, a kwok kubelet whose StatefulSet pods are
    # the seed's; "real", real01, a real kubelet with containerd and runc (``simulate
    # --real-nodes 2``, the real backend only) running the benchmark's own StatefulSet, whose
    # pod must run again, ready, on real02.
    nodes: str = "kwok"

    @property
    def node(self) -> str:
        return REAL_NODE if self.nodes == "real" else NODE

    @property
    def namespace(self) -> str:
        return REAL_NAMESPACE if self.nodes == "real" else NAMESPACE


CASES = (
    Case(
        "webhook",
        "(a) inference, first delivery fences",
        {"driver": "none"},
        first_delivery_fences=True,
    ),
    Case(
        "reconcile",
        "(b) inference, shipped waits: first delivery too early",
        {"driver": "none"},
        first_delivery_fences=False,
    ),
    Case("redfish", "(c) Redfish power-off, first delivery fences", None, True),
)


def case_waits(case: Case, delays: Delays) -> tuple[int, int]:
    """(min NotReady, Lease staleness) in whole seconds, as the policy takes them. With the
    first delivery meant to fence, they are the longest the trigger alert guarantees: it fires
    ``for`` after the node was marked Unknown, ``grace + for`` after the last renewal."""
    if case.first_delivery_fences:
        return (
            math.floor(delays.rule_for),
            math.floor(delays.node_monitor_grace + delays.rule_for),
        )
    return max(0, round(delays.min_not_ready)), max(1, round(delays.lease_staleness))


def case_policy(case: Case, delays: Delays) -> dict[str, Any]:
    """``deploy/base/policy.yaml`` with the case's waits and cluster settings; its fencing
    section (Redfish, ``action: off``) unless the case fences on inference."""
    policy: dict[str, Any] = yaml.safe_load(POLICY.read_text(encoding="utf-8"))
    rule = policy["rules"][0]
    if case.fencing is not None:
        rule["fencing"] = dict(case.fencing)
    rule["min_not_ready_seconds"], rule["lease_staleness_seconds"] = case_waits(case, delays)
    if case.cluster:
        policy["cluster"] = {**(policy.get("cluster") or {}), **case.cluster}
    parse_policy(policy)
    return policy


# --------------------------------------------------------------------------- one measured run


def _iso(value: str | None) -> float | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def log_records(text: str) -> Iterator[dict[str, Any]]:
    """The JSON log lines of a nodefence process (its other output is skipped)."""
    for line in text.splitlines():
        if not line.startswith('{"'):
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            yield record


def fenced(record: Mapping[str, Any], node: str) -> bool:
    return (
        record.get("event") == "decision"
        and record.get("node") == node
        and any(
            r.get("action") == "fence" and r.get("outcome") == "done"
            for r in record.get("results") or []
        )
    )


@dataclass
class Pass:
    slot: float
    started: float
    process: Process


class ReconcileCron:
    """``nodefence reconcile`` at every slot of the (scaled) period, aligned to the wall clock
    as a CronJob's are; like ``concurrencyPolicy: Forbid``, a slot whose predecessor still runs
    is skipped."""

    def __init__(
        self, procs: Processes, period: float, env: Mapping[str, str], *, enabled: bool = True
    ) -> None:
        self.procs, self.period, self.env, self.enabled = procs, period, dict(env), enabled
        self.passes: list[Pass] = []
        self.skipped = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="reconcile-cron", daemon=True)

    def __enter__(self) -> ReconcileCron:
        if self.enabled:
            self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self.enabled:
            self._thread.join(timeout=self.period + 5)

    def _run(self) -> None:
        while not self._stop.is_set():
            slot = math.floor(time.time() / self.period + 1) * self.period
            if self._stop.wait(max(0.0, slot - time.time())):
                return
            if self.passes and self.passes[-1].process.alive():
                self.skipped += 1
                continue
            argv = [sys.executable, "-m", "nodefence", "reconcile"]
            name = f"reconcile-{len(self.passes):03d}"
            started = time.time()
            self.passes.append(Pass(slot, started, self.procs.start(name, argv, env=self.env)))


@dataclass
class Measured:
    """Wall-clock moments (Unix seconds) of one run; ``None`` where not seen."""

    case: Case
    delays: Delays
    death: float
    last_renewal: float
    not_ready: float | None = None
    firing: float | None = None
    first_delivery: float | None = None
    first_delivery_verdict: str = ""
    # nodefence's first decision on the node, whatever set it off, and its verdict.
    first_decision: float | None = None
    first_decision_verdict: str = ""
    # When the receiver's decision that fenced was made, where no delivery set it off (the
    # API server's clock, to the second).
    decided: float | None = None
    # Its first read-only reading of the machine's power state, and what it read.
    power_read: float | None = None
    power_read_state: str = ""
    trigger: float | None = None
    fenced_by: str = ""
    taint: float | None = None
    pods_gone: float | None = None
    pods_running: float | None = None
    pass_seconds: float | None = None
    passes: int = 0
    power_off: float | None = None
    # The longest poll round: how late a sighting can be.
    resolution: float = 0.0
    backend: str = "sim"
    # The StatefulSet pods of the dead node, and how many of them a client deleted.
    pods: tuple[str, ...] = ()
    pods_deleted: int = 0


class Api:
    """The cluster's API as the run's kubeconfig describes it: plain HTTP to the simulator; TLS
    with the run's CA and a bearer token to the real kube-apiserver."""

    def __init__(self, kubeconfig: Path) -> None:
        config = yaml.safe_load(kubeconfig.read_text(encoding="utf-8"))
        cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
        self.server = str(cluster["server"])
        ca = cluster.get("certificate-authority-data")
        self._tls = ssl.create_default_context(cadata=base64.b64decode(ca).decode()) if ca else None
        self._headers = {"Authorization": f"Bearer {user['token']}"} if user.get("token") else {}

    def get(self, path: str) -> dict[str, Any] | None:
        """The object or list at ``path``; None when the API server answers 404."""
        request = urllib.request.Request(self.server + path, headers=self._headers)  # noqa: S310 - loopback
        try:
            with urllib.request.urlopen(request, timeout=10, context=self._tls) as response:  # noqa: S310
                found: dict[str, Any] = json.loads(response.read())
                return found
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise RuntimeError(f"GET {path} -> {exc.code}: {exc.read()[:300]!r}") from exc

    def send(self, method: str, path: str, body: Mapping[str, Any]) -> None:
        """Create (POST) or merge-patch (PATCH) at ``path``; any error answer raises."""
        kind = "merge-patch+json" if method == "PATCH" else "json"
        request = urllib.request.Request(  # noqa: S310 - loopback
            self.server + path,
            data=json.dumps(body).encode(),
            method=method,
            headers={**self._headers, "Content-Type": f"application/{kind}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10, context=self._tls):  # noqa: S310
                return
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"{method} {path} -> {exc.code}: {exc.read()[:300]!r}") from exc


class Stack:
    """The cluster (the simulator, or the real control plane behind the same control surface),
    ``nodefence serve``, Alertmanager and Prometheus of one run."""

    def __init__(
        self, procs: Processes, case: Case, delays: Delays, factor: float, backend: str
    ) -> None:
        self.procs, self.case, self.delays, self.factor = procs, case, delays, factor
        work = procs.workdir
        self.kubeconfig, self.inventory = work / "kubeconfig", work / "bmc-inventory.yaml"
        self.control_url = self._cluster(backend)
        self.api = Api(self.kubeconfig)
        if case.nodes == "real":
            self._place_statefulset()
        policy = work / "policy.yaml"
        policy.write_text(yaml.safe_dump(case_policy(case, delays), sort_keys=False), "utf-8")
        self.env = {
            "KUBECONFIG": str(self.kubeconfig),
            "NODEFENCE_NAMESPACE": "nodefence",
            "NODEFENCE_POLICY_FILE": str(policy),
            "NODEFENCE_BMC_INVENTORY": str(self.inventory),
            "NODEFENCE_LOG_FORMAT": "json",
        }
        port = free_port()
        self.nodefence_url = f"http://127.0.0.1:{port}"
        # The Alertmanager every nodefence process asks, as the Deployment and the CronJob do:
        # the run's own, or (``case.alertmanager`` False) a port nothing listens on.
        am_port = free_port()
        self.am_url = f"http://127.0.0.1:{am_port}"
        self.serve = procs.start(
            "nodefence",
            [sys.executable, "-m", "nodefence", "serve"],
            env={
                **self.env,
                "PORT": str(port),
                "NODEFENCE_HOST": "127.0.0.1",
                "NODEFENCE_ALERT_TOKEN": TOKEN,
                "NODEFENCE_IDENTITY": "bench-recovery",
                "NODEFENCE_RECONCILE_INTERVAL": "0"
                if case.passes == "cronjob"
                else f"{delays.reconcile_period:g}",
                "NODEFENCE_ALERTMANAGER_URL": self.am_url,
            },
        )
        procs.wait_ready(self.serve, f"{self.nodefence_url}/readyz")
        self.prom_url: str | None = None
        if case.alertmanager:
            self._alertmanager(am_port)
            self.prom_url = self._prometheus()

    def _cluster(self, backend: str) -> str:
        """Start ``nodefence simulate`` on ``backend`` with the seed cluster and the run's
        grace period; the URL of its control surface, BMCs and metrics once it is loaded."""
        work = self.procs.workdir
        argv = [sys.executable, "-m", "nodefence", "simulate", "--backend", backend]
        if backend == "real":
            # The scenario's simulation settings are the simulator's; the real controllers take
            # their grace period as a flag, and kwok renews every 10 s as a kubelet does.
            grace = format_duration(self.delays.node_monitor_grace)
            argv += ["--scenario", "seed", "--node-monitor-grace-period", grace]
            within = REAL_START_SECONDS
            if self.case.nodes == "real":
                argv += ["--real-nodes", "2"]
                within += REAL_NODES_START_SECONDS
        elif self.case.nodes == "real":
            raise ValueError("real kubelets run on the real backend only")
        else:
            scenario = work / "scenario.yaml"
            text = yaml.safe_dump(seed_scenario(self.delays, self.factor), sort_keys=False)
            scenario.write_text(text, "utf-8")
            argv += ["--scenario", str(scenario)]
            within = 60.0
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        argv += ["--port", str(port), "--kubeconfig-out", str(self.kubeconfig)]
        process = self.procs.start(backend, [*argv, "--bmc-inventory-out", str(self.inventory)])

        def loaded() -> bool:
            if not process.alive():
                raise RuntimeError(
                    f"simulate --backend {backend} exited:\n{tail(process.output())}"
                )
            return LISTENING + url in process.output()

        eventually(loaded, within=within, interval=1.0, what=f"simulate --backend {backend}")
        return url

    def _place_statefulset(self) -> None:
        """The benchmark's StatefulSet of one busybox pod on the real nodes, placed on the one
        that dies: the other is cordoned until the pod runs and is ready."""
        other = f"/api/v1/nodes/{REAL_OTHER}"
        self.api.send("PATCH", other, {"spec": {"unschedulable": True}})
        self.api.send(
            "POST",
            f"/apis/apps/v1/namespaces/{REAL_NAMESPACE}/statefulsets",
            real_statefulset(),
        )
        eventually(
            lambda: bool(_healthy(self)),
            within=REAL_NODES_START_SECONDS,
            what=f"{REAL_STATEFULSET}-0 Running and ready on {REAL_NODE}",
        )
        self.api.send("PATCH", other, {"spec": {"unschedulable": False}})

    def _alertmanager(self, port: int) -> None:
        work = self.procs.workdir / "alertmanager"
        work.mkdir()
        token = work / "token"
        token.write_text(TOKEN, "utf-8")
        token.chmod(0o600)
        config = scaled_alertmanager(
            yaml.safe_load(AM_EXAMPLE.read_text(encoding="utf-8")),
            self.factor,
            receiver_url=f"{self.nodefence_url}/alerts",
            token_file=token,
        )
        (work / "alertmanager.yml").write_text(yaml.safe_dump(config), "utf-8")
        process = self.procs.start(
            "alertmanager",
            [
                "prometheus-alertmanager",
                f"--config.file={work / 'alertmanager.yml'}",
                f"--storage.path={work / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--cluster.listen-address=",
            ],
        )
        self.procs.wait_ready(process, f"{self.am_url}/-/ready")

    def _prometheus(self) -> str:
        work = self.procs.workdir / "prometheus"
        work.mkdir()
        rules = work / "nodefence.rules.yaml"
        shipped = yaml.safe_load(RULES.read_text(encoding="utf-8"))
        scaled = scaled_rules(shipped, self.factor, trigger_for=self.delays.rule_for)
        rules.write_text(yaml.safe_dump(scaled, sort_keys=False))
        config = prometheus_config(
            self.delays, rules_file=rules, metrics=self.control_url, alertmanager=self.am_url
        )
        (work / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False), "utf-8")
        port = free_port()
        process = self.procs.start(
            "prometheus",
            [
                "prometheus",
                f"--config.file={work / 'prometheus.yml'}",
                f"--storage.tsdb.path={work / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
        )
        url = f"http://127.0.0.1:{port}"
        self.procs.wait_ready(process, f"{url}/-/ready")
        return url

    def kill(self) -> tuple[float, float]:
        """The kubelet stops now (no backdating), and with ``case.failure`` "off" the machine's
        power with it; returns that moment and the Lease's last renewal before it, from which
        the node lifecycle controller counts its grace."""
        node = self.case.node
        death = time.time()
        if self.case.failure == "off":
            self._lose_power()
        else:
            status, body = http("POST", f"{self.control_url}/sim/v1/nodes/{node}/down", {})
            if status != 200:
                raise RuntimeError(f"down {node} -> {status}: {body!r}")
        lease = self.api.get(
            f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node}"
        )
        renewed = _iso(((lease or {}).get("spec") or {}).get("renewTime")) or death
        return death, min(renewed, death)

    def leased(self) -> bool:
        """Whether the node's kubelet has renewed its Lease: a real kubelet writes its first
        one up to 10 s after its Node registered, and a node that dies before that has no Lease
        to prove its death by (nodefence then refuses, as ``fence_without_lease`` is off)."""
        lease = self.api.get(
            f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{self.case.node}"
        )
        return bool(((lease or {}).get("spec") or {}).get("renewTime"))

    def _lose_power(self) -> None:
        """The machine loses power: a ForceOff sent by the benchmark itself (not by nodefence)
        to the node's BMC at the inventory's address, which stops its kubelet as ``down`` does
        and leaves the BMC reading Off, as a machine whose power failed reads."""
        node = self.case.node
        entry = yaml.safe_load(self.inventory.read_text(encoding="utf-8"))["nodes"][node]
        login = base64.b64encode(f"{entry['username']}:{entry['password']}".encode()).decode()
        headers = {"Authorization": f"Basic {login}"}
        system = f"{entry['address']}{entry['system']}"
        reset = f"{system}/Actions/ComputerSystem.Reset"
        status, body = http("POST", reset, {"ResetType": "ForceOff"}, headers=headers)
        if status != 204:
            raise RuntimeError(f"ForceOff {node} -> {status}: {body[:300]!r}")
        status, body = http("GET", system, headers=headers)
        state = json.loads(body).get("PowerState") if status == 200 else None
        if state != "Off":
            raise RuntimeError(f"{node}'s BMC reads {state!r} after ForceOff ({status})")

    # ------------------------------------------------------------------ what the run watches
    def node(self) -> dict[str, Any]:
        found = self.api.get(f"/api/v1/nodes/{self.case.node}")
        if found is None:
            raise RuntimeError(f"node {self.case.node} is gone")
        return found

    def pod(self, name: str) -> dict[str, Any] | None:
        return self.api.get(f"/api/v1/namespaces/{self.case.namespace}/pods/{name}")

    def stateful_pods(self) -> list[dict[str, Any]]:
        """The StatefulSet pods on the node that dies: placed by the simulator's seed, or by
        the real scheduler, so read rather than named."""
        found = self.api.get(
            f"/api/v1/namespaces/{self.case.namespace}/pods"
            f"?fieldSelector=spec.nodeName%3D{self.case.node}"
        )
        return [
            pod
            for pod in (found or {}).get("items") or []
            if any(
                o.get("kind") == "StatefulSet" for o in pod["metadata"].get("ownerReferences") or []
            )
        ]

    def scraped(self) -> bool:
        query = f"{self.prom_url}/api/v1/query?query=up%7Bjob%3D%22kube-state-metrics%22%7D"
        result = get_json(query)["data"]["result"]
        return bool(result) and result[0]["value"][1] == "1"

    def firing(self) -> bool:
        if self.prom_url is None:
            return False
        alerts = get_json(f"{self.prom_url}/api/v1/alerts")["data"]["alerts"]
        return any(
            a["labels"].get("alertname") == TRIGGER
            and a["labels"].get("node") == self.case.node
            and a["state"] == "firing"
            for a in alerts
        )

    def starts_at(self) -> float | None:
        """When Prometheus fired the trigger alert: the ``startsAt`` it sent Alertmanager."""
        if self.prom_url is None:
            return None
        for alert in get_json(f"{self.am_url}/api/v2/alerts"):
            labels = alert["labels"]
            if labels.get("alertname") == TRIGGER and labels.get("node") == self.case.node:
                return _iso(alert.get("startsAt"))
        return None

    def requests(self, since: int) -> list[dict[str, Any]]:
        """The API requests of clients (nodefence, the benchmark's reads) after ``since``: the
        simulator's log, or on the real backend the kube-apiserver's audit log, which leaves the
        control plane's own components out as the simulator leaves its controllers out."""
        found: list[dict[str, Any]] = get_json(f"{self.control_url}/sim/v1/requests?since={since}")[
            "requests"
        ]
        return found

    def decisions(self) -> list[dict[str, Any]]:
        """The receiver's last decisions on the node (``GET /decisions``), newest first."""
        status, body = http(
            "GET",
            f"{self.nodefence_url}/decisions?node={self.case.node}&limit=200",
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        if status != 200:
            raise RuntimeError(f"GET /decisions -> {status}: {body[:300]!r}")
        found: list[dict[str, Any]] = json.loads(body)["decisions"]
        return found

    def cursor(self) -> int:
        value: int = get_json(f"{self.control_url}/sim/v1/requests?since=999999999999")["cursor"]
        return value


def taint_written(records: Sequence[Mapping[str, Any]], node: str) -> float | None:
    """The arrival of the first successful write of the node: nodefence writes the node for
    the taint first (the claim before it is in its own ConfigMap)."""
    for record in records:
        if (
            record["method"] in ("PUT", "PATCH")
            and record["path"] == f"/api/v1/nodes/{node}"
            and 200 <= record["status"] < 300
        ):
            return float(record["at"])
    return None


def pods_deleted(records: Sequence[Mapping[str, Any]], names: Iterable[str], namespace: str) -> int:
    """How many of the pods a client (nodefence's purge) deleted; the rest went by the
    controllers' own hand (the taint's eviction, then the pod garbage collector)."""
    paths = {f"/api/v1/namespaces/{namespace}/pods/{name}" for name in names}
    return len(
        {
            r["path"]
            for r in records
            if r["method"] == "DELETE" and r["path"] in paths and 200 <= r["status"] < 300
        }
    )


def running_ready(pod: dict[str, Any]) -> bool:
    """Running with every container ready: a real kubelet reports Running before its
    containers' readiness, kwok and the simulator both at once."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return pod_status(pod) == "Running" and bool(statuses) and all(s.get("ready") for s in statuses)


def real_statefulset() -> dict[str, Any]:
    """One pod on the real nodes (``sim.nodefence.io/kubelet: real``) from the image every
    real node holds, with no volume: no real CSI driver runs there yet."""
    labels = {"app": REAL_STATEFULSET}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": REAL_STATEFULSET},
        "spec": {
            "replicas": 1,
            "serviceName": REAL_STATEFULSET,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"sim.nodefence.io/kubelet": "real"},
                    "containers": [
                        {
                            "name": "main",
                            "image": REAL_IMAGE,
                            "imagePullPolicy": "Never",
                            "command": ["sh", "-c", "while true; do sleep 1; done"],
                        }
                    ],
                },
            },
        },
    }


def _healthy(stack: Stack) -> dict[str, str]:
    pods = stack.stateful_pods()
    if not pods or not all(running_ready(pod) for pod in pods):
        return {}
    return {pod["metadata"]["name"]: pod["metadata"]["uid"] for pod in pods}


def _watch(stack: Stack, run: Measured, uids: Mapping[str, str], within: float) -> None:
    """Poll the node, Prometheus and the pods until every StatefulSet pod of the dead node runs
    elsewhere. Each sighting is stamped when its answer came back, so it is an upper bound;
    the precise moments (the taint's request, the alert's startsAt) are read afterwards."""
    deadline = time.monotonic() + within
    gone: dict[str, float] = {}
    running: dict[str, float] = {}
    previous = time.time()
    while len(running) < len(uids):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{run.case.key}: StatefulSet pods not running elsewhere: {running}")
        node = stack.node()
        seen = time.time()
        ready: dict[str, Any] = next(
            (c for c in node["status"].get("conditions") or [] if c["type"] == "Ready"), {}
        )
        if run.not_ready is None and ready.get("status") != "True":
            run.not_ready = seen
        if run.taint is None and any(t.get("key") == OOS for t in node["spec"].get("taints") or []):
            run.taint = seen
        if run.firing is None and stack.firing():
            run.firing = time.time()
        for name, uid in uids.items():
            pod = stack.pod(name)
            seen = time.time()
            if name not in gone and (pod is None or pod["metadata"]["uid"] != uid):
                gone[name] = seen
            if (
                name not in running
                and pod is not None
                and pod["metadata"]["uid"] != uid
                and running_ready(pod)
                and pod["spec"].get("nodeName") not in ("", run.case.node)
            ):
                running[name] = seen
        # From the previous round's end: the sleep and this round, how late a sighting can be.
        now = time.time()
        run.resolution = max(run.resolution, now - previous)
        previous = now
        time.sleep(REAL_POLL_SECONDS if run.backend == "real" else POLL_SECONDS)
    run.pods_gone = max(gone.values())
    run.pods_running = max(running.values())


def delivery_spans(records: Iterable[Mapping[str, Any]], node: str) -> list[tuple[float, float]]:
    """When each webhook for the node arrived and when its answer went out: its request line
    is written at the answer, ``duration_ms`` after the arrival."""
    return sorted(
        (moment - float(r.get("duration_ms") or 0) / 1000, moment)
        for r in records
        if r.get("event") == "http_request"
        and r.get("path") == "/alerts"
        and node in str(r.get("group_key"))
        and (moment := _iso(r.get("timestamp"))) is not None
    )


def deliveries(records: Iterable[Mapping[str, Any]], node: str) -> list[float]:
    """When each webhook for the node arrived."""
    return [arrived for arrived, _ in delivery_spans(records, node)]


# A decision's line is written before its webhook's answer; this much later still counts.
ANSWER_SLACK_SECONDS = 1.0
# Who fenced when the receiver did without a delivery: its Node watch or a wake-up it armed.
WATCH = "receiver (no delivery)"


def fenced_by_receiver(
    spans: Sequence[tuple[float, float]], moment: float
) -> tuple[str, float | None]:
    """Who set off the receiver's decision that fenced, logged at ``moment``: the delivery being
    answered then (its arrival is the trigger), or none, when its Node watch or a wake-up it
    armed decided (the trigger is then not in the log: None)."""
    for arrived, answered in spans:
        if arrived <= moment <= answered + ANSWER_SLACK_SECONDS:
            return "webhook", arrived
    return WATCH, None


# ``GET /decisions``' sources of a decision the receiver made by itself, as the run names them.
SOURCES = {
    "wake-up": "receiver's wake-up (Node watch or a wait's end)",
    "reconcile-loop": "receiver's reconcile pass",
}


def receiver_source(entries: Sequence[Mapping[str, Any]], node: str) -> tuple[str, float | None]:
    """Who made the receiver's first decision on the node that fenced, from its ``GET
    /decisions`` (newest first), and when it decided (the API server's clock, to the second)."""
    for entry in reversed(entries):
        done = any(
            r.get("action") == "fence" and r.get("outcome") == "done"
            for r in entry.get("results") or []
        )
        if entry.get("node") == node and done:
            source = str(entry.get("source"))
            return SOURCES.get(source, source), _iso(entry.get("decided_at"))
    return WATCH, None


def _read_logs(stack: Stack, run: Measured, cron: ReconcileCron) -> None:
    """Delivery, fence and power moments from nodefence's own JSON logs. A fence by a webhook
    is triggered by the delivery it answered (Alertmanager repeats a group); one the receiver
    made by itself (its Node watch, a wake-up) is not dated in the log."""
    records = [
        r
        for r in log_records(stack.serve.output())
        if (_iso(r.get("timestamp")) or 0.0) >= run.death
    ]
    node = run.case.node
    spans = delivery_spans(records, node)
    run.first_delivery = spans[0][0] if spans else None
    first = spans[0] if spans else None
    for record in records:
        moment = _iso(record.get("timestamp")) or 0.0
        if record.get("event") == "decision" and record.get("node") == node:
            blocked = record.get("blocked_by")
            verdict = str(record.get("verdict")) + (f" ({blocked})" if blocked else "")
            if run.first_decision is None:
                run.first_decision, run.first_decision_verdict = moment, verdict
            if (
                first is not None
                and not run.first_delivery_verdict
                and first[0] <= moment <= first[1] + ANSWER_SLACK_SECONDS
            ):
                run.first_delivery_verdict = verdict
            if fenced(record, node) and not run.fenced_by:
                run.fenced_by, run.trigger = fenced_by_receiver(spans, moment)
                if run.fenced_by == WATCH:
                    run.fenced_by, run.decided = receiver_source(stack.decisions(), node)
        elif powered_off(record, node):
            run.power_off = run.power_off or moment
        elif power_read(record, node) and run.power_read is None:
            run.power_read, run.power_read_state = moment, str(record.get("state"))
    after = [p for p in cron.passes if p.started >= run.death]
    run.passes = len(after)
    for done in after:
        records = list(log_records(done.process.output()))
        if not run.fenced_by and any(fenced(r, node) for r in records):
            run.fenced_by, run.trigger = done.process.name, done.slot
            stamps = [_iso(r.get("timestamp")) for r in records]
            last = max((s for s in stamps if s is not None), default=None)
            run.pass_seconds = None if last is None else last - done.started
        for record in records:
            if powered_off(record, node):
                run.power_off = run.power_off or _iso(record.get("timestamp"))
            elif power_read(record, node) and run.power_read is None:
                run.power_read = _iso(record.get("timestamp"))
                run.power_read_state = str(record.get("state"))


def power_read(record: Mapping[str, Any], node: str) -> bool:
    """A read-only reading of the node's machine: the one a decision held back by waits asks
    for (``early_power_read``), or a power step that sent nothing."""
    if record.get("node") != node:
        return False
    event = record.get("event")
    return event == "early_power_read" or (event == "power_action" and not record.get("sent"))


def powered_off(record: Mapping[str, Any], node: str) -> bool:
    """The BMC read back Off after nodefence's power-off (not a mere status read)."""
    return (
        record.get("event") == "power_action"
        and record.get("node") == node
        and bool(record.get("sent"))
        and record.get("state") == "off"
    )


def watch_budget(case: Case, delays: Delays) -> float:
    """How long a run may take from the death: the longest wait the policy can impose (with no
    alert, the fallback's window after NotReady), one reconcile period, and two minutes."""
    longest = delays.fence_allowed_after_death()
    if not case.alertmanager:
        after = parse_policy(case_policy(case, delays)).cluster.fallback_after_seconds
        longest = max(longest, delays.node_monitor_grace + after)
    return longest + delays.reconcile_period + 120


def measure(
    case: Case, delays: Delays, factor: float, workdir: Path, backend: str = "sim"
) -> Measured:
    """One run of ``case`` with ``delays`` on ``backend``; ``factor`` divides the configured
    delays that ``delays`` does not name (the other rules and routes, the simulator's other
    periods)."""
    with processes(workdir) as procs:
        try:
            stack = Stack(procs, case, delays, factor, backend)
            uids = eventually(
                lambda: _healthy(stack), within=120, what=f"StatefulSet pods Running on {case.node}"
            )
            eventually(stack.leased, within=120, what=f"{case.node}'s kubelet Lease")
            if case.alertmanager:
                eventually(stack.scraped, within=120, what="Prometheus scraping the cluster")
                time.sleep(delays.evaluation_interval)
            env = {**stack.env, "NODEFENCE_ALERTMANAGER_URL": stack.am_url}
            cronjob = case.passes == "cronjob"
            with ReconcileCron(procs, delays.reconcile_period, env, enabled=cronjob) as cron:
                cursor = stack.cursor()
                death, renewed = stack.kill()
                run = Measured(case, delays, death, renewed, backend=backend, pods=tuple(uids))
                _watch(stack, run, uids, within=watch_budget(case, delays))
                run.firing = stack.starts_at() or run.firing
                requests = stack.requests(cursor)
                run.taint = taint_written(requests, case.node) or run.taint
                run.pods_deleted = pods_deleted(requests, uids, case.namespace)
                # The replacements can run before nodefence has logged the decision that
                # fenced: its line is written once the purge is done.
                deadline = time.monotonic() + LOG_WAIT_SECONDS
                _read_logs(stack, run, cron)
                while not run.fenced_by and time.monotonic() < deadline:
                    time.sleep(0.5)
                    _read_logs(stack, run, cron)
            return run
        except Exception:
            for process in procs.started:
                print(f"--- {process.name}\n{tail(process.output(), 20)}", file=sys.stderr)
            raise


# ------------------------------------------------------------------------------ the results


def _gap(later: float | None, earlier: float | None) -> float | None:
    return None if later is None or earlier is None else later - earlier


def _s(value: float | None, digits: int = 1) -> str:
    return "not seen" if value is None else f"{value:.{digits}f} s"


def overhead(run: Measured) -> tuple[float | None, float | None]:
    """nodefence's own time: from what set it off (the delivery, or the reconcile slot) to the
    taint, and from the taint to the StatefulSet pods running elsewhere."""
    return _gap(run.taint, run.trigger), _gap(run.pods_running, run.taint)


def configured_wait(run: Measured) -> float:
    """The sum of the scaled configured delays on the run's path, from the last renewal."""
    d = run.delays
    if run.case.first_delivery_fences:
        return d.node_monitor_grace + d.rule_for + d.group_wait
    return d.fence_allowed_after_death()


def _total_row(run: Measured) -> Row:
    d = run.delays
    origin = run.last_renewal
    total = _gap(run.pods_running, run.death)
    configured = configured_wait(run)
    earliest, latest = d.alert_after_death()
    notes = [
        f"from the last Lease renewal: alert fired {_s(_gap(run.firing, origin))}, "
        f"delivered {_s(_gap(run.first_delivery, origin))}, taint {_s(_gap(run.taint, origin))}"
    ]
    if run.case.first_delivery_fences:
        notes.append(
            f"waits: grace {d.node_monitor_grace:g} + for {d.rule_for:g} + group_wait "
            f"{d.group_wait:g} s, plus up to {latest - earliest:g} s scrape/eval alignment"
        )
    else:
        notes.append(
            f"waits: grace {d.node_monitor_grace:g} + min NotReady {d.min_not_ready:g} s "
            f"(Lease {d.lease_staleness:g} s), then the next reconcile slot"
        )
    notes.append(f"fenced by {run.fenced_by or 'nobody'}")
    return Row(
        f"{run.case.title}: node death -> StatefulSet pods Running elsewhere",
        _s(total),
        f"{configured:g} s configured waits",
        "" if total is None else f"{total - configured:+.1f} s beyond",
        "",
        "",
        "; ".join(notes),
    )


def _overhead_row(run: Measured, baseline: Measured | None) -> Row:
    fence_wait, taint_to_running = overhead(run)
    own = None if fence_wait is None or taint_to_running is None else fence_wait + taint_to_running
    ratio = ""
    if baseline is not None and run.case.key == "redfish":
        base = overhead(baseline)[0]
        if base and fence_wait is not None:
            ratio = f"{fence_wait / base:.1f}x (a)'s trigger -> taint"
    notes = (
        f"trigger -> taint {_s(fence_wait, 2)}, taint -> old pods gone "
        f"{_s(_gap(run.pods_gone, run.taint), 2)}, -> Running elsewhere "
        f"{_s(_gap(run.pods_running, run.pods_gone), 2)} (sightings up to "
        f"{run.resolution:.2f} s late)"
    )
    if run.power_off is not None:
        notes += f"; BMC read back Off {_s(_gap(run.power_off, run.trigger), 2)} after the trigger"
    met = own is not None and own <= OVERHEAD_TARGET_SECONDS
    return Row(
        f"{run.case.title}: nodefence's own overhead (trigger -> taint -> pods Running)",
        _s(own, 2),
        "",
        ratio,
        f"≤ {OVERHEAD_TARGET_SECONDS:g} s",
        "yes" if met else "NO",
        notes,
    )


def _lateness_row(run: Measured) -> Row:
    d = run.delays
    allowed = run.last_renewal + d.fence_allowed_after_death()
    late = _gap(run.taint, allowed)
    notes = (
        f"first delivery {_s(_gap(run.first_delivery, run.last_renewal))} after the last "
        f"renewal: {run.first_delivery_verdict or 'not seen'}; to the next slot "
        f"{_s(_gap(run.trigger, allowed))}, slot -> taint {_s(_gap(run.taint, run.trigger), 2)} "
        f"(whole pass {_s(run.pass_seconds, 2)}, process start included); "
        f"{run.passes} passes after the death"
    )
    return Row(
        f"{run.case.title}: fence later than the policy's wait",
        _s(late),
        f"{d.reconcile_period:g} s reconcile period",
        "" if late is None else f"{late / d.reconcile_period:.2f} periods",
        "≤ 1 reconcile period",
        "yes" if late is not None and late <= d.reconcile_period else "NO",
        notes,
    )


def rows(runs: Sequence[Measured]) -> list[Row]:
    baseline = next((r for r in runs if r.case.key == "webhook"), None)
    out: list[Row] = []
    for run in runs:
        out += [_total_row(run), _overhead_row(run, baseline)]
        if not run.case.first_delivery_fences:
            out.append(_lateness_row(run))
    return out


# ------------------------------------------------------------------ the default install


@dataclass(frozen=True)
class Step:
    what: str
    typical: float
    worst: float


# A real BMC reports Off a few seconds after ForceOff; the shipped rule waits up to 15 s.
BMC_TYPICAL_SECONDS = 5.0
BMC_WORST_SECONDS = 15.0


def estimate(delays: Delays, *, pass_seconds: float, power: tuple[float, float]) -> list[Step]:
    """The expected time from a dead node to its StatefulSet pod running elsewhere with the
    shipped, unscaled delays. The fence comes from a reconcile pass: the trigger alert fires
    ``for`` after the node was marked Unknown, always before the policy's NotReady minimum, so
    its first delivery is refused as too early. ``pass_seconds`` is a pass's own time to the
    taint; ``power`` the (typical, worst) wait for a BMC to report Off."""
    allowed = delays.fence_allowed_after_death() - delays.node_monitor_grace
    return [
        Step(
            "kubelet silent -> Unknown (node-monitor-grace-period)",
            delays.node_monitor_grace,
            max(delays.node_monitor_grace, NEWER_GRACE_SECONDS),
        ),
        Step("Unknown -> fence allowed (min_not_ready_seconds)", allowed, allowed),
        Step("-> next reconcile slot", delays.reconcile_period / 2, delays.reconcile_period),
        Step("-> reconcile pod running (assumed)", JOB_START_SECONDS, JOB_START_SECONDS),
        Step("-> taint (reconcile pass, measured)", pass_seconds, pass_seconds),
        Step("-> BMC reports Off (assumed)", power[0], power[1]),
        Step("taint -> pod Running elsewhere (assumed)", POD_START_SECONDS, POD_START_SECONDS),
    ]


def estimate_rows(delays: Delays, runs: Sequence[Measured]) -> list[Row]:
    by_key = {run.case.key: run for run in runs}
    reconcile = by_key.get("reconcile")
    measured = _gap(reconcile.taint, reconcile.trigger) if reconcile is not None else None
    pass_seconds = measured if measured is not None else 2.0
    out: list[Row] = []
    for label, power in (
        ("inference", (0.0, 0.0)),
        ("Redfish BMC", (BMC_TYPICAL_SECONDS, BMC_WORST_SECONDS)),
    ):
        steps = estimate(delays, pass_seconds=pass_seconds, power=power)
        typical = sum(s.typical for s in steps)
        worst = sum(s.worst for s in steps)
        out.append(
            Row(
                f"default install ({label}): dead node -> StatefulSet pod Running elsewhere",
                f"{typical / 60:.1f} min (worst {worst / 60:.1f} min)",
                "",
                "",
                f"< {INSTALL_TARGET_SECONDS / 60:g} min",
                "yes" if worst < INSTALL_TARGET_SECONDS else "NO",
                "computed, unscaled: "
                + " + ".join(f"{s.typical:.0f}" for s in steps)
                + " s typical; worst "
                + " + ".join(f"{s.worst:.0f}" for s in steps)
                + " s",
            )
        )
    return out


def run(
    factor: float = DEFAULT_FACTOR, cases: Sequence[str] = ("webhook", "reconcile", "redfish")
) -> list[Row]:
    chosen = [c for c in CASES if c.key in cases]
    runs: list[Measured] = []
    failed: list[Row] = []
    for case in chosen:
        print(f"time to recovery: {case.title} (delays / {factor:g})", flush=True)
        try:
            with tempfile.TemporaryDirectory(prefix=f"nodefence-recovery-{case.key}-") as tmp:
                delays = shipped_delays().scaled(factor)
                runs.append(measure(case, delays, factor, Path(tmp)))
        except (OSError, RuntimeError, TimeoutError) as exc:
            # One case failing (a process that would not start) still reports the others.
            failed.append(Row(case.title, "not measured", note=str(exc).splitlines()[0][:200]))
    return rows(runs) + failed + estimate_rows(shipped_delays(), runs)


def describe(delays: Delays, factor: float) -> str:
    scaled = delays.scaled(factor)
    return ", ".join(
        f"{f.name} {getattr(delays, f.name):g} -> {getattr(scaled, f.name):g} s"
        for f in fields(delays)
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.recovery", description=__doc__)
    parser.add_argument("--factor", type=float, default=DEFAULT_FACTOR, help="delays divided by")
    parser.add_argument(
        "--cases", default="webhook,reconcile,redfish", help="webhook, reconcile, redfish"
    )
    parser.add_argument(
        "--backend",
        choices=("sim", "real"),
        default="sim",
        help="real: unscaled on the real control plane (bench.recovery_real), beside the simulator",
    )
    parser.add_argument(
        "--settings", default="shipped,fastest", help="with --backend real: shipped, fastest"
    )
    parser.add_argument(
        "--failure",
        default="hung",
        help="with --backend real: hung (the kubelet stops, the BMC reads On), off (the machine "
        "loses power, the BMC reads Off), or both, comma-separated",
    )
    parser.add_argument(
        "--alertmanager",
        default="reachable",
        help="with --backend real: reachable, unreachable (no alert is ever delivered), or both",
    )
    parser.add_argument(
        "--nodes",
        choices=("kwok", "real"),
        default="kwok",
        help="with --backend real: whose node dies: kwok, the seed's control02; real, real01 of "
        "simulate --real-nodes 2 (real kubelets, containerd, runc; needs root), whose "
        "StatefulSet pod runs again on real02 (the simulator, which has no real kubelet, not "
        "beside it)",
    )
    parser.add_argument(
        "--runs", type=int, default=1, help="with --backend real: runs of each, median reported"
    )
    parser.add_argument(
        "--simulator",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="with --backend real: each run followed by the simulator's with the same settings",
    )
    args = parser.parse_args(argv)
    from bench.__main__ import machine, markdown

    if args.backend == "real":
        from bench import recovery_real

        started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        runs = recovery_real.run(
            tuple(args.settings.split(",")),
            failures=tuple(args.failure.split(",")),
            alertmanager=tuple(args.alertmanager.split(",")),
            runs=args.runs,
            simulator=args.simulator,
            nodes=args.nodes,
        )
        ended = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        command = (
            f"python -m bench.recovery --backend real --settings {args.settings} --failure "
            f"{args.failure} --alertmanager {args.alertmanager} --runs {args.runs}"
            + ("" if args.nodes == "kwok" else f" --nodes {args.nodes}")
            + ("" if args.simulator else " --no-simulator")
        )
        print()
        print(f"{command}  ({started} - {ended})")
        print()
        print(markdown(recovery_real.rows(runs)))
        print()
        print(recovery_real.breakdown(runs))
        print(machine())
        return 0
    table = markdown(run(args.factor, tuple(args.cases.split(","))))
    print()
    print(f"delays: {describe(shipped_delays(), args.factor)}")
    print()
    print(table)
    print()
    print(machine())
    return 0


if __name__ == "__main__":
    sys.exit(main())
