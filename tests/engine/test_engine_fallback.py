"""The fallback's pure parts: which NotReady nodes are due, how a rule matches a node no alert
named, and what a decision made without an alert says. (The safety properties in
``test_engine_properties.py`` draw fallback events too.)"""

from __future__ import annotations

from datetime import timedelta

from engine_factories import NOW, ago, facts, node, policy
from engine_strategies import fallback_event
from hypothesis import given
from hypothesis import strategies as st

from nodefence.engine import fallback
from nodefence.engine.alerts import match_rule
from nodefence.engine.decide import decide
from nodefence.engine.guard_kinds import NO_ALERT
from nodefence.engine.model import ClaimAction, FenceAction, Verdict


def test_due_nodes_are_past_the_window_oldest_first_and_never_guessed() -> None:
    not_ready = {
        "a": ago(400),
        "b": ago(1200),
        "c": ago(421),
        "unknown": None,
        "skipped": ago(5000),
    }
    due = fallback.due(not_ready, NOW, 420, skip={"skipped"})
    assert [name for name, _ in due] == ["b", "c"]
    assert fallback.due(not_ready, NOW, 0) == []


@given(
    st.dictionaries(
        st.sampled_from(["n1", "n2", "n3", "n4"]),
        st.one_of(st.none(), st.integers(-600, 3600)),
    ),
    st.integers(1, 3600),
)
def test_due_is_exactly_the_nodes_down_for_the_window(
    ages: dict[str, int | None], after: int
) -> None:
    not_ready = {name: None if age is None else ago(age) for name, age in ages.items()}
    due = dict(fallback.due(not_ready, NOW, after))
    expected = {name for name, age in ages.items() if age is not None and age >= after}
    assert set(due) == expected
    assert all(NOW - since >= timedelta(seconds=after) for since in due.values())


def test_a_fallback_fences_on_every_guard_and_says_no_alert_arrived() -> None:
    decision = decide(fallback_event("fp-0"), facts(node(since=1200)), policy(), NOW)
    assert decision.verdict is Verdict.FENCE
    assert decision.reasons[0].guard == NO_ALERT
    assert decision.reasons[0].message.startswith("no alert arrived: ")
    claim = next(a for a in decision.actions if isinstance(a, ClaimAction))
    assert claim.entry.alertname == fallback.ALERTNAME
    assert any(isinstance(a, FenceAction) for a in decision.actions)


def test_a_fallback_never_fences_a_ready_node_or_one_with_a_live_lease() -> None:
    ready = decide(fallback_event("fp-0"), facts(node(ready="True")), policy(), NOW)
    assert ready.verdict is Verdict.NOOP
    assert not ready.actions
    live = decide(fallback_event("fp-0"), facts(node(), lease_age=5), policy(), NOW)
    assert live.verdict is Verdict.NOOP
    assert not live.actions


def test_rules_match_a_fallback_by_node_labels_alone() -> None:
    rules = policy(
        rules=[
            {"name": "paged", "match": {"alert_labels": {"severity": "critical"}}},
            {"name": "named", "match": {"alertnames": ["KubeNodeUnreachable"]}},
            {"name": "workers", "match": {"node_selector": "role=worker"}},
        ]
    )
    worker = node(labels={"role": "worker"})
    other = node(labels={"role": "db"})
    event = fallback_event("fp-0")
    # Neither the alert's labels nor its name can be known without an alert: a rule written
    # for a particular alert (a driver: none rule meant for one of them) never matches.
    chosen = match_rule(rules, event, worker)
    assert chosen is not None
    assert chosen.name == "workers"
    assert match_rule(rules, event, other) is None
    only_labels = policy(
        rules=[
            {"name": "paged", "match": {"alert_labels": {"severity": "critical"}}},
            {"name": "workers", "match": {"node_selector": "role=worker"}},
        ]
    )
    matched = match_rule(only_labels, event, worker)
    assert matched is not None
    assert matched.name == "workers"
    assert match_rule(only_labels, event, other) is None
    skipped = decide(event, facts(other), only_labels, NOW)
    assert skipped.verdict is Verdict.SKIP
    assert skipped.reasons[0].guard == NO_ALERT


def test_the_reason_names_why_and_holds_no_running_duration() -> None:
    since = ago(1200)
    first = fallback.event("n1", since, fallback.holds_none()).fallback
    again = fallback.event("n1", since, fallback.holds_none()).fallback
    assert first == again
    assert "Alertmanager holds no alert for it" in first
    assert "NotReady since 2026-11-30T08:00:00Z" in first
    down = fallback.unreachable(ago(60), "Alertmanager at http://am/api/v2/alerts unreachable")
    assert "unreachable since " in fallback.event("n1", since, down).fallback
    assert "NODEFENCE_ALERTMANAGER_URL" in fallback.not_configured().text
