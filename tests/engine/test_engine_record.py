"""The fence record's ConfigMap format: what is read back is what was written, and what cannot be
read still holds its budget slot."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from engine_factories import NODE, NOW, UID, ago, entry, node, record

from nodefence.engine import guards
from nodefence.engine import record as fence_record
from nodefence.engine.record import FENCE_PREFIX, RELEASED_PREFIX, FenceRecord, Phase, Release
from nodefence.policy import ClusterPolicy


def full_entry() -> fence_record.FenceEntry:
    """An entry with every field set, so a lost field shows in the round trip."""
    return replace(
        entry(node_name="cp-1", uid="uid-cp-1", control_plane=True, ready_seen=60, ready_since=90),
        proof="redfish reported off",
        approval="approved by alice at 2026-11-30T08:00:00Z",
        power_off_sent_at=ago(3700),
        power_on_sent_at=ago(1800),
    )


def test_round_trip_keeps_every_field() -> None:
    written = record(
        full_entry(),
        entry(phase=Phase.CLAIMED, claimed=10),
        released=(Release("worker-9", "uid-9", ago(600), "unfenced: the node is healthy again"),),
        version="",
    )
    data = fence_record.encode(written)
    assert set(data) == {"fence.cp-1", f"fence.{NODE}", "released.worker-9"}
    read = fence_record.decode(data, "12")
    assert read == replace(written, resource_version="12")
    assert read.exists


def test_entry_json_uses_api_names_and_omits_what_is_unset() -> None:
    raw = fence_record.entry_json(entry(phase=Phase.CLAIMED, claimed=10, claimed_by=""))
    assert raw["format"] == fence_record.FORMAT
    assert (raw["node"], raw["uid"], raw["phase"], raw["bootID"]) == (
        NODE,
        UID,
        "claimed",
        "boot-1",
    )
    assert raw["claimedAt"] == "2026-11-30T08:19:50Z"
    assert raw["controlPlane"] is False
    assert not {"claimedBy", "fencedAt", "proof", "approval", "readySeenAt"} & set(raw)


@pytest.mark.parametrize(
    "value",
    [
        "not json",
        "[]",
        '"a string"',
        json.dumps({"uid": UID, "phase": "fenced", "claimedAt": "2026-11-30T08:00:00Z"}),
        json.dumps(
            {"node": NODE, "uid": UID, "phase": "bogus", "claimedAt": "2026-11-30T08:00:00Z"}
        ),
        json.dumps({"node": NODE, "uid": UID, "phase": "fenced", "effect": "NoExecute"}),
        json.dumps(
            {
                "node": NODE,
                "uid": UID,
                "phase": "fenced",
                "effect": "NoExecute",
                "claimedAt": "yesterday",
            }
        ),
        # A time without a zone is on nobody's clock.
        json.dumps(
            {
                "node": NODE,
                "uid": UID,
                "phase": "fenced",
                "effect": "NoExecute",
                "claimedAt": "2026-11-30T08:00:00",
            }
        ),
    ],
)
def test_garbage_entries_are_unreadable_and_still_hold_their_slot(value: str) -> None:
    read = fence_record.decode({FENCE_PREFIX + NODE: value}, "3")
    assert read.entries == ()
    assert read.unreadable == (FENCE_PREFIX + NODE,)
    assert read.holders == (NODE,)
    reason = guards.within_fence_budget(node(name="worker-2"), read, ClusterPolicy())
    assert not reason.passed
    assert NODE in reason.message


def test_entry_under_another_nodes_key_is_unreadable() -> None:
    """``fence.worker-2`` holding an entry for worker-3: neither name can be trusted, and the
    key's own slot stays spent."""
    moved = json.dumps(fence_record.entry_json(entry(node_name="worker-3", uid="uid-3")))
    read = fence_record.decode({"fence.worker-2": moved}, "3")
    assert (read.entries, read.unreadable) == ((), ("fence.worker-2",))
    assert read.holders == ("worker-2",)
    assert read.entry("worker-3") is None


def test_unreadable_optional_times_are_dropped_not_fatal() -> None:
    raw = fence_record.entry_json(entry())
    raw["fencedAt"] = "2026-11-30T08:00:00"
    raw["readySeenAt"] = "soon"
    read = fence_record.decode({FENCE_PREFIX + NODE: json.dumps(raw)}, "3")
    (only,) = read.entries
    assert (only.fenced_at, only.ready_seen_at) == (None, None)
    assert only.claimed_at == ago(3600)


def test_bad_releases_are_dropped_and_other_keys_ignored() -> None:
    data = {
        RELEASED_PREFIX + "worker-2": "garbage",
        RELEASED_PREFIX + "worker-3": json.dumps({"uid": "u3", "at": "not a time"}),
        RELEASED_PREFIX + "worker-4": json.dumps({"uid": "u4", "at": "2026-11-30T08:00:00Z"}),
        "notes": "anything",
    }
    read = fence_record.decode(data, "3")
    assert read.released == (Release("worker-4", "u4", ago(1200), ""),)
    assert (read.entries, read.unreadable) == ((), ())


def test_encode_carries_unreadable_keys_over_untouched() -> None:
    raw = {
        "fence.worker-2": "{broken",
        FENCE_PREFIX + NODE: json.dumps(fence_record.entry_json(entry())),
    }
    read = fence_record.decode(raw, "3")
    again = fence_record.encode(fence_record.with_entry(read, entry(node_name="worker-5")), raw)
    assert again["fence.worker-2"] == "{broken"
    assert fence_record.decode(again, "4").holders == ("worker-1", "worker-2", "worker-5")


def test_empty_record() -> None:
    read = fence_record.decode(None, "")
    assert read == FenceRecord()
    assert not read.exists
    assert read.holders == ()


def test_holders_and_control_plane_holders() -> None:
    read = record(
        entry(node_name="worker-3", uid="u3"),
        entry(node_name="cp-1", uid="ucp", control_plane=True),
        unreadable=("fence.worker-2",),
    )
    assert read.holders == ("cp-1", "worker-2", "worker-3")
    # An entry nobody can read might be a control-plane node's: it counts for "never two
    # control-plane nodes at once" as well.
    assert read.control_plane_holders == ("cp-1", "worker-2")


def test_with_entry_replaces_the_nodes_entry() -> None:
    claimed = record(entry(phase=Phase.CLAIMED, claimed=10))
    confirmed = fence_record.with_entry(claimed, entry())
    assert confirmed.entries == (entry(),)


def test_without_entry_remembers_the_release_only_when_asked() -> None:
    held = record(entry(), released=(Release(NODE, "uid-older", ago(9000)),))
    let_go = fence_record.without_entry(held, NODE, UID, at=NOW, why="unfenced")
    assert let_go.entries == ()
    assert let_go.released == (Release(NODE, UID, NOW, "unfenced"),)
    rolled_back = fence_record.without_entry(held, NODE, UID, at=NOW, why="x", remember=False)
    assert rolled_back.entries == ()
    assert rolled_back.released == held.released


def test_without_entry_leaves_another_node_objects_entry() -> None:
    held = record(entry(uid="uid-new"))
    assert fence_record.without_entry(held, NODE, "uid-old", at=NOW, why="x").entries == (
        entry(uid="uid-new"),
    )


def test_prune_releases_keeps_only_those_within_the_window() -> None:
    held = record(released=(Release("a", "ua", ago(100)), Release("b", "ub", ago(5000))))
    kept = fence_record.prune_releases(held, NOW, 3600)
    assert kept.released == (Release("a", "ua", ago(100)),)
