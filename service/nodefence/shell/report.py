"""What nodefence says about what it did, and in which words: the log line, the metrics, the
Event on the Node an operator reads in ``kubectl describe node``, and the notice for people.

Every decision passes through here once, after its actions ran, so the words an operator sees
are chosen in one place.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime
from typing import Protocol

from nodefence.actions.executor import ActionResult, Outcome
from nodefence.engine import escalation, machine
from nodefence.engine.action_kinds import (
    POWER_ON,
    PURGED,
    RECOVERED,
    RELEASED,
    UNFENCED,
    VOLUME_RELEASED,
    Counted,
    Result,
    result_named,
)
from nodefence.engine.evidence import PowerEvidence
from nodefence.engine.guard_kinds import (
    APPROVAL,
    FENCE_RECORD,
    NO_ALERT,
    PROOF_CONTRADICTED,
    REBOOT,
    VERDICT,
    kind,
    warns,
)
from nodefence.engine.model import (
    AlertStatus,
    Decision,
    PowerAction,
    RecordRecoveryAction,
    Verdict,
)
from nodefence.engine.render import describe_action
from nodefence.engine.volumes import headline as volume_headline
from nodefence.engine.volumes import unreleased
from nodefence.kube.client import Deadline
from nodefence.kube.events import EventRecorder
from nodefence.observability.logging import get_logger
from nodefence.observability.metrics import Metrics

# Every decision is one line of it: assembled once, not per line (``observability.logging``).
log = get_logger(__name__)

REFUSAL_REASONS = frozenset(
    {
        "FenceRefused",
        "UnfenceRefused",
        "UnfenceDeferred",
        "FenceAwaitingApproval",
        "FenceEscalated",
        "FenceProofContradicted",
    }
)


class FenceNotifier(Protocol):
    """Tells people (Slack) about fences and unfences that were actually written."""

    async def notify(self, decision: Decision, results: list[ActionResult]) -> None:
        """Best effort: a notification that fails must not fail the action it reports."""


class Reporter:
    def __init__(
        self,
        metrics: Metrics,
        events: EventRecorder,
        clock: Callable[[], datetime],
        notifier: FenceNotifier | None = None,
    ) -> None:
        self.metrics = metrics
        self.events = events
        self.clock = clock
        self.notifier = notifier

    async def report(
        self,
        decision: Decision,
        results: list[ActionResult],
        node_uid: str,
        deadline: Deadline,
        *,
        fenced: bool,
    ) -> Decision:
        """Log, notify, count and put an Event on the Node; the decision comes back with the
        outcome of its actions. ``fenced``: this request's taint write went through."""
        decision = dataclasses.replace(decision, results=tuple(r.as_dict() for r in results))
        self.log_decision(decision, results)
        if self.notifier is not None:
            await self.notifier.notify(decision, results)
        for result in results:
            counts = result_named(result.action).counts
            self.metrics.action_executed(result.action, result.outcome.value)
            if result.outcome is Outcome.DONE and decision.node is not None and counts:
                self._count(counts, decision.node)
        purged = sum(
            1
            for r in results
            if r.outcome is Outcome.DONE and result_named(r.action).counts is Counted.PURGED
        )
        if purged:
            self.metrics.pod_purged(purged)
        if _done(results, RECOVERED):
            # Only the write that recorded the incident counts it: once, whichever replica.
            for action in decision.actions:
                if isinstance(action, RecordRecoveryAction):
                    self.metrics.recovery_measured(action.seconds)
        note = escalation.is_escalation(decision.reasons)
        if note is not None and decision.node is not None and not fenced:
            self.metrics.fencing_escalated(decision.node, *escalation.labels(note))
        if not results and any(kind(r.guard).no_node and not r.passed for r in decision.reasons):
            # No Node to put an Event on: a counter says how many alerts named nodes that do
            # not exist, so a payload of made-up names cannot flood the Events.
            self.metrics.unknown_node_alert(decision.status)
            return decision
        event = node_event(decision, results, purged, fenced=fenced)
        if event is None or decision.node is None:
            return decision
        reason, message, warning = event
        message = machine.event_note(decision, message)
        no_alert = next((r.message for r in decision.reasons if r.guard == NO_ALERT), None)
        if no_alert is not None:
            # Said first, and short, so that the Event keeps its verdict within its length.
            message = f"{no_alert.split('; ', 1)[0][:200]}; {message}"
        refusal = reason in REFUSAL_REASONS
        blocking = next((r.guard for r in decision.reasons if not r.passed), "")
        await self.events.node_event(
            # The guard that blocked, not the path it came by: a resolved alert's deferral and
            # the reconcile pass's a moment later say the same thing.
            dedupe_key=blocking if refusal else None,
            node=decision.node,
            node_uid=node_uid,
            reason=reason,
            message=message,
            warning=warning,
            deadline=deadline,
        )
        return decision

    def _count(self, counts: Counted, node: str) -> None:
        """The node metrics a done write moves (``Result.counts``); the pods purged are
        counted together, once a decision (``Metrics.pod_purged``)."""
        if counts is Counted.FENCED:
            self.metrics.node_fenced(node, self.clock().timestamp())
        elif counts is Counted.UNFENCED:
            self.metrics.node_unfenced(node)
        elif counts is Counted.PROOF_CONTRADICTED:
            self.metrics.proof_contradicted(node, self.clock().timestamp())

    @staticmethod
    def log_decision(decision: Decision, results: list[ActionResult] | None = None) -> None:
        """One line per decision, at info: refusals too, so a log shows what was refused and
        why without the Events."""
        blocking = next((r.guard for r in decision.reasons if not r.passed), "ok")
        log.info(
            "decision",
            node=decision.node,
            alertname=decision.alertname,
            fingerprint=decision.fingerprint,
            status=decision.status,
            verdict=decision.verdict.value,
            dry_run=decision.dry_run,
            reasons=[r.message for r in decision.reasons],
            blocked_by=None if blocking == "ok" else blocking,
            # Each reason once: the headline, and the actions decided (in a dry run, the ones
            # it would have taken), beside the reasons above rather than a second copy of them.
            summary=decision.summary,
            actions=[describe_action(a) for a in decision.actions],
            results=[r.as_dict() for r in results or []],
        )

    def power_unanswered(self, action: PowerAction) -> None:
        """A BMC step that could not even be tried (no BMC to ask)."""
        self.metrics.power_action(action.driver, action.operation, "unknown")

    def power_reading(self, action: PowerAction, reading: PowerEvidence) -> None:
        outcome = reading.state if action.send or action.operation == "status" else "not-sent"
        self.metrics.power_action(action.driver, action.operation, outcome)
        log.info(
            "power_action",
            node=action.node,
            driver=action.driver,
            action=action.operation,
            sent=action.send,
            state=reading.state,
            bmc_state=reading.raw_state,
            source=reading.source,
            detail=reading.detail,
        )


