"""The replica that runs on a node never fences it: its power-off would stop it between the claim
and the taint, and the fence would wait for the claim to time out. A replica on another node
fences it at once, on the same facts."""

from __future__ import annotations

from dataclasses import replace

from engine_factories import NODE, NOW, event, facts, policy
from engine_strategies import NODE as DRAWN
from engine_strategies import Case, cases
from hypothesis import given
from hypothesis import strategies as st

from nodefence.engine.decide import decide
from nodefence.engine.guard_kinds import KINDS, OWN_NODE, EventType
from nodefence.engine.model import ClaimAction, FenceAction, PowerAction, Verdict


def test_the_replica_on_the_node_leaves_its_fence_to_another() -> None:
    on_it = decide(event(), replace(facts(), own_node=NODE), policy(), NOW)
    assert on_it.verdict is Verdict.NOOP
    assert not on_it.actions
    (held,) = [r for r in on_it.reasons if not r.passed]
    assert held.guard == OWN_NODE
    assert f"this replica runs on node {NODE}" in held.message
    assert KINDS[OWN_NODE].event is EventType.NORMAL

    elsewhere = decide(event(), replace(facts(), own_node="worker-2"), policy(), NOW)
    assert elsewhere.verdict is Verdict.FENCE
    assert any(r.guard == OWN_NODE and r.passed for r in elsewhere.reasons)


def test_a_replica_outside_the_cluster_judges_every_node() -> None:
    assert decide(event(), facts(), policy(), NOW).verdict is Verdict.FENCE


@given(cases, st.sampled_from([None, DRAWN, "elsewhere"]))
def test_no_claim_power_action_or_taint_from_the_replica_on_the_node(
    case: Case, own_node: str | None
) -> None:
    the_event, the_facts, the_policy, approval = case
    placed = replace(the_facts, own_node=own_node)
    decision = decide(the_event, placed, the_policy, NOW, approval=approval)
    if own_node == DRAWN and placed.node is not None:
        fencing = (ClaimAction, PowerAction, FenceAction)
        assert not [a for a in decision.actions if isinstance(a, fencing)], decision
    if own_node != DRAWN:
        # Anywhere else it changes nothing.
        unplaced = decide(the_event, the_facts, the_policy, NOW, approval=approval)
        assert decision.verdict is unplaced.verdict
        assert decision.actions == unplaced.actions
