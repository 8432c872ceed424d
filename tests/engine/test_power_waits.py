"""Waits that know the evidence (``engine.power_waits``): a read-only reading of Off from the
node's own machine ends the NotReady minimum and the fallback's wait for an alert, and nothing
else; a reading of On keeps them; the reading is never the fence's proof."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest
from engine_factories import NOW, ago, event, facts, node, policy
from hypothesis import given
from hypothesis import strategies as st

from nodefence.engine import fallback
from nodefence.engine.decide import decide
from nodefence.engine.evidence import PowerEvidence
from nodefence.engine.guard_kinds import ALERT_WAIT, LEASE, NOT_READY_DURATION, READY, ended_by_off
from nodefence.engine.identity import MachineBinding, Reported
from nodefence.engine.model import (
    AlertEvent,
    ClaimAction,
    Decision,
    Facts,
    FenceAction,
    PowerAction,
    Verdict,
)

MACHINE = "4c4c4544-0042-3010-8050-b7c04f4e3332"
OTHER_MACHINE = "0b1a2c3d-0000-4000-8000-000000000001"
SOURCE = "redfish https://bmc-1.example/redfish/v1/Systems/1"
REDFISH = {"driver": "redfish", "action": "off"}
RULE = {"min_not_ready_seconds": 300, "lease_staleness_seconds": 50, "fencing": REDFISH}


def redfish(**rule: Any) -> Any:
    return policy(rule={**RULE, **rule}, cluster={"storm_cooldown_seconds": 0})


def reading(state: str, machine: str = MACHINE, *, at: float = 1) -> PowerEvidence:
    raw = {"off": "Off", "on": "On"}.get(state, "")
    return PowerEvidence(
        state, SOURCE, at=ago(at), identity=Reported(machine, SOURCE), raw_state=raw
    )


def down(
    not_ready_for: float = 60, *, lease_age: float = 110, early: PowerEvidence | None = None
) -> Facts:
    """A node NotReady for ``not_ready_for`` seconds whose Lease the API server last saw renewed
    ``lease_age`` seconds ago, its inventory entry expecting MACHINE."""
    the_node = dataclasses.replace(node(since=not_ready_for), system_uuid=MACHINE)
    binding = MachineBinding(node=the_node.name, target=SOURCE, driver="redfish", expected=MACHINE)
    return dataclasses.replace(
        facts(the_node, lease_age=lease_age), machine=binding, early_power=early
    )


def reason(decision: Decision, guard: str) -> Any:
    return next(r for r in decision.reasons if r.guard == guard)


def test_a_wait_the_machine_can_end_asks_for_a_reading() -> None:
    decision = decide(event(), down(), redfish(), NOW)
    assert decision.verdict is Verdict.NOOP
    assert not decision.actions
    assert decision.needs_power_reading
    assert {r.guard for r in decision.reasons if not r.passed} == {NOT_READY_DURATION}


def test_off_from_this_machine_ends_the_minimum_and_the_power_step_still_proves_it() -> None:
    decision = decide(event(), down(early=reading("off")), redfish(), NOW)
    assert decision.verdict is Verdict.FENCE
    waived = reason(decision, NOT_READY_DURATION)
    assert waived.passed
    assert "minimum is waived" in waived.message
    assert "machine Off (read-only" in waived.message
    # Never the proof: the claim and the power step come first, and no taint yet.
    assert [type(a) for a in decision.actions] == [ClaimAction, PowerAction]
    assert not decision.needs_power_reading


def test_on_keeps_the_minimum_and_says_why() -> None:
    decision = decide(event(), down(early=reading("on")), redfish(), NOW)
    assert decision.verdict is Verdict.NOOP
    assert not decision.needs_power_reading
    kept = reason(decision, NOT_READY_DURATION)
    assert not kept.passed
    assert "machine On: a hang, a partition or a kubelet that stopped" in kept.message
    assert kept.until == ago(60) + timedelta(seconds=300)
    assert decision.not_before == kept.until


def test_off_from_another_machine_or_without_a_state_keeps_the_minimum() -> None:
    other = decide(event(), down(early=reading("off", OTHER_MACHINE)), redfish(), NOW)
    assert other.verdict is Verdict.NOOP
    assert not reason(other, NOT_READY_DURATION).passed
    assert "but" in reason(other, NOT_READY_DURATION).message
    unknown = PowerEvidence("unknown", SOURCE, "HTTP 503 from the BMC", at=ago(1))
    silent = decide(event(), down(early=unknown), redfish(), NOW)
    assert (
        "gave no power state (HTTP 503 from the BMC)" in reason(silent, NOT_READY_DURATION).message
    )


def test_the_setting_off_or_a_driver_without_power_reads_nothing() -> None:
    off = decide(event(), down(early=None), redfish(power_off_ends_wait=False), NOW)
    assert not off.needs_power_reading
    ignored = decide(event(), down(early=reading("off")), redfish(power_off_ends_wait=False), NOW)
    assert ignored.verdict is Verdict.NOOP
    inference = decide(event(), down(), policy(rule={"min_not_ready_seconds": 300}), NOW)
    assert not inference.needs_power_reading


def test_a_lease_still_renewed_is_never_waived_and_asks_for_nothing() -> None:
    renewing = decide(event(), down(lease_age=5), redfish(), NOW)
    assert not renewing.needs_power_reading
    held = decide(event(), down(lease_age=5, early=reading("off")), redfish(), NOW)
    assert held.verdict is Verdict.NOOP
    assert not reason(held, LEASE).passed


def fallback_event(since: float) -> AlertEvent:
    made = fallback.event("worker-1", ago(since), fallback.holds_none())
    return dataclasses.replace(made, node="worker-1")


def test_the_fallback_waits_for_an_alert_unless_the_machine_reads_off() -> None:
    shipped = {"storm_cooldown_seconds": 0, "fallback_after_seconds": 300}
    the_policy = policy(rule={**RULE, "min_not_ready_seconds": 0}, cluster=shipped)
    waiting = decide(fallback_event(60), down(60), the_policy, NOW)
    assert waiting.verdict is Verdict.NOOP
    wait = reason(waiting, ALERT_WAIT)
    assert not wait.passed
    assert wait.until == ago(60) + timedelta(seconds=300)
    assert waiting.needs_power_reading
    off = decide(fallback_event(60), down(60, early=reading("off")), the_policy, NOW)
    assert off.verdict is Verdict.FENCE
    assert "no longer" in reason(off, ALERT_WAIT).message
    past = decide(fallback_event(400), down(400), the_policy, NOW)
    assert reason(past, ALERT_WAIT).passed


def test_an_alert_is_no_fallback_and_has_no_alert_wait() -> None:
    decision = decide(event(), down(early=reading("off")), redfish(), NOW)
    assert not [r for r in decision.reasons if r.guard == ALERT_WAIT]


readings = st.one_of(
    st.none(),
    st.builds(
        reading,
        st.sampled_from(["off", "on", "unknown"]),
        st.sampled_from([MACHINE, OTHER_MACHINE, ""]),
    ),
)


@pytest.mark.invariant("S1", "S2", "S10")
@given(
    ready=st.sampled_from(["True", "False", "Unknown"]),
    not_ready_for=st.integers(0, 900),
    lease_age=st.integers(0, 900),
    early=readings,
    minimum=st.integers(0, 900),
    window=st.integers(1, 300),
    fallback_since=st.one_of(st.none(), st.integers(0, 900)),
    after=st.integers(0, 900),
    ends_wait=st.booleans(),
)
def test_an_early_reading_never_lifts_s1_s2_or_stands_as_proof(
    *,
    ready: str,
    not_ready_for: int,
    lease_age: int,
    early: PowerEvidence | None,
    minimum: int,
    window: int,
    fallback_since: int | None,
    after: int,
    ends_wait: bool,
) -> None:
    the_policy = policy(
        rule={
            **RULE,
            "min_not_ready_seconds": minimum,
            "lease_staleness_seconds": window,
            "power_off_ends_wait": ends_wait,
        },
        cluster={"storm_cooldown_seconds": 0, "fallback_after_seconds": after},
    )
    the_facts = down(not_ready_for, lease_age=lease_age, early=early)
    the_facts = dataclasses.replace(
        the_facts,
        node=dataclasses.replace(node(ready=ready, since=not_ready_for), system_uuid=MACHINE),
    )
    the_event = fallback_event(fallback_since) if fallback_since is not None else event()
    decision = decide(the_event, the_facts, the_policy, NOW)
    acts = [a for a in decision.actions if isinstance(a, ClaimAction | PowerAction | FenceAction)]
    if acts:
        # S1, S2: a live node is never fenced, whatever its machine reads.
        assert ready != "True"
        assert lease_age >= window
        assert reason(decision, READY).passed
    # S10: no taint without the power step's proof (facts.power), never on the early reading.
    assert not [a for a in decision.actions if isinstance(a, FenceAction)]
    if decision.needs_power_reading:
        blocking = {r.guard for r in decision.reasons if not r.passed}
        assert all(ended_by_off(g) for g in blocking)
        assert early is None
        assert ends_wait
    waited = [r for r in decision.reasons if ended_by_off(r.guard) and r.passed]
    for passed in waited:
        if "waived" in passed.message or "no longer" in passed.message:
            assert ends_wait
            assert early is not None
            assert early.state == "off"
            assert early.identity is not None
            assert early.identity.value == MACHINE
