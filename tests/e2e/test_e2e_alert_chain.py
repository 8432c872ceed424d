"""The whole chain with the real binaries: kube-state-metrics series from the simulated cluster,
scraped by Prometheus, evaluated with the shipped rules, routed by Alertmanager with the shipped
receiver to ``nodefence serve``, which fences and later unfences the node through the simulated
Kubernetes API."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from functools import partial
from typing import Any

import pytest
from bench.processes import Processes, eventually

from .harness import (
    OOS,
    Alertmanager,
    Prometheus,
    Simulator,
    start_alertmanager,
    start_nodefence,
    start_prometheus,
    start_simulator,
    write_token_file,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

NODE = "control02"
NODE_PATH = f"/api/v1/nodes/{NODE}"
NODE_ALERTS = {"KubeNodeNotReady", "KubeNodeUnreachable", "NodefenceNodeNotReady"}
TAINT = {"key": OOS, "value": "nodeshutdown", "effect": "NoExecute"}
# Prometheus' 1 s scrape and evaluation, the 2 s ``for:`` and Alertmanager's 1 s group_wait add
# up to a few seconds; the rest is headroom for a loaded CI machine.
WITHIN = 45.0


@dataclass
class Chain:
    sim: Simulator
    managers: list[Alertmanager]
    prometheus: Prometheus


@dataclass
class Outage:
    """Request-log cursors around one outage of the node: before it went down, before it came
    back, and once the taint was gone."""

    before_down: int
    before_up: int
    after_unfence: int


def start_chain(procs: Processes, alertmanagers: int) -> Chain:
    sim = start_simulator(procs)
    token = secrets.token_urlsafe(24)
    # The chain alone drives the fence: no pass or watch of the receiver's own judges the node
    # before the alert comes (the simulator's outage is already past the fallback's window).
    nodefence = start_nodefence(procs, sim, token, env={"NODEFENCE_RECONCILE_INTERVAL": "0"})
    token_file = write_token_file(procs.workdir, token)
    managers = [
        start_alertmanager(procs, f"alertmanager-{i}", nodefence, token_file)
        for i in range(alertmanagers)
    ]
    prometheus = start_prometheus(procs, sim, nodefence, [am.url for am in managers])
    return Chain(sim, managers, prometheus)


def node_writes(sim: Simulator, since: int, until: int) -> list[dict[str, Any]]:
    """Successful writes (PUT with uid and resourceVersion) of the node between two cursors.
    Only nodefence and this test talk
    to the simulated API over HTTP (the simulator's controllers and its ``/sim`` control
    surface are not logged), and this test only reads, so these writes are nodefence's."""
    return [
        r
        for r in sim.requests(since)
        if r["seq"] <= until
        and r["method"] == "PUT"
        and r["path"] == NODE_PATH
        and 200 <= r["status"] < 300
    ]


def delivered(manager: Alertmanager, at_least: int) -> int | None:
    """The webhook notifications sent, once at least ``at_least`` went out; none may fail,
    which also proves the bearer token from ``credentials_file`` was accepted."""
    sent, failed = manager.webhook_counts()
    assert failed == 0, f"{manager.url}: {failed} webhook notifications to nodefence failed"
    return sent if sent >= at_least else None


def alerts_on_node(prometheus: Prometheus) -> list[dict[str, Any]]:
    return [a for a in prometheus.alerts() if a["labels"].get("node") == NODE]


