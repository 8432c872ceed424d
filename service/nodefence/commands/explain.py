"""``nodefence explain NODE``: the decision a firing node alert for NODE would get now.

It answers "why was it not fenced?" (or "what would happen if the alert fired?") without a
hand-written webhook payload: the alert is built the way Alertmanager would send it, turned into
an event by the webhook path's own code (``alerts.events``), and judged by the fencer on live
facts, read as for a real delivery. The fencer runs with dry-run semantics (S8): it reads and
decides, and writes nothing, sends no power action and posts no approval request. Where
Alertmanager is configured and holds the alert firing, its real labels are used.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

from nodefence.alertmanager.client import AlertmanagerUnavailableError, active_alerts
from nodefence.alerts.events import extract_events
from nodefence.alerts.webhook import WebhookPayload
from nodefence.commands.failures import CommandRefusedError
from nodefence.engine.guard_kinds import kind, words
from nodefence.engine.model import AlertEvent, AlertStatus, Decision, Reason, Verdict
from nodefence.engine.printable import printable_lines
from nodefence.engine.render import decision_to_dict, describe_lines
from nodefence.engine.wording import instant
from nodefence.kube.client import Deadline
from nodefence.policy import Policy
from nodefence.settings import Settings
from nodefence.shell.fencer import Fencer

DEFAULT_ALERT = "KubeNodeNotReady"
# The labels kube-prometheus's KubeNodeNotReady carries besides the node (kube-state-metrics'
# series labels and the rule's severity), so rules that match on them match here too.
NOT_READY_LABELS = {
    "condition": "Ready",
    "job": "kube-state-metrics",
    "severity": "warning",
    "status": "true",
}

WOULD = {
    Verdict.FENCE: "would fence it",
    Verdict.PURGE: "would purge pods left on it (it is fenced already)",
    Verdict.UNFENCE: "would unfence it",
    Verdict.AWAIT_APPROVAL: "would ask for approval in Slack",
    Verdict.DEFERRED: "would defer",
    Verdict.NOOP: "would not fence it",
    Verdict.SKIP: "would not fence it",
}
HELD = "has fenced it already"


def blocking(decision: Decision) -> Reason | None:
    """The guard that decides: the first that blocked."""
    return next((r for r in decision.reasons if not r.passed), None)


def outcome(decision: Decision, held: bool) -> str:
    """What nodefence would do, in words, and the one guard that decides it. ``held``: its
    fence record holds the node, where "would not fence it" would read as a refusal of a node
    that is fenced. A fence that a guard still holds back (a dry run's BMC read that gave no
    proof) is a fence that would not happen now, and is said so."""
    deciding = blocking(decision)
    if not held:
        if deciding is None:
            return WOULD[decision.verdict]
        if decision.verdict in (Verdict.FENCE, Verdict.NOOP, Verdict.SKIP):
            return f"would not fence it now: {words(deciding.guard)}"
        return f"{WOULD[decision.verdict]}: {words(deciding.guard)}"
    if decision.verdict is Verdict.PURGE:
        return f"{HELD} and would purge the pods left on it"
    if decision.verdict in (Verdict.NOOP, Verdict.SKIP):
        if any(not r.passed for r in decision.reasons):
            return f"{HELD}; it would do nothing more now (see the guards)"
        return f"{HELD}; nothing is left to do"
    return f"{HELD} and {WOULD[decision.verdict]}"


@dataclasses.dataclass(frozen=True)
class Alert:
    """The alert explained and where its labels came from."""

    event: AlertEvent
    source: str


def synthesized_alert(
    policy: Policy, node: str, alertname: str, extra: dict[str, str], why: str
) -> Alert:
    """The firing alert as Alertmanager would deliver it, through the webhook path's parser and
    event extraction (same node resolution, same fingerprint). ``why`` says why it was built
    rather than taken from Alertmanager."""
    labels = {"alertname": alertname, policy.alerts.node_labels[0]: node}
    if alertname in (DEFAULT_ALERT, "NodefenceNodeNotReady"):
        labels = {**NOT_READY_LABELS, **labels}
    labels.update(extra)
    payload = WebhookPayload.model_validate(
        {
            "version": "4",
            "status": "firing",
            "receiver": "nodefence-explain",
            "alerts": [
                {
                    "status": "firing",
                    "labels": labels,
                    "startsAt": instant(datetime.now(UTC)),
                }
            ],
        }
    )
    events = extract_events(
        payload, alert_names=policy.alerts.names, node_labels=policy.alerts.node_labels
    )
    return Alert(events[0], f"built by nodefence explain ({why})")


async def firing_alert(
    settings: Settings, policy: Policy, node: str, alertname: str
) -> tuple[Alert | None, str]:
    """The alert as Alertmanager holds it now, when it is configured and the alert fires;
    otherwise None and why not."""
    config = settings.alertmanager
    if config is None:
        return None, "no Alertmanager is configured: NODEFENCE_ALERTMANAGER_URL is unset"
    try:
        events = await active_alerts(config, [alertname], policy.alerts.node_labels)
    except AlertmanagerUnavailableError as exc:
        return None, f"Alertmanager could not be asked: {exc}"
    for event in events:
        if event.node == node and event.status is AlertStatus.FIRING:
            return Alert(event, f"firing in Alertmanager ({config.url})"), ""
    return None, f"Alertmanager at {config.url} holds no such alert firing for {node}"


def _explained(decision: Decision, configured_dry_run: bool) -> Decision:
    """The decision as the configured policy would take it: the dry-run this command forces is
    how it reads without writing, not part of the answer (unless the policy is dry-run too)."""
    if configured_dry_run:
        return decision
    reasons = tuple(r for r in decision.reasons if not kind(r.guard).run_note)
    return dataclasses.replace(decision, reasons=reasons, dry_run=False)


@dataclasses.dataclass(frozen=True)
class Explanation:
    decision: Decision
    # What ``-o json`` prints.
    report: dict[str, Any]


async def explain(fencer: Fencer, alert: Alert, *, configured_dry_run: bool) -> Explanation:
    """The decision for ``alert`` now; the fencer must be built on a dry-run policy (the
    caller's job, checked here, so this cannot write by mistake)."""
    if not fencer.policy.dry_run:
        raise CommandRefusedError("explain runs only on a dry-run policy (it must not write)")
    decisions = await fencer.handle_events([alert.event])
    record = await fencer.read_record(Deadline(fencer.options.deadline_seconds))
    held = alert.event.node is not None and record.entry(alert.event.node) is not None
    decision = _explained(decisions[0], configured_dry_run)
    if any(kind(r.guard).no_node and not r.passed for r in decision.reasons):
        raise CommandRefusedError(f"node {alert.event.node} does not exist in the cluster")
    blocked = [r.guard for r in decision.reasons if not r.passed]
    event = alert.event
    report = {
        "node": event.node,
        "alert": {
            "alertname": event.alertname,
            "labels": dict(sorted(event.labels.items())),
            "fingerprint": event.fingerprint,
            "source": alert.source,
        },
        "outcome": outcome(decision, held),
        "fencedByNodefence": held,
        "heldBackBy": blocked,
        "earliest": instant(decision.not_before) if decision.not_before is not None else None,
        "policyDryRun": configured_dry_run,
        "wrote": "nothing: explain only reads",
        "decision": decision_to_dict(decision),
    }
    return Explanation(decision, report)


def as_text(explanation: Explanation) -> str:
    """The explanation for a person. Labels, guard reasons and the node's own words come from
    outside (a node writes its Ready condition's reason): each line is shown escaped, never
    obeyed, and a newline inside a value does not start a line of its own."""
    decision, report = explanation.decision, explanation.report
    alert = report["alert"]
    when = f" at {instant(decision.now)}" if decision.now is not None else ""
    lines = [
        f"A firing {alert['alertname']} alert for node {report['node']}{when}: "
        f"nodefence {report['outcome']}.",
        f"  alert: {alert['source']}; labels "
        + ", ".join(f"{k}={v}" for k, v in alert["labels"].items()),
    ]
    if report["policyDryRun"]:
        lines.append("  the policy is dry-run: even a real alert would only be logged")
    lines.append("")
    lines.extend(describe_lines(decision))
    lines.append("")
    deciding = blocking(decision)
    if deciding is not None:
        lines.append(f"Held back because {words(deciding.guard)}: {deciding.message}")
        if decision.not_before is not None:
            lines.append(f"Earliest it can happen: {instant(decision.not_before)}")
    lines.append("Nothing was written: explain only reads (no power action, no Event).")
    return printable_lines(lines)