def node_event(
    decision: Decision, results: list[ActionResult], purged: int, *, fenced: bool
) -> tuple[str, str, bool] | None:
    """The Event an operator sees in ``kubectl describe node``; None when nothing happened that
    is worth a line (a repeated alert for a node already handled)."""
    released = _done(results, VOLUME_RELEASED)
    unfenced = _done(results, UNFENCED) > 0
    failed = [r for r in results if r.outcome is Outcome.FAILED]
    blocked = [r for r in decision.reasons if not r.passed]
    powered_on = _named(results, POWER_ON)
    rebooted = f"; power-on sent through its BMC ({powered_on[0].detail})" if powered_on else ""
    contradicted = next((r for r in blocked if r.guard == PROOF_CONTRADICTED), None)
    if contradicted is not None:
        return ("FenceProofContradicted", contradicted.message, True)
    lost = next((r for r in decision.reasons if r.guard == FENCE_RECORD), None)
    if lost is not None:
        # S3: a record that lost a fence's entry is said on every pass, adopted back or not.
        return ("FenceRecordMissing", lost.message, True)
    measured = [r for r in _named(results, RECOVERED) if r.outcome is Outcome.DONE]
    if measured:
        # The incident's recovery time (``engine.recovery``), said once, by the replica whose
        # write recorded it.
        return ("NodeRecovered", measured[0].detail, False)
    stays_off = next((r for r in blocked if r.guard == REBOOT), None)
    if stays_off is not None:
        # The bounded power-ons are spent and the machine is still not back: a person must look.
        return ("RebootFailed", stays_off.message, True)
    # Volumes left attached make a fence no plain success: said before anything else.
    stuck = unreleased(decision.reasons)
    # What to do about them, with the command whole; the decision and status keep why.
    kept = f" {volume_headline(stuck)}" if stuck is not None else ""
    if fenced:
        volumes = f", {released} VolumeAttachment(s) deleted" if released else ""
        verdict = next((r.message for r in decision.reasons if r.guard == VERDICT), "")
        # The verdict, the proof and the identity first: an Event's message is cut at 1,024
        # characters, and what follows matters less (the record and status keep it whole).
        return (
            "NodeFenced",
            f"out-of-service taint applied: {verdict}. {_purged(purged, results)}{volumes}"
            f"{rebooted}.{kept}",
            True,
        )
    if powered_on:
        return ("NodePoweredOn", f"fenced node powered on again{rebooted}", False)
    if unfenced:
        return ("NodeUnfenced", "out-of-service taint removed: " + decision.summary, False)
    let_go = [r for r in _named(results, RELEASED) if r.outcome is Outcome.DONE]
    note = escalation.is_escalation(decision.reasons)
    if note is not None and decision.verdict is Verdict.AWAIT_APPROVAL:
        # Said before the failed power step it comes from: a person is asked, with its error.
        waits = next((r.message for r in blocked if r.guard == APPROVAL), decision.summary)
        return ("FenceEscalated", f"{note.message}; {waits}", True)
    if failed:
        details = "; ".join(f"{r.target}: {r.detail}" for r in failed[:5])
        return ("NodefenceActionFailed", details, True)
    if let_go and not unfenced:
        return ("FenceReleased", f"nodefence let go of its fence: {let_go[0].detail}", True)
    if purged:
        return ("PodsPurged", f"{purged} pods stuck Terminating deleted with grace 0.{kept}", True)
    if released:
        return (
            "VolumesReleased",
            f"{released} VolumeAttachment(s) of the fenced node deleted",
            True,
        )
    if decision.verdict is Verdict.DEFERRED:
        return ("UnfenceDeferred", decision.summary, False)
    if decision.verdict in (Verdict.NOOP, Verdict.SKIP, Verdict.AWAIT_APPROVAL) and blocked:
        reason = "FenceRefused" if decision.status == AlertStatus.FIRING.value else "UnfenceRefused"
        if decision.verdict is Verdict.AWAIT_APPROVAL:
            return ("FenceAwaitingApproval", decision.summary, True)
        # A wait that passes on its own is Normal; Warning is for what a person should see.
        attention = any(warns(r.guard) for r in blocked)
        return (reason, decision.summary, attention)
    return None


def _purged(purged: int, results: list[ActionResult]) -> str:
    """How many pods went, and by whose hand: since Kubernetes 1.28 the pod garbage collector
    force-deletes the pods of an out-of-service node itself, and often first."""
    gone = sum(1 for r in _named(results, PURGED) if r.outcome is Outcome.ALREADY)
    if gone:
        return (
            f"{purged} pods purged by nodefence, {gone} already deleted by Kubernetes' pod "
            "garbage collector"
        )
    return f"{purged} pods purged"


def _named(results: list[ActionResult], result: Result) -> list[ActionResult]:
    """The results of that name, each result's name checked against the table on the way (an
    unknown one fails, never counts as another)."""
    return [r for r in results if result_named(r.action) is result]


def _done(results: list[ActionResult], result: Result) -> int:
    return sum(1 for r in _named(results, result) if r.outcome is Outcome.DONE)
