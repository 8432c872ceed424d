"""``engine.release``: an operator's release decided like any other change. Whatever the node
and the record say, a release takes off only a taint the fence record and the API server's
record of the write show nodefence applied (S4), writes only the node object the entry is of
(S9), never acts on the node's own annotations (S12), and a node still NotReady loses its
taint only when the operator confirmed."""

from __future__ import annotations

from dataclasses import replace

import pytest
from engine_factories import NODE, NOW, UID, entry, facts, node, our_taint, policy, record
from engine_strategies import PROFILE, all_facts
from hypothesis import given
from hypothesis import strategies as st

from nodefence.engine import mirror
from nodefence.engine import release as engine_release
from nodefence.engine.authorship import taint_authorship
from nodefence.engine.model import (
    EXCLUDE_LABEL,
    OUT_OF_SERVICE_KEY,
    PREFIX,
    Decision,
    Facts,
    ReleaseFenceAction,
    Taint,
    Verdict,
)
from nodefence.engine.record import Phase

POLICY = policy(rule={"flap_window_seconds": 1800})


def _decide(facts_: Facts, *, confirmed: bool = True) -> Decision:
    asked = engine_release.ReleaseRequest(NODE, "released by alice: done", confirmed, "nodefence")
    return engine_release.decide_release(facts_, asked, POLICY, NOW)


def _action(decision: Decision) -> ReleaseFenceAction | None:
    found = [a for a in decision.actions if isinstance(a, ReleaseFenceAction)]
    assert len(found) == len(decision.actions) <= 1
    return found[0] if found else None


@pytest.mark.invariant("S4", "S12")
@PROFILE
@given(all_facts(), st.booleans())
def test_only_the_taint_nodefence_wrote_is_ever_taken_off(facts_: Facts, confirmed: bool) -> None:
    """S4, S12: an action only on a record entry; a taint only where the record and the API
    server's record of the write show nodefence's; a refusal writes nothing."""
    decision = _decide(facts_, confirmed=confirmed)
    action = _action(decision)
    blocked = [r for r in decision.reasons if not r.passed]
    assert (action is None) == bool(blocked)
    if action is None:
        assert decision.verdict is Verdict.SKIP
        return
    held = facts_.record.entry(NODE)
    assert held is not None
    assert held.uid == action.node_uid
    if action.effect:
        assert facts_.node is not None
        assert action.same_node
        assert action.effect == held.effect
        taint = engine_release.lookalike(facts_.node, held)
        assert taint is not None
        assert taint_authorship(replace(facts_.node, taints=(taint,)), held).ours
    for key in action.remove_annotations:
        assert key.startswith(PREFIX)
        assert key != EXCLUDE_LABEL


@pytest.mark.invariant("S9")
@PROFILE
@given(all_facts(), st.booleans())
def test_another_node_object_is_never_written(facts_: Facts, confirmed: bool) -> None:
    """S9: an entry of a node object that is gone releases the entry, and nothing on the node
    of that name now."""
    action = _action(_decide(facts_, confirmed=confirmed))
    if action is None:
        return
    if facts_.node is None or facts_.node.uid != action.node_uid:
        assert not action.same_node
        assert not action.touches_node
    else:
        assert action.resource_version == facts_.node.resource_version


@PROFILE
@given(all_facts())
def test_a_node_still_not_ready_loses_its_taint_only_when_confirmed(facts_: Facts) -> None:
    unconfirmed = _action(_decide(facts_, confirmed=False))
    confirmed = _action(_decide(facts_, confirmed=True))
    if unconfirmed is not None:
        assert not unconfirmed.not_ready
        assert unconfirmed == confirmed
    if confirmed is not None and confirmed.not_ready:
        assert unconfirmed is None
        assert facts_.node is not None
        assert confirmed.effect


def test_a_recovered_node_is_released_with_its_mirror() -> None:
    notes = {mirror.FENCED_BY: mirror.FENCED_BY_VALUE, EXCLUDE_LABEL: "true", "x/y": "z"}
    the_node = node(ready="True", taints=(our_taint(),), annotations=notes)

    decision = _decide(facts(the_node, held=entry()), confirmed=False)

    action = _action(decision)
    assert action is not None
    assert action.effect == "NoExecute"
    assert action.remove_annotations == (mirror.FENCED_BY,)
    assert decision.verdict is Verdict.UNFENCE
    assert decision.summary == (
        "released by alice: done. nodefence let go of its fence: out-of-service taint "
        "(nodeshutdown:NoExecute), 1 nodefence.io/ annotation(s), fence record entry removed"
    )


def test_a_node_still_not_ready_says_what_releasing_it_means() -> None:
    the_node = node(ready="Unknown", taints=(our_taint(),))

    decision = _decide(facts(the_node, held=entry()), confirmed=False)

    assert decision.actions == ()
    blocking = [r for r in decision.reasons if not r.passed]
    assert [r.guard for r in blocking] == [engine_release.CONFIRMED]
    assert "still NotReady (Ready is Unknown" in blocking[0].message
    assert "30m" in blocking[0].message
    confirmed = _action(_decide(facts(the_node, held=entry())))
    assert confirmed is not None
    assert confirmed.not_ready == blocking[0].message
    assert "released with --yes" in _decide(facts(the_node, held=entry())).summary


def _refusal(facts_: Facts) -> tuple[str, str]:
    decision = _decide(facts_)
    blocking = [r for r in decision.reasons if not r.passed]
    assert decision.actions == ()
    assert len(blocking) == 1
    return blocking[0].guard, blocking[0].message


def test_each_refusal_names_its_guard() -> None:
    admins = Taint(OUT_OF_SERVICE_KEY, "NoExecute", "nodeshutdown")
    changed = Taint(OUT_OF_SERVICE_KEY, "NoExecute", "manual")
    relooked = replace(our_taint(), time_added=None)
    recorded = replace(entry(), taint_added=NOW)
    cases = [
        (facts(node(taints=(admins,))), engine_release.HELD, "was not applied by nodefence"),
        (
            facts(node(taints=(admins,), annotations={mirror.FENCED_BY: "nodefence"})),
            engine_release.HELD,
            "nothing proves the taint is nodefence's",
        ),
        (facts(node()), engine_release.HELD, "nodefence holds no fence of node"),
        (
            facts(node(), record_=record(unreadable=("fence." + NODE,))),
            engine_release.HELD,
            "cannot be read",
        ),
        (
            facts(node(), held=entry(phase=Phase.CLAIMED)),
            engine_release.NOT_BEING_WRITTEN,
            "is being written",
        ),
        (
            facts(node(taints=(changed,)), held=entry()),
            engine_release.TAINT_UNCHANGED,
            "someone changed it",
        ),
        (
            facts(node(taints=(relooked,)), held=recorded),
            engine_release.OWN_TAINT,
            "looks like the one nodefence applied but is not",
        ),
    ]
    for facts_, guard, says in cases:
        found, message = _refusal(facts_)
        assert (found, says in message) == (guard, True), message


def test_the_entry_of_a_node_object_that_is_gone_is_dropped_alone() -> None:
    recreated = node(uid="uid-2", taints=(our_taint(),))

    action = _action(_decide(facts(recreated, held=entry(uid=UID))))

    assert action is not None
    assert (action.same_node, action.touches_node, action.node_uid) == (False, False, UID)
    assert action.notes[0].startswith(f"node {NODE} was re-created (UID uid-2")
