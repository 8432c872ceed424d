"""Time to recovery on real controllers: ``bench.recovery``'s chain (Prometheus, Alertmanager,
``nodefence serve``, the reconcile CronJob, Redfish power-off proof) against the real
kube-apiserver, kube-controller-manager and kube-scheduler with kwok kubelets
(``nodefence simulate --backend real``), nothing scaled, in two settings:

- ``shipped``: ``deploy/base/policy.yaml`` (Redfish ``action: off``, 300 s NotReady, 120 s
  Lease), the shipped rules and route, Kubernetes' own 50 s node-monitor-grace-period;
- ``fastest``: the shortest waits the safety windows allow: a grace period of two kubelet Lease
  renewals, the Lease window no shorter than that grace (nodefence never calls a Lease stale
  before Kubernetes does), no NotReady minimum (the BMC's read-back of Off is the proof, not the
  wait) and the trigger's ``for`` at 0 s; the monitoring stack keeps kube-prometheus' 30 s.

Each runs beside the simulator with the same settings, in the same invocation, so the ratio
is against a baseline measured under the same load. The dead node's waits are then listed one
by one (:func:`waits`). Needs the control plane's binary (``make controlplane``, or
``NODEFENCE_CONTROLPLANE``); ``python -m bench.recovery --backend real`` runs it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from bench.common import Row
from bench.recovery import (
    INSTALL_TARGET_SECONDS,
    POLICY,
    Case,
    Delays,
    Measured,
    measure,
    parse_duration,
    shipped_delays,
)
from nodefence.policy import parse_policy
from nodefence_sim.real.components import NODE_LEASE_SECONDS
from nodefence_sim.real.server import DEFAULT_GRACE

# kwok renews its Lease every quarter of the duration, as a kubelet does.
LEASE_RENEW_SECONDS = NODE_LEASE_SECONDS / 4
# Two renewals: a single late renewal does not mark a live node Unknown.
FASTEST_GRACE_SECONDS = 2 * LEASE_RENEW_SECONDS
# The node-lifecycle controller checks the nodes every 5 s (--node-monitor-period).
NODE_MONITOR_PERIOD_SECONDS = 5.0
# The cluster is minutes old: every node became Ready at its start, which the storm guard
# would read as a storm that just ended.
FRESH_CLUSTER = {"storm_cooldown_seconds": 0}
BACKENDS = ("real", "sim")


@dataclass(frozen=True)
class Setting:
    case: Case
    delays: Delays


def settings() -> tuple[Setting, ...]:
    """Both settings, derived from the shipped files so that a change there moves the figures;
    a Case fences on the first delivery exactly when its waits are over by then."""
    shipped = replace(shipped_delays(), node_monitor_grace=parse_duration(DEFAULT_GRACE))
    fastest = replace(
        shipped,
        node_monitor_grace=FASTEST_GRACE_SECONDS,
        rule_for=0.0,
        min_not_ready=0.0,
        lease_staleness=FASTEST_GRACE_SECONDS,
    )
    return (
        Setting(
            Case("shipped", "shipped defaults", None, False, cluster=FRESH_CLUSTER),
            shipped,
        ),
        Setting(
            Case("fastest", "fastest safe settings", None, True, cluster=FRESH_CLUSTER), fastest
        ),
    )


@dataclass(frozen=True)
class Wait:
    what: str
    configured: str
    seconds: float | None
    # False: measured beside the path, not on it (a delivery that was refused).
    on_path: bool = True
    # What this run saw there, beside the figure (who fenced, who deleted the pods).
    detail: str = ""


def bmc_timeout() -> float:
    """How long the shipped rule lets the BMC take to report Off."""
    rule = parse_policy(yaml.safe_load(POLICY.read_text(encoding="utf-8"))).rules[0]
    assert rule.fencing is not None, "the shipped rule fences through a BMC"
    return rule.fencing.timeout_seconds


def _gap(later: float | None, earlier: float | None) -> float | None:
    return None if later is None or earlier is None else later - earlier


def waits(run: Measured) -> list[Wait]:
    """The intervals from the kubelet's last Lease renewal to the replacements Running, each
    with the configured wait it contains; the on-path ones add up to the whole."""
    d = run.delays
    # A ``for`` starts at one evaluation and fires at a later one; without it the first fires.
    evaluations = 2 if d.rule_for else 1
    bound = d.scrape_interval + evaluations * d.evaluation_interval
    alignment = f"scrape/evaluation alignment ≤ {bound:g} s"
    out = [
        Wait(
            "last Lease renewal -> node Unknown",
            f"grace {d.node_monitor_grace:g} s + ≤ {NODE_MONITOR_PERIOD_SECONDS:g} s "
            "controller period",
            _gap(run.not_ready, run.last_renewal),
        ),
        Wait(
            "Unknown -> trigger alert fires",
            f"for {d.rule_for:g} s + {alignment}",
            _gap(run.firing, run.not_ready),
            on_path=run.case.first_delivery_fences,
        ),
    ]
    if run.case.first_delivery_fences:
        out.append(
            Wait(
                "fires -> the delivery that fenced",
                f"group_wait {d.group_wait:g} s",
                _gap(run.trigger, run.firing),
            )
        )
    else:
        allowed = None if run.not_ready is None else run.not_ready + d.min_not_ready
        slot = _gap(run.trigger, allowed)
        out += [
            Wait(
                "fires -> first delivery",
                f"group_wait {d.group_wait:g} s",
                _gap(run.first_delivery, run.firing),
                on_path=False,
                detail=run.first_delivery_verdict or "not seen",
            ),
            Wait(
                "Unknown -> fence triggered",
                f"min NotReady {d.min_not_ready:g} s + ≤ {d.reconcile_period:g} s to the next "
                "reconcile slot",
                _gap(run.trigger, run.not_ready),
                detail=f"{run.fenced_by or 'nobody'}, {_s(slot)} after the minimum",
            ),
        ]
    deleted = f"{run.pods_deleted} of {len(run.pods)} deleted by nodefence"
    out += [
        Wait(
            "trigger -> BMC reads back Off",
            f"ForceOff, then read back within {bmc_timeout():g} s",
            _gap(run.power_off, run.trigger),
        ),
        Wait("Off -> out-of-service taint", "", _gap(run.taint, run.power_off)),
        Wait("taint -> old pods gone", "", _gap(run.pods_gone, run.taint), detail=deleted),
        Wait(
            "-> replacements Running elsewhere",
            "StatefulSet controller, scheduler, kubelet",
            _gap(run.pods_running, run.pods_gone),
        ),
    ]
    return out


def _s(value: float | None) -> str:
    return "not seen" if value is None else f"{value:.1f} s"


def _cell(wait: Wait) -> str:
    return _s(wait.seconds) + (f" ({wait.detail})" if wait.detail else "")


def total(run: Measured) -> float | None:
    return _gap(run.pods_running, run.death)


def rows(runs: Sequence[Measured]) -> list[Row]:
    """One row per setting: the real control plane, against the simulator as the baseline."""
    out = []
    for setting in settings():
        by_backend = {r.backend: r for r in runs if r.case.key == setting.case.key}
        real, sim = by_backend.get("real"), by_backend.get("sim")
        if real is None:
            continue
        value, base = total(real), None if sim is None else total(sim)
        ratio = "" if value is None or not base else f"{value / base:.2f}x the simulator"
        shipped = setting.case.key == "shipped"
        path = " + ".join(
            f"{w.seconds:.0f}" for w in waits(real) if w.on_path and w.seconds is not None
        )
        out.append(
            Row(
                f"real control plane, {setting.case.title}: node death -> StatefulSet pods "
                "Running elsewhere",
                _s(value),
                f"{_s(base)} (simulator, same settings)",
                ratio,
                f"< {INSTALL_TARGET_SECONDS / 60:g} min" if shipped else "",
                ("yes" if value is not None and value < INSTALL_TARGET_SECONDS else "NO")
                if shipped
                else "",
                f"{len(real.pods)} pods ({', '.join(real.pods)}); fenced by "
                f"{real.fenced_by or 'nobody'}; from the last renewal "
                f"({_s(real.death - real.last_renewal)} before the death): {path} s",
            )
        )
    return out


def breakdown(runs: Sequence[Measured]) -> str:
    """The waits of each setting as a Markdown table, the real control plane beside the
    simulator."""
    lines = []
    for setting in settings():
        by_backend = {r.backend: r for r in runs if r.case.key == setting.case.key}
        if "real" not in by_backend:
            continue
        real = waits(by_backend["real"])
        sim = waits(by_backend["sim"]) if "sim" in by_backend else [None] * len(real)
        lines += [
            f"{setting.case.title}:",
            "",
            "| wait | configured | real | simulator |",
            "|---|---|---|---|",
        ]
        for ours, theirs in zip(real, sim, strict=False):
            what = ours.what if ours.on_path else f"({ours.what}, not on the path)"
            other = "" if theirs is None else _cell(theirs)
            lines.append(f"| {what} | {ours.configured} | {_cell(ours)} | {other} |")
        lines.append("")
    return "\n".join(lines)


def run(keys: Sequence[str] = ("shipped", "fastest"), *, simulator: bool = True) -> list[Measured]:
    """Each chosen setting on the real control plane, then on the simulator."""
    out = []
    for setting in settings():
        if setting.case.key not in keys:
            continue
        for backend in BACKENDS if simulator else ("real",):
            print(f"time to recovery: {setting.case.title} on {backend}", flush=True)
            with tempfile.TemporaryDirectory(prefix=f"nodefence-recovery-{backend}-") as tmp:
                out.append(measure(setting.case, setting.delays, 1.0, Path(tmp), backend))
    return out
