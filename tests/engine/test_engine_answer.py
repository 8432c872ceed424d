"""``engine.answer``: a person's answer to an approval question, decided on live facts. Whatever
the node and the record say, an answer to a node nodefence fenced already changes nothing (S7),
a rejection is only ever written for the node object and outage it was about (S9), one the
fence record holds stands against a later approval while nothing the node writes counts (S12),
and a dry run writes nothing (S8)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

import pytest
from engine_factories import NODE, NOW, UID, ago, entry, facts, node, policy, record
from engine_strategies import PROFILE, UIDS, all_facts
from hypothesis import given
from hypothesis import strategies as st

from nodefence.engine import answer as engine_answer
from nodefence.engine import mirror
from nodefence.engine import record as fence_record
from nodefence.engine.approval_request import ApprovalRequest, Incident
from nodefence.engine.model import (
    Approval,
    ApprovalDecision,
    Decision,
    Facts,
    RecordApprovalAction,
    RecordRejectionAction,
    Verdict,
    WithdrawQuestionAction,
)
from nodefence.engine.record import Phase

FINGERPRINT = "fp-0"
POLICY = policy()
EXPIRES = NOW + timedelta(hours=1)


def _answer(uid: str, decision: ApprovalDecision, since: int = 0) -> engine_answer.Answer:
    approval = Approval("U0ALICE", ago(5), decision, uid, FINGERPRINT)
    return engine_answer.Answer(NODE, approval, since, EXPIRES, asked_before=ago(10))


@st.composite
def cases(draw: st.DrawFn) -> tuple[Facts, engine_answer.Answer]:
    """Any facts, a question the record may hold about the node (rejected or not), and an
    answer bound to one of the node objects, for the node's outage or another one."""
    facts_ = draw(all_facts())
    the_node = facts_.node
    uid = draw(st.sampled_from([*UIDS, the_node.uid] if the_node else UIDS))
    incident = Incident.of(the_node, FINGERPRINT) if the_node else Incident(uid, FINGERPRINT, "")
    if draw(st.booleans()):
        asked = ApprovalRequest(
            NODE,
            draw(st.sampled_from([incident, replace(incident, not_ready_since="")])),
            requested_at=ago(60),
            expires_at=EXPIRES,
            rejection=draw(st.sampled_from(["", "rejected by U0BOB at 2026-11-30T08:00:00Z"])),
        )
        facts_ = replace(facts_, record=fence_record.with_approval(facts_.record, asked))
    since = draw(st.sampled_from([0, incident.since_unix, 1]))
    decision = draw(st.sampled_from(list(ApprovalDecision)))
    return facts_, _answer(uid, decision, since)


def _decisions(facts_: Facts, asked: engine_answer.Answer) -> list[Decision]:
    first = engine_answer.decide_answer(facts_, asked, POLICY, NOW)
    dated = engine_answer.dated(asked, facts_, NOW)
    alert = Decision(Verdict.SKIP, NODE, ())
    after = engine_answer.decide_answered(facts_, dated, alert, POLICY, NOW)
    return [first, after]


@pytest.mark.invariant("S7")
@PROFILE
@given(cases())
def test_an_answer_to_a_node_fenced_already_changes_nothing(
    case: tuple[Facts, engine_answer.Answer],
) -> None:
    """S7: a second press, or one after the fence, neither applies nor writes."""
    facts_, asked = case
    first = engine_answer.decide_answer(facts_, asked, POLICY, NOW)
    fenced = engine_answer.fenced_by_us(facts_.node, asked.approval.node_uid, facts_.record)
    if fenced is not None:
        assert not engine_answer.applies(first)
        assert first.actions == ()
        assert first.reasons[0].guard == engine_answer.NOT_FENCED


