"""The approval question is the engine's decision: asked when a decision waits for a person and
the fence record holds no open question about this incident, and never otherwise.

Open means pending (posted and not expired, or claimed within the claim grace by a replica that
may still be posting) or rejected. The request's stamps are on the requester's clock, so they are
judged on a reading of that clock (``asking_at``), not on the API server's ``now``.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Any

from engine_factories import CLAIM_TOKEN, NODE, NOW, UID, ago, entry, event, facts, node, record
from engine_strategies import PROFILE, cases
from hypothesis import given
from hypothesis import strategies as st

from nodefence.engine import escalation
from nodefence.engine.approval_ask import question_open, with_question
from nodefence.engine.approval_request import CLAIM_GRACE, ApprovalRequest, Incident
from nodefence.engine.decide import decide
from nodefence.engine.evidence import PowerEvidence
from nodefence.engine.identity import MachineBinding, Reported
from nodefence.engine.model import (
    Approval,
    ApprovalDecision,
    AskApprovalAction,
    Decision,
    Facts,
    Verdict,
)
from nodefence.engine.record import Phase, with_approval, without_approval
from nodefence.policy import Policy, parse_policy

MACHINE = "4c4c4544-0042-3010-8050-b7c04f4e3332"
SOURCE = "redfish https://bmc-1.example/redfish/v1/Systems/1"
# The requester's clock, a little ahead of the API server's: the one the stamps are judged on.
ASKING_AT = NOW + timedelta(seconds=2)


def slack(**rule: Any) -> Policy:
    body = {"name": "default", "approval": "slack", "fencing": {"driver": "none"}, **rule}
    return parse_policy({"rules": [body]}, "<test>")


def escalating(on_failure: str = "approval") -> Policy:
    fencing = {"driver": "redfish", "action": "off", "on_failure": on_failure}
    return parse_policy({"rules": [{"name": "default", "fencing": fencing}]}, "<test>")


def refused_login() -> PowerEvidence:
    said = Reported("", SOURCE, detail="HTTP 401 from the BMC")
    return PowerEvidence(
        "unknown",
        SOURCE,
        f"no power off sent: {SOURCE} did not report which machine it controls",
        at=ago(1),
        identity=said,
    )


def bmc_facts(power: PowerEvidence | None, **overrides: Any) -> Facts:
    binding = MachineBinding(node=NODE, target=SOURCE, driver="redfish", expected=MACHINE)
    return dataclasses.replace(facts(power=power, **overrides), machine=binding)


def this_incident() -> Incident:
    return Incident.of(node(), "fp-1")


def asked(**overrides: Any) -> ApprovalRequest:
    """This incident's question as the record holds it once posted, open for an hour more."""
    made = ApprovalRequest(
        NODE,
        this_incident(),
        requested_at=ago(600),
        expires_at=NOW + timedelta(hours=1),
        claimed_by=CLAIM_TOKEN,
        channel="C0NODEFENCE",
        ts="1796150149.000001",
    )
    return dataclasses.replace(made, **overrides)


def holding(the: Facts, request: ApprovalRequest | None) -> Facts:
    held = without_approval(the.record, NODE)
    return dataclasses.replace(the, record=with_approval(held, request) if request else held)


def questions(decision: Decision) -> list[AskApprovalAction]:
    return [a for a in decision.actions if isinstance(a, AskApprovalAction)]


# ---------------------------------------------------------------------------- examples
def test_a_decision_waiting_for_a_person_nobody_asked_asks_about_this_incident() -> None:
    decision = decide(event(), facts(), slack(), NOW, asking_at=ASKING_AT)
    assert decision.verdict is Verdict.AWAIT_APPROVAL
    assert decision.actions == (AskApprovalAction(NODE, UID, this_incident()),)


def test_the_question_changes_nothing_else_in_the_decision() -> None:
    plain = decide(event(), facts(), slack(), NOW)
    asking = decide(event(), facts(), slack(), NOW, asking_at=ASKING_AT)
    assert dataclasses.replace(asking, actions=()) == plain


