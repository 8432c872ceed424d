"""Property tests for refusals on cached facts (``engine.cached``), over any cache staleness.

The cache (the node as the watch-fed index saw it, a shared fence record read, the cluster
counts) may be arbitrarily far from the live cluster: it is generated independently of the live
facts. Whatever it says:
- no decision that stands on it has an action (nothing is ever claimed, powered, tainted,
  purged or unfenced on a cached fact), and it refuses only on guards the cache can show;
- what the shell does is either that refusal or the live decision, never more than the live
  decision's actions;
- a cache that is current refuses only what the live facts refuse too (it can delay a fence
  only by being stale, never by judging what it did not read).
"""

from __future__ import annotations

import dataclasses

from engine_factories import NOW
from engine_strategies import PROFILE, all_facts, approvals, events, policies
from hypothesis import given, settings
from hypothesis import strategies as st

from nodefence.engine.cached import CACHED, Source, refusal_on_cache
from nodefence.engine.decide import decide
from nodefence.engine.guard_kinds import KINDS, Cache
from nodefence.engine.model import PREFIX, AlertEvent, Approval, Decision, Facts, Verdict
from nodefence.policy import Policy

TOKEN = "replica-a/0123456789ab"
ages = st.floats(min_value=0.0, max_value=3600.0, allow_nan=False)

CACHEABLE = {name for name, kind in KINDS.items() if kind.cache is Cache.REFUSES}
NOT_READ = {name for name, kind in KINDS.items() if kind.cache is Cache.UNREAD}


def cached_view(live: Facts) -> Facts:
    """What the cache holds of ``live``: no Lease, no pods, no power reading, no machine, and of
    the node's annotations only nodefence's own (``kube.cached_facts.slim``)."""
    node = live.node
    if node is not None:
        kept = {k: v for k, v in node.annotations.items() if k.startswith(PREFIX)}
        node = dataclasses.replace(node, annotations=kept)
    return Facts(
        node=node, lease=None, pods=(), cluster=live.cluster, record=live.record, clock=live.clock
    )


def sources(node_age: float, record_age: float) -> tuple[Source, ...]:
    return (
        Source("node worker-1", "the watch-fed node index", node_age),
        Source("the fence record", "a read shared by concurrent requests", record_age),
    )


def decided(event: AlertEvent, facts: Facts, policy: Policy, approval: Approval | None) -> Decision:
    return decide(event, facts, policy, NOW, approval=approval, own_claim=TOKEN)


def shell_outcome(cached: Decision | None, live: Decision) -> Decision:
    """The loop's rule: a decision on cached facts stands only as ``refusal_on_cache`` lets it;
    otherwise it is discarded and the live decision is the one committed."""
    return cached if cached is not None else live


@settings(PROFILE)
@given(
    event=events,
    facts=all_facts(),
    policy=policies(),
    approval=approvals,
    node_age=ages,
    record_age=ages,
)
def test_nothing_that_stands_on_cached_facts_acts(
    *,
    event: AlertEvent,
    facts: Facts,
    policy: Policy,
    approval: Approval | None,
    node_age: float,
    record_age: float,
) -> None:
    stood = refusal_on_cache(
        decided(event, cached_view(facts), policy, approval), sources(node_age, record_age)
    )
    if stood is None:
        return
    assert stood.actions == ()
    assert not stood.dry_run
    assert stood.verdict in (Verdict.NOOP, Verdict.SKIP)
    blocking = [r.guard for r in stood.reasons if not r.passed]
    assert blocking
    assert set(blocking) <= CACHEABLE
    assert not any(r.guard in NOT_READ for r in stood.reasons)
    note = stood.reasons[0]
    assert note.guard == CACHED
    assert "watch-fed node index" in note.message
    assert "shared by concurrent requests" in note.message


@settings(PROFILE)
@given(
    event=events,
    cached_facts=all_facts(),
    live_facts=all_facts(),
    policy=policies(room=True),
    approval=approvals,
    age=ages,
)
def test_whatever_the_cache_says_only_the_live_decision_ever_acts(
    *,
    event: AlertEvent,
    cached_facts: Facts,
    live_facts: Facts,
    policy: Policy,
    approval: Approval | None,
    age: float,
) -> None:
    live = decided(event, live_facts, policy, approval)
    cached = refusal_on_cache(
        decided(event, cached_view(cached_facts), policy, approval), sources(age, age)
    )
    outcome = shell_outcome(cached, live)
    assert outcome.actions in ((), live.actions)


@settings(PROFILE)
@given(events, all_facts(), policies(room=True), approvals)
def test_a_current_cache_refuses_only_what_the_live_facts_refuse(
    event: AlertEvent, facts: Facts, policy: Policy, approval: Approval | None
) -> None:
    stood = refusal_on_cache(
        decided(event, cached_view(facts), policy, approval), sources(0.0, 0.0)
    )
    if stood is None:
        return
    live = decided(event, facts, policy, approval)
    assert live.actions == (), (stood.reasons, live.reasons)
    assert live.verdict in (Verdict.NOOP, Verdict.SKIP)
