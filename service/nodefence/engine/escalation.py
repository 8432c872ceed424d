"""Escalation (``fencing.on_failure: approval``): a power step that genuinely failed is put to a
person in Slack, whose approval then stands in for the proof S10 asks for.

As Node Health Check escalates a remediation that did not work to the next one, the next one here
is a person: fencing is automatic while the BMC or agent proves the machine off, and only when it
cannot (unreachable, a refused login, an agent that failed, a power-off never read back as Off in
time, a state that is not Off) is someone asked, with the BMC's or agent's own error in the
question. The step must have been tried in this very request: a failure is only known from the
evidence the power step handed back (``facts.power``), never assumed beforehand.

What is never escalated: a machine shown to be another node's (identity mismatch), a target the
inventory gives two nodes, cloned machines reporting one systemUUID, a Node with nothing to compare
an identity with, a node missing from the inventory. Those say the inventory is wrong; a person
approving a fence on it would be approving the wrong machine's power state as this node's, or a
power action sent to a healthy node. They stay refusals and configuration errors.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from nodefence.engine import mirror
from nodefence.engine.approval_request import ApprovalRequest, Incident, rejection_of
from nodefence.engine.evidence import PowerEvidence
from nodefence.engine.guard_kinds import ESCALATION as GUARD
from nodefence.engine.guard_kinds import overruled as overruled_by_approval
from nodefence.engine.identity import judge
from nodefence.engine.model import Approval, ApprovalDecision, Facts, NodeFacts, Reason
from nodefence.engine.record import FenceEntry, Phase
from nodefence.engine.wording import instant
from nodefence.policy import Rule

NO_PROOF = "no power-off proof"


@dataclass(frozen=True)
class Failure:
    """Why the power step gave no proof. ``reason`` is the metric label: ``driver-error`` (the
    BMC or agent could not be asked or failed), ``timeout`` (a power-off went out and the machine
    was not read back as Off in time), ``not-off`` (the state read, without a power-off, was not
    Off), ``identity-unread`` (Off, but which machine it is could not be read)."""

    reason: str
    error: str
    driver: str
    # What the machine was last heard to say: "On" (a positive statement, read now or read back
    # after the power-off), "Off", or "" when no power state could be read.
    reads: str = ""

    @property
    def subject(self) -> str:
        """What a question about this failure asks a person to overrule, as the question records
        it: an approval stands in for exactly this, never for a failure found later. A machine
        reading On is its own fact, never covered by an approval given while nothing could be
        read; a driver error is the error itself (a refused login is not a timeout)."""
        said = f"the machine reads {self.reads}" if self.reads else "no power state was read"
        return f"{self.reason}, {said}" + (
            f": {self.error}" if self.reason == "driver-error" else ""
        )


def enabled(rule: Rule) -> bool:
    fencing = rule.fencing
    return fencing is not None and fencing.powers and fencing.on_failure == "approval"


def failure(rule: Rule, node: NodeFacts, facts: Facts) -> Failure | None:
    """The failure of this request's power step a person may overrule, or None: escalation not
    configured, the step not tried yet, the proof stands, or the failure is a configuration
    error (see the module's docstring)."""
    power = facts.power
    bound = facts.machine
    if not enabled(rule) or power is None or bound is None:
        return None
    if bound.shared_with or facts.uuid_shared_with:
        return None
    said = power.identity.value.strip() if power.identity is not None else ""
    if said:
        verdict = judge(
            bound,
            power.identity,
            node=node.name,
            system_uuid=node.system_uuid,
            provider_id=node.provider_id,
            uuid_shared_with=facts.uuid_shared_with,
        )
        if not verdict.bound:
            return None
    if power.state == "off" and (said or bound.unchecked):
        return None
    driver = rule.fencing.driver if rule.fencing is not None else ""
    error = power.detail or f"it answered {power.state}"
    if power.state == "off":
        kind = "identity-unread"
    elif power.action_sent:
        kind = "timeout"
    elif power.state == "on":
        kind = "not-off"
    else:
        kind = "driver-error"
    said_by = error if power.source in error else f"{power.source}: {error}"
    return Failure(kind, said_by, driver, _reads(power))


# How every driver words a power action not read back: "the system still reports On after 15s"
# (Redfish), "the BMC still reports on" (IPMI), "status still reports Status: ON" (fence agents).
_STILL_ON = re.compile(r"still reports (Status:\s*)?On\b", re.IGNORECASE)


def _reads(power: PowerEvidence) -> str:
    if power.state == "on" or (power.state == "unknown" and _STILL_ON.search(power.detail)):
        return "On"
    return "Off" if power.state == "off" else ""


def rejection(
    node: NodeFacts,
    fingerprint: str,
    approval: Approval | None,
    requested: ApprovalRequest | None,
) -> str | None:
    """A person's "no" for this incident: the answer being acted on now, or the one the fence
    record holds (``requested``: the node's approval request there; S12, never the node's
    annotations)."""
    if (
        approval is not None
        and approval.decision is ApprovalDecision.REJECT
        and approval.node_uid == node.uid
    ):
        return f"fencing was rejected by {approval.user} at {instant(approval.at)}"
    recorded = rejection_of(requested, node, fingerprint)
    return f"fencing was {recorded} for this incident" if recorded is not None else None


def awaits_person(entry: FenceEntry, node: NodeFacts, facts: Facts, now: datetime) -> bool:
    """A claim whose power-off went out while a person is asked about its incident in Slack:
    kept past the claim timeout, since rolling it back would let the answer send the power-off
    a second time. ``now`` is compared with the request's expiry, which is on the requester's
    clock; a skew only keeps or lets go of the claim a little early or late."""
    if entry.phase is not Phase.CLAIMED or entry.power_off_sent_at is None:
        return False
    requested = facts.record.approval(node.name)
    incident = Incident.of(node, entry.fingerprint)
    return requested is not None and requested.pending(incident, now)


def unanswered(
    requested: ApprovalRequest | None,
    node: NodeFacts,
    fingerprint: str,
    found: Failure,
    approval: Approval,
) -> str | None:
    """Why ``approval`` does not stand in for ``found``, or None when it answers it: the fence
    record must hold the question about this incident, and that question must have asked about
    this very failure. A person who approved fencing despite an HTTP 401 did not approve it
    despite a BMC that now reports the machine On; that new fact is asked anew."""
    incident = Incident.of(node, fingerprint)
    # An answer written without a question (``ApprovalRequest.asked``) answered nothing asked.
    if requested is None or requested.incident != incident or not requested.asked:
        return (
            f"the answer from {approval.user} cannot be matched to a question the fence record "
            f"holds about this incident; the power step now reports {found.subject}, which is "
            "asked anew"
        )
    if requested.subject != found.subject:
        was = requested.subject or "a fence without any power step"
        return (
            f"the approval by {approval.user} answered a question about {was}; the power step "
            f"now reports {found.subject}, which nobody was asked about: nothing is fenced on "
            "that approval, and a new question states the new fact"
        )
    return None


def escalated(found: Failure) -> Reason:
    return Reason(
        GUARD,
        True,
        f"escalated to a person in Slack (fencing.on_failure: approval; driver {found.driver}, "
        f"{found.reason}): {NO_PROOF}: {found.error}",
    )


_LABELS = re.compile(r"\(fencing\.on_failure: approval; driver ([\w-]+), ([\w-]+)\)")


def labels(note: Reason) -> tuple[str, str]:
    """The driver and the failure's reason an escalation note names, for the metric."""
    found = _LABELS.search(note.message)
    return (found.group(1), found.group(2)) if found is not None else ("unknown", "unknown")


def asked(rule: Rule, node: NodeFacts, found: Failure) -> str:
    """How the wait for the answer is worded: loudly, since the answer replaces the proof."""
    return (
        f"rule {rule.name!r} escalates a failed power step: nodefence could not prove node "
        f"{node.name}'s machine is off ({found.error}); a person must check the machine is "
        "really off and approve in Slack"
    )


def proof_text(found: Failure, approval: Approval) -> str:
    """The proof S10 accepts in its place, as the fence record, the mirror and Events keep it."""
    return f"{NO_PROOF}: {found.error}; {mirror.approval_text(approval)}"


def overruled(reasons: Sequence[Reason], found: Failure, approval: Approval) -> list[Reason]:
    """The reasons with the failed proof (and the identity that could not be read with it)
    marked as stood in for by the person's approval: still in the decision, worded for what
    they are, no longer blocking."""
    who = mirror.approval_text(approval)
    return [
        Reason(r.guard, True, f"{r.message} — {who} in place of the proof (escalated)")
        if overruled_by_approval(r.guard) and not r.passed
        else r
        for r in reasons
    ]


def is_escalation(reasons: Sequence[Reason]) -> Reason | None:
    """The escalation note of a decision, if it was escalated."""
    return next((r for r in reasons if r.guard == GUARD and r.passed), None)
