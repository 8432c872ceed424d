"""The storm cooldown counts a node as recovered exactly when it became Ready no later than now
and less than the cooldown ago (``0 <= now - since < window``), at the window's edges too."""

from __future__ import annotations

from datetime import timedelta

from engine_factories import NOW, cluster, policy
from hypothesis import given
from hypothesis import strategies as st

from nodefence.engine.guards import storm_cooled_down

WINDOW = 600

# Offsets around the window's edges (and the future: a Ready time after now), in microseconds.
EDGES = st.sampled_from([0, 1, -1, WINDOW * 10**6, WINDOW * 10**6 - 1, WINDOW * 10**6 + 1])
OFFSETS = st.one_of(EDGES, st.integers(min_value=-(10**9), max_value=2 * WINDOW * 10**6))


@given(offsets=st.lists(OFFSETS, max_size=30), ready=st.integers(min_value=0, max_value=40))
def test_recovered_nodes_are_counted_as_the_definition_says(offsets: list[int], ready: int) -> None:
    since = tuple(NOW - timedelta(microseconds=o) for o in offsets)
    window = timedelta(seconds=WINDOW)
    expected = sum(1 for s in since if timedelta(0) <= NOW - s < window)
    facts = cluster(total_nodes=40, ready_nodes=ready, ready_since=since)
    the_policy = policy(cluster={"storm_cooldown_seconds": WINDOW}).cluster
    reason = storm_cooled_down(facts, the_policy, NOW)
    if reason.passed:
        assert f"({expected} node(s) recovered in that time)" in reason.message
    else:
        assert reason.message.startswith(f"{expected} node(s) became Ready")
