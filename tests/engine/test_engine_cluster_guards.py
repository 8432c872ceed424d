"""Cluster-level guards: storm cooldown, cluster-wide pause, proof of power-off, and a rejection
recorded in the fence record. Each test fails if its guard is removed."""

from __future__ import annotations

from dataclasses import replace

import pytest
from engine_factories import NODE, NOW, UID, ago, cluster, event, facts, node, policy

from nodefence.engine import mirror
from nodefence.engine.approval_request import ApprovalRequest, Incident
from nodefence.engine.decide import decide
from nodefence.engine.evidence import PowerEvidence
from nodefence.engine.model import PREFIX, Approval, ApprovalDecision, Verdict
from nodefence.engine.record import FenceRecord


def blocked_by(decision_reasons: tuple[object, ...]) -> list[str]:
    return [r.guard for r in decision_reasons if not r.passed]  # type: ignore[attr-defined]


def test_storm_cooldown_refuses_while_a_storm_just_ended() -> None:
    # One node NotReady, three that came back two minutes ago: a storm of 4 of 5 just ended.
    recovered = (ago(120), ago(120), ago(120), ago(86400))
    decision = decide(event(), facts(cluster_=cluster(ready_since=recovered)), policy(), NOW)
    assert decision.verdict is Verdict.NOOP
    assert "storm-cooldown" in blocked_by(decision.reasons)


def test_storm_cooldown_passes_once_calm_for_the_window() -> None:
    recovered = (ago(1200), ago(1200), ago(1200), ago(86400))
    decision = decide(event(), facts(cluster_=cluster(ready_since=recovered)), policy(), NOW)
    assert decision.verdict is Verdict.FENCE


def test_storm_cooldown_can_be_switched_off() -> None:
    recovered = (ago(120), ago(120), ago(120), ago(86400))
    the_policy = policy(cluster={"storm_cooldown_seconds": 0})
    decision = decide(event(), facts(cluster_=cluster(ready_since=recovered)), the_policy, NOW)
    assert decision.verdict is Verdict.FENCE


def test_cluster_wide_pause_skips_with_its_reason() -> None:
    paused = cluster(paused_reason="ConfigMap nodefence/nodefence-control (maintenance)")
    decision = decide(event(), facts(cluster_=paused), policy(), NOW)
    assert decision.verdict is Verdict.SKIP
    assert "maintenance" in decision.summary
    assert not decision.actions


@pytest.mark.parametrize(
    ("evidence", "verdict"),
    [
        (PowerEvidence("off", "bmc"), Verdict.FENCE),
        (PowerEvidence("on", "bmc"), Verdict.NOOP),
        (PowerEvidence("unknown", "bmc", "no answer within 5s"), Verdict.NOOP),
        (None, Verdict.NOOP),
    ],
)
def test_power_off_proof_by_http_endpoint(evidence: PowerEvidence | None, verdict: Verdict) -> None:
    rule = {"fencing": {"driver": "http", "url": "http://bmc.example/power/{node}"}}
    the_facts = replace(facts(), power=evidence)
    decision = decide(event(), the_facts, policy(rule=rule), NOW)
    assert decision.verdict is verdict


def test_http_proof_needs_a_url() -> None:
    with pytest.raises(Exception, match="url"):
        policy(rule={"fencing": {"driver": "http"}})


def test_recorded_rejection_holds_for_the_outage_only() -> None:
    """The rejection the fence record holds, for this node object and outage, whichever alert
    (or the fallback) asked."""
    incident = Incident.of(node(), "fp-1")
    answer = "rejected by U123 at 2026-11-30T08:00:00Z"
    held = FenceRecord(
        resource_version="3", approvals=(ApprovalRequest(NODE, incident, rejection=answer),)
    )
    slack = policy(rule={"approval": "slack"})
    rejected = decide(event(), facts(record_=held), slack, NOW)
    assert rejected.verdict is Verdict.NOOP
    assert "rejected by U123" in rejected.summary
    another_alert = decide(event(fingerprint="fp-2"), facts(record_=held), slack, NOW)
    assert another_alert.verdict is Verdict.NOOP
    assert "rejected by U123" in another_alert.summary
    new_node = decide(event(), facts(node(uid="other"), record_=held), slack, NOW)
    assert new_node.verdict is Verdict.AWAIT_APPROVAL
    new_outage = decide(event(), facts(node(since=600), record_=held), slack, NOW)
    assert new_outage.verdict is Verdict.AWAIT_APPROVAL


@pytest.mark.invariant("S12")
def test_a_rejection_on_the_node_is_not_honoured() -> None:
    """S12: a node can write its annotations, so a rejection there is only words."""
    notes = {
        mirror.APPROVAL: "rejected by U123 at 2026-11-30T08:00:00Z",
        PREFIX + "approval-node-uid": UID,
        PREFIX + "approval-fingerprint": "fp-1",
    }
    slack = policy(rule={"approval": "slack"})
    waiting = decide(event(), facts(node(annotations=notes)), slack, NOW)
    assert waiting.verdict is Verdict.AWAIT_APPROVAL
    approved = Approval("U0ONCALL", ago(30), ApprovalDecision.APPROVE, UID, "fp-1")
    fenced = decide(event(), facts(node(annotations=notes)), slack, NOW, approval=approved)
    assert fenced.verdict is Verdict.FENCE
