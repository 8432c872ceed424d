"""``fencing.driver: annotation``: external fencing's proof is read from nodefence's namespace
and counts only when the API server stamped it after the node's last sign of life (S10, S11,
S12). Each test fails if the guard trusted the Node's own annotations, a proof without a server
stamp, or a proof older than the last renewal of the node's Lease."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from engine_factories import NOW, ago, event, facts, lease, node, policy
from hypothesis import given
from hypothesis import strategies as st

from nodefence.engine.decide import decide
from nodefence.engine.evidence import PowerEvidence
from nodefence.engine.model import Verdict

KEY = "nodefence.io/power-state"
RULE = {"fencing": {"driver": "annotation"}}
SOURCE = "ConfigMap nodefence/nodefence-power.worker-1"


def proof(state: str = "off", *, age: float | None = 60, value: str = "off") -> PowerEvidence:
    """A written proof the API server stamped ``age`` seconds ago (None: no stamp)."""
    at = None if age is None else ago(age)
    return PowerEvidence(state, SOURCE, f"{KEY}={value}", at=at)


def blocked(decision: object) -> list[str]:
    return [r.guard for r in decision.reasons if not r.passed]  # type: ignore[attr-defined]


def power_reason(decision: object) -> str:
    return next(r.message for r in decision.reasons if r.guard == "power-off")  # type: ignore[attr-defined]


def test_a_proof_written_after_the_last_renewal_fences() -> None:
    decision = decide(event(), facts(lease_age=900, power=proof(age=60)), policy(rule=RULE), NOW)
    assert decision.verdict is Verdict.FENCE
    assert SOURCE in power_reason(decision)
    assert "after the API server last saw the node renew" in power_reason(decision)


@pytest.mark.invariant("S12")
def test_the_nodes_own_annotation_is_not_proof() -> None:
    """S12: the node's credentials can write its annotations, so "off" there proves nothing."""
    forged = node(annotations={KEY: "off"})
    decision = decide(
        event(), facts(forged, power=proof("unknown", value="")), policy(rule=RULE), NOW
    )
    assert decision.verdict is Verdict.NOOP
    assert blocked(decision) == ["power-off"]
    assert "the Node's own annotation" in power_reason(decision)
    assert not decision.actions


def test_a_proof_older_than_the_last_renewal_is_stale() -> None:
    """An "off" left from an earlier incident, written before the kubelet last renewed its
    Lease: the machine has run since, so it proves nothing now."""
    decision = decide(event(), facts(lease_age=900, power=proof(age=901)), policy(rule=RULE), NOW)
    assert decision.verdict is Verdict.NOOP
    assert blocked(decision) == ["power-off"]
    assert "write it again" in power_reason(decision)


def test_a_proof_without_a_server_stamp_is_no_proof() -> None:
    decision = decide(event(), facts(power=proof(age=None)), policy(rule=RULE), NOW)
    assert decision.verdict is Verdict.NOOP
    assert "no time stamped by the API server" in power_reason(decision)


@pytest.mark.parametrize("state", ["on", "unknown"])
def test_anything_but_off_is_no_proof(state: str) -> None:
    decision = decide(event(), facts(power=proof(state, value=state)), policy(rule=RULE), NOW)
    assert decision.verdict is Verdict.NOOP
    assert blocked(decision) == ["power-off"]


def test_no_proof_read_is_no_proof() -> None:
    decision = decide(event(), facts(power=None), policy(rule=RULE), NOW)
    assert decision.verdict is Verdict.NOOP


def test_without_a_lease_the_proof_must_follow_the_last_status_write() -> None:
    rule = {**RULE, "fence_without_lease": True}
    silent = node()
    written_status = replace(silent, status_written=ago(300))
    before = decide(
        event(), facts(written_status, lease_age=None, power=proof(age=400)), policy(rule=rule), NOW
    )
    after = decide(
        event(), facts(written_status, lease_age=None, power=proof(age=200)), policy(rule=rule), NOW
    )
    unknown = decide(
        event(), facts(silent, lease_age=None, power=proof(age=200)), policy(rule=rule), NOW
    )
    assert (before.verdict, after.verdict, unknown.verdict) == (
        Verdict.NOOP,
        Verdict.FENCE,
        Verdict.NOOP,
    )


def test_the_record_keeps_where_the_proof_was_and_when_it_was_written() -> None:
    decision = decide(event(), facts(power=proof(age=60)), policy(rule=RULE), NOW)
    claim = decision.actions[0]
    kept = getattr(claim, "proof", "") or getattr(getattr(claim, "entry", None), "proof", "")
    assert SOURCE in kept
    assert "2026-11-30T08:19:00Z" in kept


@given(
    own=st.dictionaries(
        st.sampled_from([KEY, "other.io/power"]), st.sampled_from(["off", "true", "on", ""])
    ),
    renewed=st.integers(min_value=301, max_value=7200),
    written=st.one_of(st.none(), st.integers(min_value=0, max_value=7200)),
    state=st.sampled_from(["off", "on", "unknown"]),
)
def test_no_fence_without_a_written_proof_newer_than_the_last_renewal(
    own: dict[str, str], renewed: int, written: int | None, state: str
) -> None:
    """Whatever the node writes on itself, a fence happens exactly when the proof in
    nodefence's namespace says off and was stamped after the Lease's last renewal (every other
    guard passes: the Lease has been silent longer than the 5 minutes NotReady required)."""
    evidence = None if written is None else proof(state, age=written, value=state)
    the_facts = facts(node(annotations=own), lease_=lease(renewed), power=evidence)
    decision = decide(event(), the_facts, policy(rule=RULE), NOW)
    fresh = (
        evidence is not None
        and state == "off"
        and evidence.at is not None
        and evidence.at > NOW - timedelta(seconds=renewed)
    )
    assert (decision.verdict is Verdict.FENCE) == fresh
    if not fresh:
        assert not decision.actions