def outage(chain: Chain) -> Outage:
    """control02 dies and comes back; checks what each step must show on the way."""
    sim, managers, prometheus = chain.sim, chain.managers, chain.prometheus
    assert sim.oos_taints(NODE) == []
    assert alerts_on_node(prometheus) == []
    before_down = sim.cursor()

    sim.control(NODE, "down", {"sinceSeconds": 1200})
    eventually(
        lambda: prometheus.firing("KubeNodeNotReady", NODE),
        within=WITHIN,
        what="Prometheus fires KubeNodeNotReady",
    )
    taints = eventually(lambda: sim.oos_taints(NODE), within=WITHIN, what="out-of-service taint")
    assert [{k: t.get(k) for k in TAINT} for t in taints] == [TAINT]
    # Each Alertmanager delivers both node alerts (one group each) before the node comes
    # back, so every duplicate reaches nodefence while the node is still down.
    for manager in managers:
        eventually(partial(delivered, manager, 2), within=WITHIN, what=f"{manager.url} sent")
    eventually(
        lambda: not sim.terminating_on(NODE),
        within=WITHIN,
        what=f"no pod left Terminating on {NODE}",
    )

    node = sim.node(NODE)
    mirror = node["metadata"].get("annotations") or {}
    assert mirror["nodefence.io/fenced-by"] == "nodefence"
    assert mirror["nodefence.io/node-uid"] == node["metadata"]["uid"]
    assert mirror["nodefence.io/taint-effect"] == "NoExecute"
    assert mirror["nodefence.io/alertname"] in NODE_ALERTS
    assert mirror["nodefence.io/fenced-at"]
    # The fingerprint in the mirror annotations is one that Alertmanager computed for an alert it
    # delivered: the fence came through the chain.
    fingerprints = {
        a["fingerprint"]
        for m in managers
        for a in m.alerts()
        if a["labels"].get("node") == NODE and a["labels"]["alertname"] in NODE_ALERTS
    }
    assert mirror["nodefence.io/alert-fingerprint"] in fingerprints

    before_up = sim.cursor()
    sent_before_up = [m.webhook_counts()[0] for m in managers]
    sim.control(NODE, "up", {"sinceSeconds": 600, "reboot": True})
    eventually(
        lambda: not alerts_on_node(prometheus),
        within=WITHIN,
        what="Prometheus resolves the node alerts",
    )
    # Each Alertmanager sends the resolved notification of both groups.
    for manager, sent in zip(managers, sent_before_up, strict=True):
        eventually(
            partial(delivered, manager, sent + 2),
            within=WITHIN,
            what=f"{manager.url} sent the resolved notifications",
        )
    eventually(lambda: not sim.oos_taints(NODE), within=WITHIN, what="taint removed")
    # The Event is the report of the unfence, written after it: wait for it rather than race it.
    eventually(
        lambda: "NodeUnfenced" in [e["reason"] for e in sim.nodefence_events(NODE)],
        within=WITHIN,
        what="the NodeUnfenced Event",
    )
    mirror = sim.node(NODE)["metadata"].get("annotations") or {}
    assert "nodefence.io/fenced-by" not in mirror
    assert mirror["nodefence.io/unfenced-at"]
    # Both alerts of the outage reach nodefence at the same moment, from every Alertmanager:
    # a write that lost the race must be re-decided, not reported as a failed action.
    reasons = [e["reason"] for e in sim.nodefence_events(NODE)]
    assert "NodefenceActionFailed" not in reasons, reasons
    return Outage(before_down, before_up, sim.cursor())


def test_prometheus_and_alertmanager_drive_fence_and_unfence(procs: Processes) -> None:
    chain = start_chain(procs, alertmanagers=1)

    seen = outage(chain)

    assert len(node_writes(chain.sim, seen.before_down, seen.before_up)) == 1
    assert len(node_writes(chain.sim, seen.before_up, seen.after_unfence)) == 1


def test_partitioned_alertmanager_pair_fences_once(procs: Processes) -> None:
    """Two Alertmanagers that do not gossip (an HA pair during a partition) both deliver every
    notification; nodefence must still fence and unfence exactly once."""
    chain = start_chain(procs, alertmanagers=2)

    seen = outage(chain)

    assert len(node_writes(chain.sim, seen.before_down, seen.before_up)) == 1
    assert len(node_writes(chain.sim, seen.before_up, seen.after_unfence)) == 1
    reasons = [e["reason"] for e in chain.sim.nodefence_events(NODE)]
    assert reasons.count("NodeFenced") == 1, reasons
    assert reasons.count("NodeUnfenced") == 1, reasons