def test_without_an_approval_channel_nobody_is_asked() -> None:
    assert decide(event(), facts(), slack(), NOW).actions == ()


def test_a_pending_question_is_not_asked_again() -> None:
    the = holding(facts(), asked())
    decision = decide(event(), the, slack(), NOW, asking_at=ASKING_AT)
    assert decision.verdict is Verdict.AWAIT_APPROVAL
    assert questions(decision) == []


def test_a_fresh_claim_whose_message_is_being_posted_holds_for_the_grace() -> None:
    claim = asked(requested_at=ASKING_AT - CLAIM_GRACE / 2, channel="", ts="")
    the = holding(facts(), claim)
    assert questions(decide(event(), the, slack(), NOW, asking_at=ASKING_AT)) == []
    later = ASKING_AT + CLAIM_GRACE
    assert len(questions(decide(event(), the, slack(), NOW, asking_at=later))) == 1


def test_expiry_is_judged_on_the_requesters_clock() -> None:
    """Stamped on the requester's clock, judged on it: the API server's ``now`` is before the
    expiry, the requester's after it, and the question is asked again."""
    request = asked(expires_at=NOW + timedelta(seconds=1))
    the = holding(facts(), request)
    assert questions(decide(event(), the, slack(), NOW, asking_at=NOW)) == []
    assert len(questions(decide(event(), the, slack(), NOW, asking_at=ASKING_AT))) == 1


def test_a_question_about_another_node_object_or_outage_is_asked_afresh() -> None:
    for other in (
        dataclasses.replace(this_incident(), node_uid="uid-old"),
        dataclasses.replace(this_incident(), not_ready_since="2020-01-01T00:00:00Z"),
    ):
        the = holding(facts(), asked(incident=other))
        decision = decide(event(), the, slack(), NOW, asking_at=ASKING_AT)
        assert len(questions(decision)) == 1, other


def test_the_alert_after_the_fallback_asked_finds_the_outages_question() -> None:
    """The fallback asked while no alert had come; the alert fires minutes later for the same
    outage: nobody is asked twice, the wait says when it was asked, and a "no" holds for it."""
    fallback = dataclasses.replace(this_incident(), fingerprint="fallback/worker-1/1796100000")
    pending = decide(
        event(), holding(facts(), asked(incident=fallback)), slack(), NOW, asking_at=ASKING_AT
    )
    assert pending.verdict is Verdict.AWAIT_APPROVAL
    assert questions(pending) == []
    assert "asked in Slack at" in pending.summary
    rejected = asked(incident=fallback, rejection="rejected by bob at 2026-11-30T08:00:00Z")
    held = decide(event(), holding(facts(), rejected), slack(), NOW, asking_at=ASKING_AT)
    assert held.verdict is Verdict.NOOP
    assert held.actions == ()
    assert "rejected by bob" in held.summary


def test_a_rejection_for_this_incident_is_never_asked_again() -> None:
    the = holding(facts(), asked(rejection="rejected by bob at 2026-11-30T08:00:00Z"))
    decision = decide(event(), the, slack(), NOW, asking_at=ASKING_AT + timedelta(days=1))
    assert decision.verdict is Verdict.NOOP
    assert decision.actions == ()


def test_a_dry_run_asks_nobody() -> None:
    policy = slack().model_copy(update={"dry_run": True})
    decision = decide(event(), facts(), policy, NOW, asking_at=ASKING_AT)
    assert decision.verdict is Verdict.AWAIT_APPROVAL
    assert decision.actions == ()


def test_an_answer_that_does_not_fit_asks_again_when_nothing_is_open() -> None:
    """A press for a node object since re-created leaves the decision waiting; with no open
    question in the record, the question is asked as it was before."""
    answer = Approval("alice", ago(30), ApprovalDecision.APPROVE, "uid-recreated", "fp-1")
    decision = decide(event(), facts(), slack(), NOW, approval=answer, asking_at=ASKING_AT)
    assert decision.verdict is Verdict.AWAIT_APPROVAL
    assert len(questions(decision)) == 1


