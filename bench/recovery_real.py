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

Each setting meets two failures: ``hung`` (the kubelet stops, the BMC still reads On: a hang,
a panic, a partition) and ``off`` (the machine loses power: the benchmark's own ForceOff to the
node's BMC, which stops its kwok and leaves the BMC reading Off), each with Alertmanager
``reachable`` (Prometheus fires the trigger alert, Alertmanager delivers it) or
``unreachable`` (no Prometheus or Alertmanager; nodefence's ``NODEFENCE_ALERTMANAGER_URL``
names a closed port, no alert is ever delivered, and the Node watch or the fallback decides).

With ``nodes`` "real" the node that dies is ``real01`` of ``simulate --real-nodes 2``, a real
kubelet with containerd and runc whose ForceOff kills every container, running the benchmark's
own StatefulSet (no volume), whose pod must run again, ready, on ``real02``; the simulator, which
has no real kubelet, does not run beside it.

Each runs beside the simulator with the same settings, in the same invocation, so the ratio
is against a baseline measured under the same load. The dead node's waits are then listed one
by one (:func:`waits`), from what the run saw: who set the fence off (a delivery, the
receiver's Node watch or a wake-up, a reconcile pass) and what the BMC read. Needs the control
plane's binary (``make controlplane``, or ``NODEFENCE_CONTROLPLANE``);
``python -m bench.recovery --backend real`` runs it.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from bench.common import Row, median
from bench.recovery import (
    POLICY,
    Case,
    Delays,
    Measured,
    case_policy,
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
FAILURES = ("hung", "off")
ALERTMANAGER = ("reachable", "unreachable")
NODES = ("kwok", "real")
KUBELETS = {"kwok": "", "real": ", real kubelets (real01 -> real02, no volume)"}
# The goal at the shipped defaults: a machine that lost power, its StatefulSet pods Running
# elsewhere within 90 s of the death (median of the runs); a hung one within the controller's
# grace period, the NotReady minimum and 30 s.
OFF_TARGET_SECONDS = 90.0
HUNG_SLACK_SECONDS = 30.0


@dataclass(frozen=True)
class Setting:
    case: Case
    delays: Delays


MACHINE = {"hung": "machine hung (BMC reads On)", "off": "machine lost power (BMC reads Off)"}


def settings(
    failure: str = "hung", alertmanager: str = "reachable", nodes: str = "kwok"
) -> tuple[Setting, ...]:
    """Both settings for one failure, one Alertmanager and one kind of node, derived from the
    shipped files so that a change there moves the figures; a Case fences on the first delivery
    exactly when its waits are over by then."""
    if failure not in FAILURES or alertmanager not in ALERTMANAGER or nodes not in NODES:
        raise ValueError(f"failure {failure!r}, Alertmanager {alertmanager!r}, nodes {nodes!r}")
    shipped = replace(shipped_delays(), node_monitor_grace=parse_duration(DEFAULT_GRACE))
    fastest = replace(
        shipped,
        node_monitor_grace=FASTEST_GRACE_SECONDS,
        rule_for=0.0,
        min_not_ready=0.0,
        lease_staleness=FASTEST_GRACE_SECONDS,
    )
    how = f", {MACHINE[failure]}, Alertmanager {alertmanager}{KUBELETS[nodes]}"
    reachable = alertmanager == "reachable"

    def case(key: str, title: str, first_delivery_fences: bool) -> Case:
        return Case(
            key,
            title + how,
            None,
            first_delivery_fences,
            cluster=FRESH_CLUSTER,
            failure=failure,
            alertmanager=reachable,
            passes="receiver",
            nodes=nodes,
        )

    return (
        Setting(case("shipped", "shipped defaults", False), shipped),
        Setting(case("fastest", "fastest safe settings", True), fastest),
    )


def variant(case: Case) -> tuple[str, str, bool]:
    return case.key, case.failure, case.alertmanager


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


def off_ends_wait(case: Case, delays: Delays) -> bool:
    """Whether the run's policy lets a reading of Off end the NotReady minimum and the
    fallback's wait (``power_off_ends_wait``; False where nodefence has no such setting)."""
    rule = parse_policy(case_policy(case, delays)).rules[0]
    return bool(getattr(rule, "power_off_ends_wait", False))


def fallback_after(case: Case, delays: Delays) -> float:
    return float(parse_policy(case_policy(case, delays)).cluster.fallback_after_seconds)


def policy_wait(run: Measured) -> str:
    """The wait the policy holds a NotReady node for in this run, in words."""
    d, case = run.delays, run.case
    lease = f"Lease window {d.lease_staleness:g} s from the last renewal"
    if case.failure == "off" and off_ends_wait(case, d):
        return f"no NotReady minimum (the BMC reads Off), {lease}"
    waits = [f"min NotReady {d.min_not_ready:g} s"]
    if not case.alertmanager:
        waits.append(f"no alert: fallback after {fallback_after(case, d):g} s NotReady")
    return ", ".join([*waits, lease])


def the_wait_over(run: Measured) -> float | None:
    """When the policy's wait was over in this run (wall clock), or None where the BMC's
    reading of Off ends it."""
    d, case = run.delays, run.case
    if run.not_ready is None or (case.failure == "off" and off_ends_wait(case, d)):
        return None
    longest = d.min_not_ready
    if not case.alertmanager:
        longest = max(longest, fallback_after(case, d))
    return max(run.not_ready + longest, run.last_renewal + d.lease_staleness)


def _trigger_wait(run: Measured) -> Wait:
    """NotReady to what set the fence off, when that was not a delivery: the reconcile pass's
    slot, or the receiver's own decision (its Node watch or a wake-up at the wait's end)."""
    d = run.delays
    by = run.fenced_by or "nobody"
    if run.case.passes == "receiver":
        how = (
            "then the receiver: its Node watch or a wake-up at the wait's end at once, else "
            f"its next pass (every {d.reconcile_period:g} s, jittered)"
        )
    else:
        how = f"then ≤ {d.reconcile_period:g} s to the next reconcile slot"
    over = the_wait_over(run)
    detail = by
    if run.decided is not None and run.trigger is None:
        detail += f", decided {_s(_gap(run.decided, run.not_ready))} after NotReady (± 1 s)"
    if over is not None and run.trigger is not None:
        detail += f", {_s(run.trigger - over)} after the wait"
    elif over is not None and run.power_off is not None:
        detail += f", Off {_s(run.power_off - over)} after the wait"
    if run.power_read is not None:
        detail += (
            f"; BMC read {run.power_read_state} {_s(_gap(run.power_read, run.not_ready))} "
            "after NotReady"
        )
    return Wait(
        "NotReady -> fence triggered",
        f"{policy_wait(run)}; {how}",
        _gap(run.trigger, run.not_ready),
        detail=detail,
    )


def waits(run: Measured) -> list[Wait]:
    """The intervals from the kubelet's last Lease renewal to the replacements Running, each
    with the configured wait it contains; the on-path ones add up to the whole. Which ones are
    on the path follows from who set the fence off in this run."""
    d = run.delays
    # A ``for`` starts at one evaluation and fires at a later one; without it the first fires.
    evaluations = 2 if d.rule_for else 1
    bound = d.scrape_interval + evaluations * d.evaluation_interval
    alignment = f"scrape/evaluation alignment ≤ {bound:g} s"
    by_webhook = run.fenced_by == "webhook"
    out = [
        Wait(
            "last Lease renewal -> node NotReady",
            f"grace {d.node_monitor_grace:g} s + ≤ {NODE_MONITOR_PERIOD_SECONDS:g} s "
            "controller period",
            _gap(run.not_ready, run.last_renewal),
        )
    ]
    if run.case.alertmanager:
        out.append(
            Wait(
                "NotReady -> trigger alert fires",
                f"for {d.rule_for:g} s + {alignment}",
                _gap(run.firing, run.not_ready),
                on_path=by_webhook,
                # The run ends when the pods run elsewhere, which may come first.
                detail="" if run.firing is not None else "not fired by then",
            )
        )
        if by_webhook:
            out.append(
                Wait(
                    "fires -> the delivery that fenced",
                    f"group_wait {d.group_wait:g} s",
                    _gap(run.trigger, run.firing),
                )
            )
        elif run.firing is not None:
            out.append(
                Wait(
                    "fires -> first delivery",
                    f"group_wait {d.group_wait:g} s",
                    _gap(run.first_delivery, run.firing),
                    on_path=False,
                    detail=run.first_delivery_verdict or "not seen",
                )
            )
    deleted = f"{run.pods_deleted} of {len(run.pods)} deleted by nodefence"
    power = f"ForceOff, then read back within {bmc_timeout():g} s"
    if not by_webhook and run.trigger is None:
        # The receiver decided on its own and the log does not date what set it off: one wait
        # from NotReady to the Off, so that the path still adds up.
        off = _trigger_wait(run)
        out.append(
            replace(
                off,
                what="NotReady -> fence triggered -> BMC reads back Off",
                configured=f"{off.configured}; {power}",
                seconds=_gap(run.power_off, run.not_ready),
            )
        )
    else:
        if not by_webhook:
            out.append(_trigger_wait(run))
        out.append(Wait("trigger -> BMC reads back Off", power, _gap(run.power_off, run.trigger)))
    out += [
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


def target(case: Case, delays: Delays) -> float | None:
    """The goal for a run at the shipped defaults (none for the fastest settings)."""
    if case.key != "shipped":
        return None
    if case.failure == "off":
        return OFF_TARGET_SECONDS
    return delays.node_monitor_grace + delays.min_not_ready + HUNG_SLACK_SECONDS


def _median(values: Sequence[float | None]) -> float | None:
    seen = [v for v in values if v is not None]
    return median(seen) if seen and len(seen) == len(values) else None


def _groups(runs: Sequence[Measured]) -> list[tuple[Measured, list[Measured], list[Measured]]]:
    """The runs of each variant, in the order run: (the first, the real ones, the simulator's)."""
    out: dict[tuple[str, str, bool], tuple[Measured, list[Measured], list[Measured]]] = {}
    for one in runs:
        _, real, sim = out.setdefault(variant(one.case), (one, [], []))
        (real if one.backend == "real" else sim).append(one)
    return [group for group in out.values() if group[1]]


def rows(runs: Sequence[Measured]) -> list[Row]:
    """One row per real run, and the median where a variant ran more than once, the
    simulator's figure (its median) as the baseline."""
    out = []
    for first, real, sim in _groups(runs):
        base = _median([total(r) for r in sim]) if sim else None
        goal = target(first.case, first.delays)
        for number, one in enumerate(real, start=1):
            value = total(one)
            path = " + ".join(
                f"{abs(w.seconds):.0f}" if round(w.seconds) == 0 else f"{w.seconds:.0f}"
                for w in waits(one)
                if w.on_path and w.seconds is not None
            )
            out.append(
                Row(
                    f"real control plane, {first.case.title}: node death -> StatefulSet pods "
                    f"Running elsewhere (run {number})",
                    _s(value),
                    "" if not sim else f"{_s(base)} (simulator, same settings)",
                    "" if value is None or not base else f"{value / base:.2f}x the simulator",
                    "" if goal is None else f"≤ {goal:g} s",
                    ""
                    if goal is None or len(real) > 1
                    else ("yes" if value is not None and value <= goal else "NO"),
                    f"{len(one.pods)} pods ({', '.join(one.pods)}); fenced by "
                    f"{one.fenced_by or 'nobody'}; from the last renewal "
                    f"({_s(one.death - one.last_renewal)} before the death): {path} s; the "
                    f"benchmark's sightings up to {one.resolution:.1f} s late",
                )
            )
        if len(real) > 1:
            value = _median([total(r) for r in real])
            out.append(
                Row(
                    f"real control plane, {first.case.title}: median of {len(real)} runs",
                    _s(value),
                    "" if not sim else f"{_s(base)} (simulator, same settings)",
                    "" if value is None or not base else f"{value / base:.2f}x the simulator",
                    "" if goal is None else f"≤ {goal:g} s",
                    ""
                    if goal is None
                    else ("yes" if value is not None and value <= goal else "NO"),
                    ", ".join(_s(total(r)) for r in real),
                )
            )
    return out


def breakdown(runs: Sequence[Measured]) -> str:
    """The waits of each variant as a Markdown table: a column per real run, then the
    simulator's; a wait one run did not have is left blank there."""
    lines = []
    for first, real, sim in _groups(runs):
        columns = [
            (f"real, run {n}" if len(real) > 1 else "real", r) for n, r in enumerate(real, 1)
        ]
        columns += [
            (f"simulator, run {n}" if len(sim) > 1 else "simulator", r)
            for n, r in enumerate(sim, 1)
        ]
        table: dict[str, tuple[Wait, dict[int, Wait]]] = {}
        for index, (_, one) in enumerate(columns):
            for wait in waits(one):
                table.setdefault(wait.what, (wait, {}))[1][index] = wait
        lines += [
            f"{first.case.title}:",
            "",
            "| wait | configured | " + " | ".join(name for name, _ in columns) + " |",
            "|---|---|" + "---|" * len(columns),
        ]
        for ours, cells in table.values():
            what = ours.what if ours.on_path else f"({ours.what}, not on the path)"
            values = [_cell(cells[i]) if i in cells else "" for i in range(len(columns))]
            lines.append(f"| {what} | {ours.configured} | " + " | ".join(values) + " |")
        lines.append("")
    return "\n".join(lines)


def run(
    keys: Sequence[str] = ("shipped", "fastest"),
    *,
    failures: Sequence[str] = ("hung",),
    alertmanager: Sequence[str] = ("reachable",),
    runs: int = 1,
    simulator: bool = True,
    nodes: str = "kwok",
) -> list[Measured]:
    """Each chosen setting, failure and Alertmanager, ``runs`` times on the real control plane,
    each followed by the simulator (not with real kubelets, which it has none of); one backend
    at a time."""
    out = []
    backends = BACKENDS if simulator and nodes == "kwok" else ("real",)
    for failure in failures:
        for reachable in alertmanager:
            for setting in settings(failure, reachable, nodes):
                if setting.case.key not in keys:
                    continue
                for number in range(1, runs + 1):
                    for backend in backends:
                        stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
                        print(
                            f"{stamp} time to recovery: {setting.case.title} on {backend}, "
                            f"run {number} of {runs}",
                            flush=True,
                        )
                        prefix = f"nodefence-recovery-{backend}-"
                        with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
                            out.append(
                                measure(setting.case, setting.delays, 1.0, Path(tmp), backend)
                            )
    return out
