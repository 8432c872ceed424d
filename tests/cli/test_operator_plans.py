"""The pure parts of the operator commands: what ``release`` plans to take away from one read
of the node and the fence record, and how the pause switch is read from its ConfigMap."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from nodefence.commands.failures import CommandRefusedError
from nodefence.commands.pause import pause_state
from nodefence.commands.release import plan_release
from nodefence.engine import record as fence_record
from nodefence.engine.record import FenceEntry, FenceRecord, Phase
from nodefence.policy import parse_policy

NODE = "worker-1"
UID = "uid-1"
OOS = "node.kubernetes.io/out-of-service"
CLAIMED = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)
POLICY = parse_policy({"rules": [{"name": "default", "flap_window_seconds": 1800}]})


def _entry(phase: Phase = Phase.FENCED) -> FenceEntry:
    return FenceEntry(
        node=NODE,
        uid=UID,
        phase=phase,
        claimed_at=CLAIMED,
        rule="default",
        alertname="KubeNodeNotReady",
        fingerprint="f",
        boot_id="b",
        effect="NoExecute",
        claimed_by="replica/1",
        fenced_at=CLAIMED if phase is Phase.FENCED else None,
    )


def _node(taints: list[dict[str, str]], notes: dict[str, str], ready: str = "True") -> Any:
    return {
        "metadata": {
            "name": NODE,
            "uid": UID,
            "resourceVersion": "42",
            "annotations": notes,
        },
        "spec": {"taints": taints},
        "status": {"conditions": [{"type": "Ready", "status": ready}]},
    }


OURS = {"key": OOS, "value": "nodeshutdown", "effect": "NoExecute"}
ADMINS = {"key": OOS, "value": "nodeshutdown", "effect": "NoSchedule"}


def test_the_patch_tests_uid_and_version_removes_exactly_ours_and_keeps_the_exclusion() -> None:
    notes = {
        "nodefence.io/fenced-by": "nodefence",
        "nodefence.io/exclude": "true",
        "other.example/keep": "x",
    }
    plan = plan_release(
        NODE, _node([OURS, ADMINS], notes), FenceRecord((_entry(),)), POLICY, "nodefence"
    )

    assert plan.patch[:2] == (
        {"op": "test", "path": "/metadata/uid", "value": UID},
        {"op": "test", "path": "/metadata/resourceVersion", "value": "42"},
    )
    assert {"op": "replace", "path": "/spec/taints", "value": [ADMINS]} in plan.patch
    assert {"op": "remove", "path": "/metadata/annotations/nodefence.io~1fenced-by"} in plan.patch
    assert plan.annotations == ("nodefence.io/fenced-by",)
    assert plan.not_ready == ""


def test_a_node_still_not_ready_needs_confirmation_and_says_why() -> None:
    plan = plan_release(
        NODE, _node([OURS], {}, ready="Unknown"), FenceRecord((_entry(),)), POLICY, "nodefence"
    )

    assert "still NotReady (Ready is Unknown)" in plan.not_ready
    assert "30m" in plan.not_ready, "the flap window of the rule that fenced it"


@pytest.mark.parametrize(
    ("node", "record", "says"),
    [
        (_node([OURS], {}), FenceRecord(), "was not applied by nodefence"),
        (
            _node([OURS], {"nodefence.io/fenced-by": "nodefence"}),
            FenceRecord(),
            "nothing proves the taint is nodefence's",
        ),
        (_node([], {}), FenceRecord(), "nodefence holds no fence of node worker-1"),
        (
            _node([], {}),
            FenceRecord(unreadable=(fence_record.FENCE_PREFIX + NODE,)),
            "cannot be read",
        ),
        (_node([], {}), FenceRecord((_entry(Phase.CLAIMED),)), "is being written"),
        (
            _node([{"key": OOS, "value": "manual", "effect": "NoExecute"}], {}),
            FenceRecord((_entry(),)),
            "someone changed it",
        ),
    ],
    ids=[
        "admins-taint",
        "mirror-without-entry",
        "no-entry",
        "unreadable-entry",
        "half-written",
        "taken-over",
    ],
)
def test_what_is_not_nodefences_to_release_is_refused(
    node: Any, record: FenceRecord, says: str
) -> None:
    with pytest.raises(CommandRefusedError, match=says):
        plan_release(NODE, node, record, POLICY, "nodefence")


def test_an_entry_for_an_earlier_node_object_leaves_the_new_one_alone() -> None:
    recreated = _node([OURS], {"nodefence.io/fenced-by": "nodefence"})
    recreated["metadata"]["uid"] = "uid-2"

    plan = plan_release(NODE, recreated, FenceRecord((_entry(),)), POLICY, "nodefence")

    assert plan.patch == ()
    assert plan.same_node is False
    assert plan.node_uid == UID


def test_the_pause_switch_reads_who_when_and_why() -> None:
    configmap = {
        "metadata": {
            "annotations": {
                "nodefence.io/paused": "True",
                "nodefence.io/paused-reason": " storage work ",
                "nodefence.io/paused-by": "alice",
                "nodefence.io/paused-at": "2026-12-01T03:04:05Z",
            }
        }
    }

    state = pause_state(configmap, "nodefence")

    assert state.paused is True
    assert (state.reason, state.by) == ("storage work", "alice")
    assert state.at == datetime(2026, 12, 1, 3, 4, 5, tzinfo=UTC)
    assert pause_state({}, "nodefence").paused is False
    off = {"metadata": {"annotations": {"nodefence.io/paused": "false"}}}
    assert pause_state(off, "nodefence").paused is False


def test_a_pause_set_by_hand_is_dated_by_the_server_stamp_on_its_write() -> None:
    configmap = {
        "metadata": {
            "creationTimestamp": "2026-11-01T00:00:00Z",
            "annotations": {"nodefence.io/paused": "true"},
            "managedFields": [
                {
                    "manager": "kubectl-create",
                    "operation": "Update",
                    "time": "2026-11-01T00:00:00Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:data": {}},
                },
                {
                    "manager": "kubectl-annotate",
                    "operation": "Update",
                    "time": "2026-12-01T02:00:00Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:annotations": {"f:nodefence.io/paused": {}}}},
                },
            ],
        }
    }

    state = pause_state(configmap, "nodefence")

    assert state.at == datetime(2026, 12, 1, 2, 0, tzinfo=UTC)
    assert state.by == ""


@pytest.mark.invariant("S4")
def test_a_lookalike_taint_someone_else_wrote_is_refused() -> None:
    """S4: same key, value and effect, but not the timeAdded of nodefence's own write (someone
    removed nodefence's taint and applied theirs): not nodefence's to remove."""
    written = datetime(2026, 12, 1, 3, 1, tzinfo=UTC)
    entry = replace(_entry(), taint_added=written)
    theirs = {**OURS, "timeAdded": "2026-12-01T03:20:00Z"}
    ours = {**OURS, "timeAdded": "2026-12-01T03:01:00Z"}

    with pytest.raises(CommandRefusedError, match="looks like the one nodefence applied but is"):
        plan_release(NODE, _node([theirs], {}), FenceRecord((entry,)), POLICY, "nodefence")
    plan = plan_release(NODE, _node([ours], {}), FenceRecord((entry,)), POLICY, "nodefence")
    assert plan.taint == ours
