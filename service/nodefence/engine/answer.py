"""A person's answer to an approval question (a Slack button), decided like any other change.

The press was already checked for who and where (signed, unexpired, the right button and
channel, an approver). What is judged here is whether the answer still applies, on live facts:
the node nodefence fenced already (S7: a second press or a late one fences nothing twice); the
question no longer describes the node (gone, re-created, Ready again, or in a new outage);
a rejection the fence record holds for this outage stands whatever is pressed next (S12:
never one from the node's annotations). An answer that applies is acted on by deciding the
alert again with it, on every guard (``decide``); ``decide_answered`` then says what is left
to record: a rejection, or the question withdrawn when the approval fenced nothing.

One answer wins. Two people may press at the same moment, on one replica or on two; so an
answer that applies is first written into the fence record's question (``RecordRejectionAction``,
``RecordApprovalAction``), on the record as it is and only while no other answer holds for the
outage, and acted on only once written. The record's version makes that write a
compare-and-swap: of two answers judged together, the second write finds the first, the loop
reads again, and the second answer is refused by name (``NOT_REJECTED``, ``NOT_APPROVED``): a
rejection holds for the outage; an approval holds while it is acted on (until its request's
deadline), after which it either fenced the node or was withdrawn.

Each refusal is a named guard, and each record change an action the shell's commit carries
out with its precondition (the entry or question as the record holds it now).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime, timedelta

from nodefence.engine import mirror, readiness
from nodefence.engine.approval_request import Incident
from nodefence.engine.guard_kinds import ANSWER_FENCED_WITH_IT as FENCED_WITH_IT
from nodefence.engine.guard_kinds import ANSWER_NODE_EXISTS as NODE_EXISTS
from nodefence.engine.guard_kinds import ANSWER_NOT_APPROVED as NOT_APPROVED
from nodefence.engine.guard_kinds import ANSWER_NOT_FENCED as NOT_FENCED
from nodefence.engine.guard_kinds import ANSWER_NOT_REJECTED as NOT_REJECTED
from nodefence.engine.guard_kinds import ANSWER_SAME_NODE as SAME_NODE
from nodefence.engine.guard_kinds import ANSWER_SAME_OUTAGE as SAME_OUTAGE
from nodefence.engine.guard_kinds import ANSWER_STILL_NOT_READY as STILL_NOT_READY
from nodefence.engine.model import (
    API_SERVER_CLOCK,
    Action,
    Approval,
    ApprovalDecision,
    Decision,
    Facts,
    NodeFacts,
    Reason,
    RecordApprovalAction,
    RecordRejectionAction,
    Verdict,
    WithdrawQuestionAction,
)
from nodefence.engine.record import FenceRecord, Phase
from nodefence.engine.wording import instant
from nodefence.policy import Policy

STATUS = "slack-answer"


@dataclass(frozen=True)
class Answer:
    """The press as its signed button says: which node object and alert it was asked about,
    the outage (``since``: the Ready condition's last transition, whole seconds; 0 when the
    question did not say), when the buttons expire, the person's answer, and the requester's
    clock when acting on it began: a question asked from then on is not the one answered.
    ``acting``: how long acting on an approval may take (the answering request's deadline);
    its record holds other answers off that long."""

    node: str
    approval: Approval
    since: int
    expires: datetime
    asked_before: datetime | None = None
    acting: timedelta = timedelta(seconds=60)

    @property
    def rejects(self) -> bool:
        return self.approval.decision is ApprovalDecision.REJECT

    @property
    def incident(self) -> Incident:
        approval = self.approval
        return Incident(approval.node_uid, approval.fingerprint, Incident.since_text(self.since))


def _pass(guard: str, message: str) -> Reason:
    return Reason(guard, True, message)


def _block(guard: str, message: str) -> Reason:
    return Reason(guard, False, message)


def dated(answer: Answer, facts: Facts, now: datetime) -> Answer:
    """The answer stamped with the API server's clock when the facts carry it: its age is
    judged on that clock, as everything else (S11)."""
    if facts.clock != API_SERVER_CLOCK:
        return answer
    return dataclasses.replace(answer, approval=dataclasses.replace(answer.approval, at=now))


def fenced_by_us(node: NodeFacts | None, uid: str, record: FenceRecord) -> str | None:
    """How nodefence's fence of node object ``uid`` reads in the fence record (the authority;
    the node's annotations could say anything), or None when it is not fenced."""
    if node is None or node.uid != uid:
        return None
    entry = record.entry(node.name)
    if entry is None or entry.uid != uid or entry.phase is not Phase.FENCED:
        return None
    parts = [f"since {instant(entry.fenced_at or entry.claimed_at)}"]
    if entry.approval:
        parts.append(entry.approval)
    return ", ".join(parts)


def not_fenced(facts: Facts, answer: Answer) -> Reason:
    """S7: an answer to a node nodefence fenced already changes nothing."""
    fenced = fenced_by_us(facts.node, answer.approval.node_uid, facts.record)
    if fenced is not None:
        return _block(NOT_FENCED, f"node {answer.node} is already fenced ({fenced})")
    return _pass(NOT_FENCED, f"node {answer.node} is not fenced by nodefence")


def node_exists(node: NodeFacts | None, answer: Answer) -> Reason:
    if node is None:
        return _block(NODE_EXISTS, f"node {answer.node} no longer exists")
    return _pass(NODE_EXISTS, f"node {answer.node} exists")


def same_node(node: NodeFacts, answer: Answer) -> Reason:
    """S9: an answer is bound to the node object it was asked about."""
    if node.uid != answer.approval.node_uid:
        return _block(
            SAME_NODE,
            f"node {answer.node} was deleted and re-created since the question was asked",
        )
    return _pass(SAME_NODE, f"node {answer.node} is the node object the question was about")


def still_not_ready(node: NodeFacts, answer: Answer) -> Reason:
    if readiness.node_is_ready(node):
        return _block(STILL_NOT_READY, f"node {answer.node} is Ready again")
    return _pass(STILL_NOT_READY, f"node {answer.node} is still NotReady")


def same_outage(node: NodeFacts, answer: Answer) -> Reason:
    """An answer holds for the outage it was asked about, never for the next one."""
    if answer.since and Incident.of(node, answer.approval.fingerprint).since_unix != answer.since:
        return _block(
            SAME_OUTAGE,
            f"node {answer.node} recovered and failed again since the question was asked",
        )
    return _pass(SAME_OUTAGE, f"node {answer.node} is in the outage the question was about")


def not_rejected(facts: Facts, answer: Answer) -> Reason:
    """S12: a rejection the fence record holds for this outage stands; a second approver, a
    second rejection or the approve button of the same message changes nothing."""
    node = facts.node
    requested = facts.record.approval(answer.node)
    incident = Incident.of(node, answer.approval.fingerprint) if node is not None else None
    if requested is not None and incident is not None and requested.rejected(incident):
        return _block(
            NOT_REJECTED, f"fencing node {answer.node} was {requested.rejection} for this outage"
        )
    return _pass(NOT_REJECTED, f"no rejection of fencing node {answer.node} holds for this outage")


def not_approved(facts: Facts, answer: Answer, now: datetime) -> Reason:
    """One answer wins: an approval the fence record holds for this outage is being acted on
    (until its request's deadline, on the API server's clock ``now``); no other answer is
    taken meanwhile, neither a rejection that would come too late to stop it nor a second
    approval that would fence in another name."""
    node = facts.node
    requested = facts.record.approval(answer.node)
    incident = Incident.of(node, answer.approval.fingerprint) if node is not None else None
    approving = (
        requested.approving(incident, now)
        if requested is not None and incident is not None
        else None
    )
    if approving is not None:
        return _block(
            NOT_APPROVED,
            f"fencing node {answer.node} was {approving} for this outage, and nodefence is "
            "acting on that approval",
        )
    return _pass(NOT_APPROVED, f"no approval of fencing node {answer.node} is being acted on")


def _rejection(node: NodeFacts | None, answer: Answer) -> tuple[Action, ...]:
    """The rejection, written only for the node object it was about."""
    if node is None or node.uid != answer.approval.node_uid:
        return ()
    said = mirror.approval_text(answer.approval)
    return (RecordRejectionAction(answer.node, node.uid, answer.incident, said, answer.expires),)


def _recorded(node: NodeFacts, answer: Answer, now: datetime) -> tuple[Action, ...]:
    """The answer written into the record before it is acted on: the write that makes it the
    one answer (``approvals`` refuses it when another holds by then, and the loop decides
    again)."""
    if answer.rejects:
        return _rejection(node, answer)
    incident = Incident.of(node, answer.approval.fingerprint)
    said = mirror.approval_text(answer.approval)
    until = now + answer.acting
    return (RecordApprovalAction(answer.node, node.uid, incident, said, answer.expires, until),)


def _withdrawal(answer: Answer) -> tuple[Action, ...]:
    approval = answer.approval
    return (
        WithdrawQuestionAction(
            answer.node, approval.node_uid, approval.fingerprint, answer.asked_before
        ),
    )


def _finish(
    answer: Answer, reasons: list[Reason], policy: Policy, now: datetime, *actions: Action
) -> Decision:
    return Decision(
        verdict=Verdict.NOOP,
        node=answer.node,
        reasons=tuple(reasons),
        actions=actions,
        dry_run=policy.dry_run,
        fingerprint=answer.approval.fingerprint,
        status=STATUS,
        now=now,
    )


def applies(decision: Decision) -> bool:
    """Whether the answer is to be acted on: every guard of ``decide_answer`` passed."""
    return all(r.passed for r in decision.reasons)


def decide_answer(facts: Facts, answer: Answer, policy: Policy, now: datetime) -> Decision:
    """Whether the answer applies to the node as it is now, and if it does, the answer
    written into the record (the one answer acted on). When the question no longer describes
    the node, a rejection is still recorded (for the node object it was about) and an
    approval's question withdrawn; when another answer holds, nothing is written; nothing is
    written in a dry run (S8)."""
    answer = dated(answer, facts, now)
    reasons = [not_fenced(facts, answer)]
    if not reasons[0].passed:
        return _finish(answer, reasons, policy, now)
    node = facts.node
    reasons.append(node_exists(node, answer))
    if node is not None:
        for guard in (same_node, still_not_ready, same_outage):
            reasons.append(guard(node, answer))
            if not reasons[-1].passed:
                break
    if not reasons[-1].passed:
        settled = _rejection(node, answer) if answer.rejects else _withdrawal(answer)
        return _finish(answer, reasons, policy, now, *settled)
    assert node is not None
    reasons.append(not_rejected(facts, answer))
    if reasons[-1].passed:
        reasons.append(not_approved(facts, answer, now))
    if not reasons[-1].passed:
        return _finish(answer, reasons, policy, now)
    return _finish(answer, reasons, policy, now, *_recorded(node, answer, now))


def decide_answered(
    facts: Facts, answer: Answer, alert: Decision, policy: Policy, now: datetime
) -> Decision:
    """What is left to record once the alert was decided with the answer (``alert``): a
    rejection, for its outage; an approval that fenced nothing withdraws its question, so the
    next alert that reaches approval asks afresh. ``answer`` as ``decide_answer`` dated it (the
    approval the alert was decided with)."""
    if answer.rejects:
        said = mirror.approval_text(answer.approval)
        reasons = [_pass(NOT_REJECTED, f"fencing node {answer.node} was {said}")]
        return _finish(answer, reasons, policy, now, *_rejection(facts.node, answer))
    fenced = fenced_by_us(facts.node, answer.approval.node_uid, facts.record)
    mine = mirror.approval_text(answer.approval)
    if fenced is not None and mine in fenced:
        reasons = [_pass(FENCED_WITH_IT, f"node {answer.node} is fenced, {mine}")]
        return _finish(answer, reasons, policy, now)
    if fenced is not None:
        reasons = [_block(FENCED_WITH_IT, f"node {answer.node} is already fenced ({fenced})")]
        return _finish(answer, reasons, policy, now)
    reasons = [_block(FENCED_WITH_IT, f"node {answer.node} was not fenced: {alert.summary}")]
    return _finish(answer, reasons, policy, now, *_withdrawal(answer))
