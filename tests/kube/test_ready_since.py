"""When a node became Ready, on the API server's clock: the kubelet's lastTransitionTime
corrected by the kubelet's offset, read from its heartbeat against the server's stamp."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from nodefence.kube.convert import ready_condition, ready_since

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