def test_a_stale_claim_is_rolled_back_before_anyone_is_asked() -> None:
    stale = dataclasses.replace(entry(phase=Phase.CLAIMED, claimed=3600), fingerprint="fp-1")
    the = facts(record_=record(stale))
    decision = decide(event(), the, slack(), NOW, asking_at=ASKING_AT)
    assert decision.verdict is Verdict.AWAIT_APPROVAL
    assert decision.actions, "the rollback"
    assert questions(decision) == []
    # The decision on the record after the rollback asks.
    after = decide(event(), facts(), slack(), NOW, asking_at=ASKING_AT)
    assert len(questions(after)) == 1


def test_an_escalated_power_failure_asks_a_person() -> None:
    the = bmc_facts(refused_login())
    decision = decide(event(), the, escalating(), NOW, asking_at=ASKING_AT)
    assert decision.verdict is Verdict.AWAIT_APPROVAL
    assert escalation.is_escalation(decision.reasons) is not None
    subject = decision.asks_about
    assert "driver-error" in subject
    assert decision.actions == (AskApprovalAction(NODE, UID, this_incident(), subject),)
    # Asked once: while the question about this failure is open, the next alert waits
    # without asking.
    open_question = asked(subject=subject)
    waiting = decide(event(), holding(the, open_question), escalating(), NOW, asking_at=ASKING_AT)
    assert waiting.verdict is Verdict.AWAIT_APPROVAL
    assert waiting.actions == ()
    # An open question about another failure is not this one: the new fact is asked.
    other = asked(subject="timeout, the machine reads On")
    anew = decide(event(), holding(the, other), escalating(), NOW, asking_at=ASKING_AT)
    assert anew.actions == (AskApprovalAction(NODE, UID, this_incident(), subject),)


def test_with_refuse_a_power_failure_asks_nobody() -> None:
    the = bmc_facts(refused_login())
    decision = decide(event(), the, escalating("refuse"), NOW, asking_at=ASKING_AT)
    assert decision.verdict is not Verdict.AWAIT_APPROVAL
    assert questions(decision) == []


def test_a_claim_whose_power_off_went_out_is_kept_while_the_person_is_asked() -> None:
    claimed = dataclasses.replace(entry(phase=Phase.CLAIMED, claimed=20), power_off_sent_at=ago(18))
    stuck = PowerEvidence(
        "unknown", SOURCE, "sent ForceOff; still On", at=ago(1), action_sent=True, reset_sent=True
    )
    the = bmc_facts(stuck, record_=record(claimed))
    decision = decide(event(), the, escalating(), NOW, own_claim=CLAIM_TOKEN, asking_at=ASKING_AT)
    assert decision.verdict is Verdict.AWAIT_APPROVAL
    assert decision.actions == (
        AskApprovalAction(NODE, UID, this_incident(), "timeout, no power state was read"),
    )


# --------------------------------------------------------------------------- properties
def slack_case(case: Any) -> Any:
    event_, the, policy, approval = case
    rule = policy.rules[0].model_copy(update={"approval": "slack"})
    return event_, the, policy.model_copy(update={"rules": [rule]}), approval


open_requests = st.sampled_from(
    [
        {},
        {"channel": "", "ts": ""},
        {"rejection": "rejected by bob at 2026-11-30T08:00:00Z"},
        {"rejection": "rejected by bob at 2026-11-30T08:00:00Z", "expires_at": ago(3600)},
    ]
)
clocks = st.sampled_from([NOW, ASKING_AT, NOW + timedelta(seconds=20)])


