"""When a node became Ready, on the API server's clock: the kubelet's lastTransitionTime
corrected by the kubelet's offset, read from its heartbeat against the server's stamp; and
whether that was a recovery, for the storm cooldown, or its first Ready after joining."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodefence.engine.guards import storm_cooled_down
from nodefence.kube.convert import ready_condition, ready_since, recovered_since
from nodefence.kube.node_index import count, summarize
from nodefence.policy import ClusterPolicy

SERVER_NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
READY_KEY = 'k:{"type":"Ready"}'


def stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def ready_node(
    transition: datetime, heartbeat: datetime, written: datetime | None, status: str = "True"
) -> dict[str, Any]:
    """A Node whose kubelet wrote Ready (transition and heartbeat on its own clock) in a write
    the API server stamped ``written``."""
    managed = []
    if written is not None:
        owned = {"f:lastHeartbeatTime": {}, "f:lastTransitionTime": {}, "f:status": {}}
        managed.append(
            {
                "manager": "kubelet",
                "operation": "Update",
                "subresource": "status",
                "time": stamp(written),
                "fieldsV1": {"f:status": {"f:conditions": {READY_KEY: owned}}},
            }
        )
    condition = {
        "type": "Ready",
        "status": status,
        "lastTransitionTime": stamp(transition),
        "lastHeartbeatTime": stamp(heartbeat),
    }
    return {
        "metadata": {"name": "n1", "managedFields": managed},
        "status": {"conditions": [condition]},
    }


def test_a_kubelet_half_an_hour_behind_is_corrected() -> None:
    behind = timedelta(minutes=30)
    node = ready_node(SERVER_NOW - behind, SERVER_NOW - behind, SERVER_NOW)
    assert ready_since(node, ready_condition(node)) == SERVER_NOW


def test_without_a_stamp_the_transition_is_taken_as_written() -> None:
    node = ready_node(SERVER_NOW - timedelta(hours=1), SERVER_NOW, None)
    assert ready_since(node, ready_condition(node)) == SERVER_NOW - timedelta(hours=1)


def test_a_node_that_is_not_ready_has_no_ready_since() -> None:
    unknown = ready_node(SERVER_NOW, SERVER_NOW, SERVER_NOW, status="Unknown")
    assert ready_since(unknown, ready_condition(unknown)) is None


@given(
    skew=st.integers(min_value=-7200, max_value=7200),
    up_for=st.integers(min_value=0, max_value=7200),
    beat_after=st.integers(min_value=0, max_value=600),
    delay=st.integers(min_value=0, max_value=30),
)
def test_the_corrected_time_is_never_earlier_than_the_true_one(
    skew: int, up_for: int, beat_after: int, delay: int
) -> None:
    """The kubelet became Ready ``up_for`` seconds ago and last wrote its heartbeat
    ``beat_after`` seconds after that, on a clock ``skew`` seconds off; the API server stamped
    that write ``delay`` seconds later. A recovery can only look more recent than it was."""
    true_transition = SERVER_NOW - timedelta(seconds=up_for)
    true_beat = true_transition + timedelta(seconds=beat_after)
    off = timedelta(seconds=skew)
    node = ready_node(true_transition + off, true_beat + off, true_beat + timedelta(seconds=delay))
    corrected = ready_since(node, ready_condition(node))
    assert corrected is not None
    assert true_transition <= corrected <= true_transition + timedelta(seconds=delay)


def joined(created: datetime, ready_after: timedelta) -> dict[str, Any]:
    """A Node the API server created at ``created`` whose kubelet turned it Ready
    ``ready_after`` later (its clock right), and has written heartbeats since."""
    node = ready_node(created + ready_after, SERVER_NOW, SERVER_NOW)
    node["metadata"]["creationTimestamp"] = stamp(created)
    return node


@pytest.mark.parametrize("ready_after", [timedelta(0), timedelta(seconds=20), timedelta(minutes=4)])
def test_a_nodes_first_ready_after_joining_is_no_recovery(ready_after: timedelta) -> None:
    node = joined(SERVER_NOW - timedelta(minutes=6), ready_after)
    assert ready_since(node, ready_condition(node)) is not None
    assert recovered_since(node, ready_condition(node)) is None
    assert summarize(node).ready_since is None


def test_ready_again_long_after_joining_is_a_recovery() -> None:
    node = joined(SERVER_NOW - timedelta(days=2), timedelta(days=2) - timedelta(minutes=1))
    assert recovered_since(node, ready_condition(node)) == SERVER_NOW - timedelta(minutes=1)


def test_a_cluster_minutes_old_is_no_storm_that_just_ended() -> None:
    """Four nodes created three minutes ago, Ready seconds later; one has since died. Their first
    Ready is not a storm's end, so the storm cooldown does not hold its fence (the storm
    guard itself still counts the dead node). Nodes that came back after an outage still do."""
    created = SERVER_NOW - timedelta(minutes=3)
    nodes = [joined(created, timedelta(seconds=15)) for _ in range(3)]
    dead = joined(created, timedelta(seconds=15))
    dead["status"]["conditions"][0]["status"] = "Unknown"
    cluster = count(summarize(n) for n in [*nodes, dead])
    assert cluster.ready_since == ()
    policy = ClusterPolicy()
    assert storm_cooled_down(cluster, policy, SERVER_NOW).passed

    back = [joined(SERVER_NOW - timedelta(days=1), timedelta(days=1) - timedelta(minutes=2))]
    after_outage = count(summarize(n) for n in [*nodes, *back, *back, *back, dead])
    assert len(after_outage.ready_since) == 3
    assert not storm_cooled_down(after_outage, policy, SERVER_NOW).passed
