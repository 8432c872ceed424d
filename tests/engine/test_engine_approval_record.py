"""Approval requests in the fence record: how they are written, read back, kept and dropped."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from engine_factories import NODE, NOW

from nodefence.engine import record as fence_record
from nodefence.engine.approval_request import (
    APPROVAL_PREFIX,
    CLAIM_GRACE,
    KEEP_AFTER_EXPIRY,
    ApprovalRequest,
    Incident,
)
from nodefence.engine.record import FenceRecord

INCIDENT = Incident("uid-a", "fp-1", "2026-11-30T08:00:00Z")


def request(**changes: object) -> ApprovalRequest:
    fields: dict[str, object] = {
        "node": NODE,
        "incident": INCIDENT,
        "requested_at": NOW,
        "expires_at": NOW + timedelta(hours=1),
        "claimed_by": "replica-1/0123456789ab",
        "channel": "C0NODEFENCE",
        "ts": "1700000000.000100",
    }
    fields.update(changes)
    return ApprovalRequest(**fields)  # type: ignore[arg-type]


def test_a_request_round_trips_through_the_configmap_and_spends_no_budget() -> None:
    held = fence_record.with_approval(FenceRecord(resource_version="3"), request())
    data = fence_record.encode(held)
    assert set(data) == {APPROVAL_PREFIX + NODE}
    read = fence_record.decode(data, "4")
    assert read.approval(NODE) == request()
    assert read.holders == ()
    assert fence_record.foreign_keys(data) == ()


def test_an_unreadable_request_counts_as_none_and_is_carried_over_until_replaced() -> None:
    data = {
        APPROVAL_PREFIX + NODE: "{not json",
        APPROVAL_PREFIX + "worker-2": json.dumps(
            {"node": "worker-3", "uid": "u", "fingerprint": "f"}
        ),
        APPROVAL_PREFIX + "worker-4": json.dumps({"node": "worker-4", "uid": "u"}),
        "owner-note": "someone else's",
    }
    read = fence_record.decode(data, "7")
    assert read.approvals == ()
    assert read.unreadable == (), "an unreadable request holds no budget slot"
    assert set(read.unreadable_approvals) == {
        APPROVAL_PREFIX + NODE,
        APPROVAL_PREFIX + "worker-2",
        APPROVAL_PREFIX + "worker-4",
    }
    assert fence_record.encode(read, data) == data
    replaced = fence_record.encode(fence_record.with_approval(read, request()), data)
    assert json.loads(replaced[APPROVAL_PREFIX + NODE])["ts"] == "1700000000.000100"
    assert replaced[APPROVAL_PREFIX + "worker-2"] == data[APPROVAL_PREFIX + "worker-2"]


def test_pending_rejected_and_the_claim_grace() -> None:
    now = NOW + timedelta(minutes=5)
    assert request().pending(INCIDENT, now)
    assert not request().pending(Incident("uid-b", "fp-1", INCIDENT.not_ready_since), now)
    assert not request().pending(INCIDENT, NOW + timedelta(hours=1)), "expired"
    claimed = request(channel="", ts="")
    assert claimed.pending(INCIDENT, NOW + CLAIM_GRACE - timedelta(seconds=1))
    assert not claimed.pending(INCIDENT, NOW + CLAIM_GRACE), "a claim never posted is let go"
    rejected = request(rejection="rejected by U1 at 2026-11-30T08:05:00Z")
    assert rejected.rejected(INCIDENT)
    assert not rejected.pending(INCIDENT, now)
    assert not rejected.rejected(Incident("uid-a", "fp-1", "2026-11-30T09:00:00Z"))


def test_long_expired_requests_are_pruned_and_open_ones_kept() -> None:
    old = request(node="worker-2", expires_at=NOW - KEEP_AFTER_EXPIRY - timedelta(seconds=1))
    recent = request(node="worker-3", expires_at=NOW - timedelta(days=1))
    held = FenceRecord(approvals=(old, recent, request()))
    kept = fence_record.prune_approvals(held, NOW)
    assert [a.node for a in kept.approvals] == ["worker-3", NODE]


def test_the_incident_since_round_trips_through_a_button() -> None:
    since = Incident.since_text(INCIDENT.since_unix)
    assert since == INCIDENT.not_ready_since
    assert Incident("u", "f", "").since_unix == 0
    assert Incident.since_text(0) == ""
    assert datetime.fromtimestamp(INCIDENT.since_unix, UTC).year == 2026


def test_an_approval_being_acted_on_round_trips_and_holds_until_its_time() -> None:
    until = NOW + timedelta(seconds=20)
    acting = request(approval="approved by U0ALICE at 2026-11-30T08:20:00Z", approval_until=until)
    data = fence_record.encode(fence_record.with_approval(FenceRecord(), acting))
    read = fence_record.decode(data, "4").approval(NODE)
    assert read == acting
    assert read.approving(INCIDENT, NOW) == acting.approval
    assert read.approving(INCIDENT, until) is None
    assert read.approving(Incident("uid-a", "fp-1", "2026-11-30T08:10:00Z"), NOW) is None
    rejected = request(rejection="rejected by U0BOB at x", approval=acting.approval)
    assert rejected.approving(INCIDENT, NOW) is None