@PROFILE
@given(cases, open_requests, clocks, st.booleans())
def test_never_asked_while_the_record_holds_an_open_question_for_this_incident(
    case: Any, request: dict[str, Any], asking_at: datetime, under_slack: bool
) -> None:
    event_, the, policy, approval = slack_case(case) if under_slack else case
    if the.node is None:
        return
    incident = Incident.of(the.node, event_.fingerprint)
    stamps = {"requested_at": asking_at - timedelta(seconds=5), **request}
    the = holding(the, asked(incident=incident, **stamps))
    assert question_open(the.record.approval(NODE), incident, asking_at)
    decision = decide(event_, the, policy, NOW, approval=approval, asking_at=asking_at)
    assert questions(decision) == []


@PROFILE
@given(cases, clocks, st.booleans())
def test_asked_only_by_a_waiting_decision_of_a_rule_that_asks_and_never_in_a_dry_run(
    case: Any, asking_at: datetime, under_slack: bool
) -> None:
    event_, the, policy, approval = slack_case(case) if under_slack else case
    decision = decide(event_, the, policy, NOW, approval=approval, asking_at=asking_at)
    plain = decide(event_, the, policy, NOW, approval=approval)
    rule = policy.rule_named(plain.rule) if plain.rule is not None else None
    asks = questions(decision)
    if not asks:
        assert decision == plain
        return
    assert rule is not None
    assert rule.approval == "slack" or escalation.enabled(rule)
    assert not policy.dry_run
    assert plain.verdict is Verdict.AWAIT_APPROVAL
    assert plain.actions == ()
    assert decision.actions == tuple(asks)
    assert len(asks) == 1
    assert the.node is not None
    [ask] = asks
    assert ask == AskApprovalAction(
        the.node.name, the.node.uid, Incident.of(the.node, event_.fingerprint)
    )
    assert not question_open(the.record.approval(the.node.name), ask.incident, asking_at)


@PROFILE
@given(cases, clocks)
def test_a_dry_run_never_asks(case: Any, asking_at: datetime) -> None:
    event_, the, policy, approval = slack_case(case)
    dry = policy.model_copy(update={"dry_run": True})
    decision = decide(event_, the, dry, NOW, approval=approval, asking_at=asking_at)
    assert questions(decision) == []


evidence = st.sampled_from([None, refused_login()])
outcomes = st.sampled_from(["approval", "refuse"])
asks_in_slack = st.sampled_from(["none", "slack"])
records_of_questions = st.sampled_from([None, {}, {"expires_at": ago(1)}, {"rejection": "no"}])


@PROFILE
@given(evidence, outcomes, asks_in_slack, records_of_questions, st.booleans())
def test_escalation_asks_only_under_on_failure_approval_and_only_when_nothing_is_open(
    power: PowerEvidence | None,
    on_failure: str,
    approval: str,
    request: dict[str, Any] | None,
    ready: bool,
) -> None:
    fencing = {"driver": "redfish", "action": "off", "on_failure": on_failure}
    rule = {"name": "default", "fencing": fencing, "approval": approval}
    policy = parse_policy({"rules": [rule]}, "<test>")
    the = bmc_facts(power, the_node=node(ready="True" if ready else "Unknown"))
    # The question the record holds is about the failure this decision finds.
    subject = decide(event(), the, policy, NOW).asks_about
    the = holding(the, asked(subject=subject, **request) if request is not None else None)
    decision = decide(event(), the, policy, NOW, asking_at=ASKING_AT)
    if questions(decision):
        assert on_failure == "approval" or approval == "slack"
        assert decision.verdict is Verdict.AWAIT_APPROVAL
        assert not ready
        assert request is None or "expires_at" in request
    escalated = on_failure == "approval" and approval == "none" and power is not None
    nothing_open = request is None or "expires_at" in request
    if escalated and not ready and nothing_open:
        assert len(questions(decision)) == 1, decision


def test_with_question_leaves_other_verdicts_alone() -> None:
    fenced = decide(
        event(),
        facts(),
        parse_policy({"rules": [{"name": "default", "fencing": {"driver": "none"}}]}, "<t>"),
        NOW,
    )
    assert with_question(fenced, facts(), ASKING_AT) == fenced