@pytest.mark.invariant("S9")
@PROFILE
@given(cases())
def test_a_rejection_is_written_only_for_the_node_object_it_was_about(
    case: tuple[Facts, engine_answer.Answer],
) -> None:
    """S9: a rejection is written for the node object the button named, and bound to the
    outage the question described; an approval never writes one, a rejection never
    withdraws its question. An approval is written only for the node object and outage it
    applies to, and only by the decision that lets it be acted on."""
    facts_, asked = case
    first, after = _decisions(facts_, asked)
    assert not any(isinstance(a, RecordApprovalAction) for a in after.actions)
    if any(isinstance(a, RecordApprovalAction) for a in first.actions):
        assert engine_answer.applies(first)
    for decision in (first, after):
        for action in decision.actions:
            if isinstance(action, RecordRejectionAction):
                assert asked.rejects
                assert facts_.node is not None
                assert action.node_uid == facts_.node.uid == asked.approval.node_uid
                assert action.incident == asked.incident
            elif isinstance(action, RecordApprovalAction):
                assert not asked.rejects
                assert facts_.node is not None
                assert action.node_uid == facts_.node.uid == asked.approval.node_uid
                assert action.incident == Incident.of(facts_.node, FINGERPRINT)
            else:
                assert isinstance(action, WithdrawQuestionAction)
                assert not asked.rejects
                assert action.node_uid == asked.approval.node_uid


@pytest.mark.invariant("S12")
@PROFILE
@given(cases())
def test_an_approval_applies_only_where_no_recorded_rejection_holds(
    case: tuple[Facts, engine_answer.Answer],
) -> None:
    """S12: the fence record's rejection of this outage stands against any approval; the
    node's annotations (which it can write) have no say."""
    facts_, asked = case
    first = engine_answer.decide_answer(facts_, asked, POLICY, NOW)
    the_node = facts_.node
    request = facts_.record.approval(NODE)
    if not engine_answer.applies(first):
        assert first.verdict is Verdict.NOOP
        return
    assert the_node is not None
    assert the_node.uid == asked.approval.node_uid
    assert the_node.ready is None or the_node.ready.status != "True"
    if not asked.rejects and request is not None:
        assert not request.rejected(Incident.of(the_node, FINGERPRINT))
    forged = replace(the_node, annotations={mirror.APPROVAL: "rejected by mallory"})
    again = engine_answer.decide_answer(replace(facts_, node=forged), asked, POLICY, NOW)
    assert engine_answer.applies(again)


@pytest.mark.invariant("S8")
@PROFILE
@given(cases())
def test_a_dry_run_decides_the_same_and_is_marked_so(
    case: tuple[Facts, engine_answer.Answer],
) -> None:
    """S8: the loop commits nothing of a decision marked dry run."""
    facts_, asked = case
    dry = policy(dry_run=True)
    wet = engine_answer.decide_answer(facts_, asked, POLICY, NOW)
    decided = engine_answer.decide_answer(facts_, asked, dry, NOW)
    assert decided.dry_run
    assert (decided.actions, decided.reasons) == (wet.actions, wet.reasons)


def _held(phase: Phase = Phase.FENCED, approval: str = "") -> Facts:
    return facts(node(), record_=record(replace(entry(phase=phase), approval=approval)))


def test_each_refusal_names_its_guard() -> None:
    approve = _answer(UID, ApprovalDecision.APPROVE)
    rejected = ApprovalRequest(
        NODE, Incident.of(node(), FINGERPRINT), rejection="rejected by U0BOB at x"
    )
    cases_ = [
        (_held(), approve, engine_answer.NOT_FENCED, "is already fenced (since "),
        (replace(facts(), node=None), approve, engine_answer.NODE_EXISTS, "no longer exists"),
        (facts(node(uid="uid-2")), approve, engine_answer.SAME_NODE, "re-created"),
        (facts(node(ready="True")), approve, engine_answer.STILL_NOT_READY, "Ready again"),
        (
            facts(node()),
            _answer(UID, ApprovalDecision.APPROVE, since=1),
            engine_answer.SAME_OUTAGE,
            "failed again",
        ),
        (
            replace(facts(), record=fence_record.with_approval(record(), rejected)),
            approve,
            engine_answer.NOT_REJECTED,
            "was rejected by U0BOB at x for this outage",
        ),
    ]
    for facts_, asked, guard, says in cases_:
        decision = engine_answer.decide_answer(facts_, asked, POLICY, NOW)
        refused = [r for r in decision.reasons if not r.passed]
        assert [r.guard for r in refused] == [guard]
        assert says in refused[0].message


def test_a_stale_question_is_withdrawn_or_its_rejection_recorded() -> None:
    ready = facts(node(ready="True"))
    approved = engine_answer.decide_answer(
        ready, _answer(UID, ApprovalDecision.APPROVE), POLICY, NOW
    )
    rejected = engine_answer.decide_answer(
        ready, _answer(UID, ApprovalDecision.REJECT), POLICY, NOW
    )

    assert approved.actions == (WithdrawQuestionAction(NODE, UID, FINGERPRINT, ago(10)),)
    [written] = rejected.actions
    assert isinstance(written, RecordRejectionAction)
    # Stamped with the API server's clock of the read.
    assert written.said == f"rejected by U0ALICE at {NOW.strftime('%Y-%m-%dT%H:%M:%SZ')}"


