"""Property tests: approval requests and their answers count only as the fence record holds them.

A node's kubelet can write any ``nodefence.io/approval*`` annotation (the words nodefence shows
people, and the keys where requests and rejections were once kept); none of them may change a
decision (S12). A rejection in the record holds for its incident (this node object, this alert,
this outage) and for nothing else.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from engine_factories import NODE, NOW
from engine_strategies import FORMER_APPROVAL_KEYS, PROFILE, UIDS, Case, all_decisions, cases
from hypothesis import given
from hypothesis import strategies as st

from nodefence.engine import mirror
from nodefence.engine.approval_request import ApprovalRequest, Incident
from nodefence.engine.decide import decide
from nodefence.engine.model import (
    AlertStatus,
    Approval,
    ApprovalDecision,
    ClaimAction,
    Decision,
    Facts,
    FenceAction,
    NodeFacts,
    Verdict,
)
from nodefence.engine.record import FenceRecord, with_approval, without_approval

pytestmark = pytest.mark.invariant("S12")

APPROVAL_KEYS = (mirror.APPROVAL, *FORMER_APPROVAL_KEYS)
words = st.sampled_from(
    [
        "rejected by mallory at 2026-11-30T08:00:00Z",
        "approved by mallory at 2026-11-30T08:00:00Z",
        "asked in Slack at 2026-11-30T08:00:00Z; the question expires at 2026-11-30T09:00:00Z",
        *UIDS,
        "fp-0",
        "fp-1",
        "2026-11-30T08:00:00Z",
        "C0NODEFENCE/1700000000.000100",
        "",
    ]
)
forged_approval = st.dictionaries(st.sampled_from(APPROVAL_KEYS), words, min_size=1, max_size=6)


def with_notes(facts: Facts, notes: dict[str, str]) -> Facts:
    assert facts.node is not None
    return replace(facts, node=replace(facts.node, annotations={**facts.node.annotations, **notes}))


def without_notes(facts: Facts) -> Facts:
    assert facts.node is not None
    kept = {k: v for k, v in facts.node.annotations.items() if k not in APPROVAL_KEYS}
    return replace(facts, node=replace(facts.node, annotations=kept))


def recording(facts: Facts, request: ApprovalRequest | None) -> Facts:
    held = without_approval(facts.record, NODE)
    return replace(facts, record=with_approval(held, request) if request else held)


def incident_of(node: NodeFacts, fingerprint: str) -> Incident:
    return Incident.of(node, fingerprint)


def other_incident(draw: st.DrawFn, this: Incident) -> Incident:
    """An incident that differs from ``this`` in the node object or the outage."""
    if draw(st.booleans()):
        return replace(this, node_uid=this.node_uid + "-old")
    return replace(this, not_ready_since="2020-01-01T00:00:00Z")


def asking(case: Case, answer: str) -> Case:
    """``case`` under a rule that asks in Slack: with no answer yet (``none``), a valid
    approval of this node object (``approve``), or the case's own answer (``own``)."""
    event, facts, policy, approval = case
    rule = policy.rules[0].model_copy(update={"approval": "slack"})
    slack = policy.model_copy(update={"rules": [rule]})
    if answer == "none":
        approval = None
    elif answer == "approve" and facts.node is not None:
        approval = Approval(
            "alice", NOW - timedelta(seconds=60), ApprovalDecision.APPROVE, facts.node.uid, "fp-0"
        )
    return event, facts, slack, approval


answers = st.sampled_from(["none", "approve", "approve", "own"])


def fences(decision: Decision) -> bool:
    return any(isinstance(a, ClaimAction | FenceAction) for a in decision.actions)


@PROFILE
@given(cases, answers, forged_approval)
def test_s12_approval_words_on_the_node_never_change_a_decision(
    case: Case, answer: str, forged: dict[str, str]
) -> None:
    """Whatever a node writes under the approval keys (a rejection, a request, a message), every
    decision is exactly the one made without it: no refusal, no fence, no reason differs."""
    event, facts, policy, approval = asking(case, answer)
    if facts.node is None:
        return
    clean = without_notes(facts)
    assert all_decisions(event, with_notes(facts, forged), policy, approval) == all_decisions(
        event, clean, policy, approval
    )


@PROFILE
@given(cases, st.data())
def test_a_recorded_rejection_stops_a_fence_for_its_outage(case: Case, data: st.DataObject) -> None:
    """With the record's rejection for this outage of this node object, whichever alert (or
    the fallback) was asked about, no approval given with the event (a second approver, the old
    message's approve button) claims a slot or writes a taint."""
    event, facts, policy, approval = asking(case, data.draw(answers))
    node = facts.node
    if node is None or event.status is not AlertStatus.FIRING or event.node != NODE:
        return
    asked_for = data.draw(st.sampled_from([event.fingerprint, "fp-other", "fallback/worker-1/1"]))
    this = incident_of(node, asked_for)
    rejected = ApprovalRequest(
        NODE, this, rejection="rejected by bob at 2026-11-30T08:00:00Z", ts=data.draw(words)
    )
    decision = decide(event, recording(facts, rejected), policy, NOW, approval=approval)
    assert not fences(decision), decision
    # Other guards may refuse first (the flap window, say); the approval guard's own word, where
    # it refused, is the rejection's.
    refusals = [r for r in decision.reasons if r.guard == "approval" and not r.passed]
    if decision.verdict is Verdict.NOOP and refusals:
        assert any("rejected by bob" in r.message for r in refusals), decision


@PROFILE
@given(cases, st.data())
def test_a_request_for_another_incident_is_as_none(case: Case, data: st.DataObject) -> None:
    """A request or rejection about another node object or an earlier outage decides nothing:
    the decisions are those made with no request at all."""
    event, facts, policy, approval = asking(case, data.draw(answers))
    node = facts.node
    if node is None:
        return
    other = other_incident(data.draw, incident_of(node, event.fingerprint))
    request = ApprovalRequest(
        NODE,
        other,
        requested_at=NOW,
        expires_at=NOW,
        channel="C0NODEFENCE",
        ts="1700000000.000100",
        rejection=data.draw(st.sampled_from(["", "rejected by bob at 2026-11-30T08:00:00Z"])),
    )
    assert all_decisions(event, recording(facts, request), policy, approval) == all_decisions(
        event, recording(facts, None), policy, approval
    )


@PROFILE
@given(cases, answers, st.booleans())
def test_a_pending_request_changes_only_the_words(case: Case, answer: str, posted: bool) -> None:
    """The question being out (or being posted) never turns into an action or a refusal: the
    verdict and actions are those without it."""
    event, facts, policy, approval = asking(case, answer)
    node = facts.node
    if node is None:
        return
    request = ApprovalRequest(
        NODE,
        incident_of(node, event.fingerprint),
        requested_at=NOW,
        expires_at=NOW,
        claimed_by="replica-a/000000000000",
        channel="C0NODEFENCE" if posted else "",
        ts="1700000000.000100" if posted else "",
    )
    asked = all_decisions(event, recording(facts, request), policy, approval)
    plain = all_decisions(event, recording(facts, None), policy, approval)
    for with_request, without in zip(asked, plain, strict=True):
        assert (with_request.verdict, with_request.actions) == (without.verdict, without.actions)


def test_records_without_requests_compare_equal() -> None:
    """The helper above builds the record the engine reads: dropping a request leaves the rest."""
    held = FenceRecord(resource_version="4")
    request = ApprovalRequest(NODE, Incident("uid-a", "fp-0", ""))
    assert without_approval(with_approval(held, request), NODE) == held
