"""S10 for ``fencing.driver: fence-agent``, as properties of the pure engine: whatever the agent
reported (On, Off, unknown, with or without an action sent), whatever the inventory says of the
machine and whatever is in the fence record, a taint follows only a reading of Off, the power
step is always the rule's own driver, and a power-off already sent is never sent again."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from engine_factories import CLAIM_TOKEN, NODE, NOW, ago, entry, event, facts, node, record
from engine_strategies import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodefence.engine.decide import decide
from nodefence.engine.evidence import PowerEvidence
from nodefence.engine.identity import PLUG, MachineBinding, Reported
from nodefence.engine.model import Facts, FenceAction, PowerAction, Verdict
from nodefence.engine.record import Phase
from nodefence.policy import Policy, parse_policy

pytestmark = pytest.mark.invariant("S10")

SOURCE = "fence-agent fence_openstack plug=5f0c"
PROFILE = settings(
    max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def fence_agent_policy(action: str, timeout: float = 30) -> Policy:
    rule: dict[str, Any] = {
        "name": "default",
        "min_not_ready_seconds": 60,
        "lease_staleness_seconds": 60,
        "fencing": {"driver": "fence-agent", "action": action, "timeout_seconds": timeout},
    }
    return parse_policy({"rules": [rule]}, "<generated>")


evidence = st.one_of(
    st.none(),
    st.builds(
        PowerEvidence,
        state=st.sampled_from(["on", "off", "unknown"]),
        source=st.just(SOURCE),
        detail=st.sampled_from(["", "status exited 7", "Success: Powered OFF"]),
        at=st.sampled_from([None, ago(5)]),
        action_sent=st.booleans(),
        identity=st.one_of(
            st.none(),
            st.builds(
                Reported,
                value=st.sampled_from(["5f0c", "other-vm", ""]),
                source=st.just(SOURCE),
                basis=st.just(PLUG),
                agent=st.just("fence_openstack"),
            ),
        ),
        reset_sent=st.booleans(),
    ),
)

bindings = st.one_of(
    st.none(),
    st.builds(
        MachineBinding,
        node=st.just(NODE),
        target=st.just(SOURCE),
        driver=st.just("fence-agent"),
        expected=st.sampled_from(["", "5f0c", "other-vm"]),
        unchecked=st.booleans(),
        shared_with=st.sampled_from([(), ("worker-2",)]),
    ),
)


@st.composite
def pending_claims(draw: st.DrawFn) -> Any:
    if draw(st.booleans()):
        return None
    claimed = entry(phase=Phase.CLAIMED, claimed=draw(st.sampled_from([5, 60, 3600])))
    sent = draw(st.sampled_from([None, ago(3)]))
    return dataclasses.replace(claimed, power_off_sent_at=sent)


@st.composite
def cases(draw: st.DrawFn) -> tuple[Facts, Policy, str]:
    pending = draw(pending_claims())
    the_facts = facts(
        node(ready=draw(st.sampled_from(["Unknown", "False", "True"]))),
        lease_age=draw(st.sampled_from([900, 10, None])),
        record_=record(pending) if pending is not None else record(),
        power=draw(evidence),
    )
    the_facts = dataclasses.replace(the_facts, machine=draw(bindings))
    policy = fence_agent_policy(draw(st.sampled_from(["verify", "off", "reboot"])))
    own = draw(st.sampled_from(["", CLAIM_TOKEN]))
    return the_facts, policy, own


@PROFILE
@given(cases())
def test_a_fence_agent_taint_follows_only_a_reading_of_off(case: tuple[Facts, Policy, str]) -> None:
    the_facts, policy, own = case
    decision = decide(event(), the_facts, policy, NOW, own_claim=own)
    if any(isinstance(a, FenceAction) for a in decision.actions):
        assert decision.verdict is Verdict.FENCE
        assert the_facts.power is not None
        assert the_facts.power.state == "off"
        assert the_facts.machine is not None
        # The agent's word about its own off action is never the proof.
        assert the_facts.power.source == SOURCE


@PROFILE
@given(cases())
def test_the_power_step_is_the_rules_driver_and_an_off_goes_out_once(
    case: tuple[Facts, Policy, str],
) -> None:
    the_facts, policy, own = case
    decision = decide(event(), the_facts, policy, NOW, own_claim=own)
    steps = [a for a in decision.actions if isinstance(a, PowerAction)]
    for step in steps:
        assert step.driver == "fence-agent"
        # Never the agent's own reboot: an off (or a read), and an on only after the fence.
        assert step.operation in ("off", "status", "on")
        assert step.operation != "on" or any(
            e.phase is Phase.FENCED for e in the_facts.record.entries
        )
    pending = the_facts.record.entry(NODE)
    if pending is not None and pending.power_off_sent_at is not None:
        assert not any(s.operation == "off" and s.send for s in steps)
    if policy.rules[0].fencing is not None and policy.rules[0].fencing.action == "verify":
        assert not any(s.send for s in steps)


@PROFILE
@given(cases())
def test_no_reading_no_taint_and_no_action_on_a_node_showing_life(
    case: tuple[Facts, Policy, str],
) -> None:
    the_facts, policy, own = case
    decision = decide(event(), the_facts, policy, NOW, own_claim=own)
    node_facts = the_facts.node
    assert node_facts is not None
    if node_facts.ready is not None and node_facts.ready.status == "True":
        assert not any(isinstance(a, FenceAction) for a in decision.actions)
        assert not any(
            isinstance(a, PowerAction) and a.operation == "off" and a.send for a in decision.actions
        )
    if the_facts.power is None:
        assert not any(isinstance(a, FenceAction) for a in decision.actions)


def test_the_properties_are_not_vacuous_an_off_reading_fences() -> None:
    """The same facts the properties range over do reach a fence: a dead node, its claim, its
    agent's status read Off."""
    claimed = dataclasses.replace(entry(phase=Phase.CLAIMED, claimed=5), power_off_sent_at=ago(3))
    binding = MachineBinding(NODE, SOURCE, "fence-agent", unchecked=True)
    off = PowerEvidence("off", SOURCE, at=ago(1), action_sent=True, reset_sent=True)
    the_facts = dataclasses.replace(facts(record_=record(claimed), power=off), machine=binding)
    decision = decide(event(), the_facts, fence_agent_policy("off"), NOW, own_claim=CLAIM_TOKEN)
    assert decision.verdict is Verdict.FENCE, decision.summary
    assert any(isinstance(a, FenceAction) for a in decision.actions)
    unknown = dataclasses.replace(off, state="unknown", detail="Success: Powered OFF")
    refused = decide(
        event(),
        dataclasses.replace(the_facts, power=unknown),
        fence_agent_policy("off"),
        NOW,
        own_claim=CLAIM_TOKEN,
    )
    assert refused.verdict is not Verdict.FENCE