def test_after_the_alert_an_approval_that_fenced_is_settled_and_one_that_did_not_withdrawn() -> (
    None
):
    asked = engine_answer.dated(_answer(UID, ApprovalDecision.APPROVE), facts(), NOW)
    alert = Decision(Verdict.SKIP, NODE, ())
    mine = mirror.approval_text(asked.approval)

    fenced = engine_answer.decide_answered(_held(approval=mine), asked, alert, POLICY, NOW)
    other = engine_answer.decide_answered(
        _held(approval="approved by U0BOB"), asked, alert, POLICY, NOW
    )
    none = engine_answer.decide_answered(facts(), asked, alert, POLICY, NOW)

    assert engine_answer.applies(fenced)
    assert fenced.actions == ()
    assert not engine_answer.applies(other)
    assert other.actions == ()
    assert not engine_answer.applies(none)
    assert none.actions == (WithdrawQuestionAction(NODE, UID, FINGERPRINT, ago(10)),)


def _answered(approval: str = "", until: datetime | None = None, rejection: str = "") -> Facts:
    """The node down, and the record's question about its outage answered as given."""
    request = ApprovalRequest(
        NODE,
        Incident.of(node(), FINGERPRINT),
        requested_at=ago(60),
        expires_at=EXPIRES,
        rejection=rejection,
        approval=approval,
        approval_until=until,
    )
    return replace(facts(), record=fence_record.with_approval(record(), request))


def test_an_answer_that_applies_is_written_before_it_is_acted_on() -> None:
    """One answer wins: an answer is acted on only once the record holds it, so the decision
    that lets it through is the one that writes it (the write is the record's
    compare-and-swap)."""
    open_ = _answered()
    approve = engine_answer.decide_answer(
        open_, _answer(UID, ApprovalDecision.APPROVE), POLICY, NOW
    )
    reject = engine_answer.decide_answer(open_, _answer(UID, ApprovalDecision.REJECT), POLICY, NOW)

    assert engine_answer.applies(approve)
    [approved] = approve.actions
    assert isinstance(approved, RecordApprovalAction)
    assert approved.incident == Incident.of(node(), FINGERPRINT)
    assert approved.said == f"approved by U0ALICE at {NOW.strftime('%Y-%m-%dT%H:%M:%SZ')}"
    # Other answers are held off while it may be acted on: the answering request's time.
    assert approved.until == NOW + engine_answer.Answer(NODE, approved_by(), 0, EXPIRES).acting
    assert engine_answer.applies(reject)
    [rejected] = reject.actions
    assert isinstance(rejected, RecordRejectionAction)


def approved_by(user: str = "U0ALICE") -> Approval:
    return Approval(user, ago(5), ApprovalDecision.APPROVE, UID, FINGERPRINT)


def test_an_answer_the_record_holds_refuses_every_other_answer_by_name() -> None:
    acting = _answered(approval="approved by U0BOB at x", until=NOW + timedelta(seconds=20))
    rejected = _answered(rejection="rejected by U0BOB at x")
    for facts_, guard in (
        (acting, engine_answer.NOT_APPROVED),
        (rejected, engine_answer.NOT_REJECTED),
    ):
        for answered in ApprovalDecision:
            decision = engine_answer.decide_answer(facts_, _answer(UID, answered), POLICY, NOW)
            refused = [r for r in decision.reasons if not r.passed]
            assert [r.guard for r in refused] == [guard]
            assert "U0BOB" in refused[0].message
            assert decision.actions == (), "a losing answer wrote something"


def test_an_approval_no_longer_acted_on_holds_nothing_off() -> None:
    """Its request's time is up and it fenced nothing (the replica died before withdrawing
    it): the next answer is taken."""
    stale = _answered(approval="approved by U0BOB at x", until=NOW)
    for answered in ApprovalDecision:
        decision = engine_answer.decide_answer(stale, _answer(UID, answered), POLICY, NOW)
        assert engine_answer.applies(decision)
        assert len(decision.actions) == 1
