"""The fence record stays far below the API server's 1 MiB per object whatever BMCs, agents,
nodes, alerts and people put in it: filled with the worst case the policy allows (the largest
fence budget, half of it half-written, every node with its most readings, as many approvals and
releases as are kept) with every outside value hostile and megabytes long, the ConfigMap it is
written as is under 512 KiB. A BMC reporting a 300 kB UUID is kept cut, with a marker, and a cut
identity never matches a machine."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from nodefence.engine import record as fence_record
from nodefence.engine.approval_request import ApprovalRequest, Incident
from nodefence.engine.caps import FIELD_CAPS, MAX_ALIASES, capped, stored_size
from nodefence.engine.held_pods import MAX_HELD_PODS, STATEFULSET, HeldPod, HeldPods, bounded
from nodefence.engine.identity import Reported, same_identity
from nodefence.engine.record import (
    MAX_APPROVALS,
    MAX_READING_NODES,
    MAX_READINGS,
    MAX_RELEASES,
    FenceEntry,
    FenceRecord,
    Phase,
    RecordedReading,
)
from nodefence.policy import MAX_FENCED_NODES, PolicyError, parse_policy

NOW = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)
LIMIT = 512 * 1024
# Each character takes the most bytes JSON can give it: 6 for a control, 12 for one beyond U+FFFF.
HOSTILE = "\x1b\U0001f4a3\u202e\n" * 100_000
NAME = "n" * 250  # Node names are at most 253 characters (the API server's validation).
UID = "8f1c3a52-6a43-4d8f-9c3e-2b7f0e9d1a6c"
CLAIM = "c" * 253 + "/" + UID  # a replica's name and its claim's token


def node(i: int) -> str:
    return f"{NAME}{i:03d}"


def identity() -> Reported:
    return Reported(
        HOSTILE,
        HOSTILE,
        agent=HOSTILE,
        detail=HOSTILE,
        aliases=(HOSTILE,) * 50,
        scope=HOSTILE,
    )


def reading(i: int, k: int) -> RecordedReading:
    return RecordedReading(
        node=node(i),
        uid=UID,
        by=f"{CLAIM}-{k}",
        operation="power-off",
        state="unknown",
        source=HOSTILE,
        detail=HOSTILE,
        at=NOW + timedelta(seconds=i),
        action_sent=True,
        reset_sent=True,
        identity=identity(),
    )


def entry(i: int) -> FenceEntry:
    return FenceEntry(
        node=node(i),
        uid=UID,
        phase=Phase.CLAIMED if i % 2 else Phase.FENCED,
        claimed_at=NOW,
        rule="r" * 253,
        alertname="a" * 253,
        fingerprint=HOSTILE,
        boot_id=HOSTILE,
        effect="NoExecute",
        control_plane=True,
        claimed_by=CLAIM,
        fenced_at=NOW,
        proof=HOSTILE,
        approval=HOSTILE,
        ready_seen_at=NOW,
        ready_transition=NOW,
        power_off_sent_at=NOW,
        power_on_sent_at=NOW,
        taint_added=NOW,
        taint_version="9" * 20,
        power_on_count=2,
        proof_contradicted_at=NOW,
        silent_since=NOW,
        held=held_pods(),
        recovered_at=NOW,
    )


def held_pods() -> HeldPods:
    """More pods than are remembered, under the longest names a namespace (63) and a
    StatefulSet (253) can have, each of them once in its own namespace."""
    return bounded(
        HeldPod(f"{i:02d}" + "n" * 61, STATEFULSET, f"{i:02d}" + "s" * 251, i)
        for i in range(MAX_HELD_PODS * 2)
    )


def approval(i: int) -> ApprovalRequest:
    return ApprovalRequest(
        node=node(i),
        incident=Incident(UID, HOSTILE, "2026-12-01T03:00:00Z"),
        requested_at=NOW + timedelta(seconds=i),
        expires_at=NOW + timedelta(hours=1),
        claimed_by=CLAIM,
        channel=HOSTILE,
        ts=HOSTILE,
        rejection=HOSTILE,
        subject=HOSTILE,
        approval=HOSTILE,
        approval_until=NOW + timedelta(hours=1),
    )


def worst_record() -> FenceRecord:
    """Through the record's own operations, more of everything than it keeps."""
    record = FenceRecord(resource_version="123456789")
    for i in range(MAX_FENCED_NODES):
        record = fence_record.with_entry(record, entry(i))
    # Readings for more nodes than are kept, each node more readings than are kept.
    for i in range(MAX_READING_NODES * 2):
        for k in range(MAX_READINGS + 2):
            record = fence_record.with_reading(record, reading(i, k))
    for i in range(MAX_APPROVALS * 2):
        record = fence_record.with_approval(record, approval(i))
    for i in range(MAX_FENCED_NODES, MAX_FENCED_NODES + MAX_RELEASES * 2):
        record = fence_record.without_entry(
            record, node(i), UID, at=NOW + timedelta(seconds=i), why=HOSTILE
        )
    return record


def configmap_bytes(data: dict[str, str]) -> int:
    """The ConfigMap as it goes over the wire (JSON), its metadata as nodefence writes it."""
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": fence_record.CONFIGMAP,
            "namespace": "n" * 63,
            "resourceVersion": "123456789",
        },
        "data": data,
    }
    return len(json.dumps(configmap).encode())


def test_the_worst_case_the_policy_allows_stays_far_below_one_mebibyte() -> None:
    record = worst_record()
    data = fence_record.encode(record)

    assert len(record.entries) == MAX_FENCED_NODES
    assert sum(e.phase is Phase.CLAIMED for e in record.entries) == MAX_FENCED_NODES // 2
    assert len({r.node for r in record.readings}) == MAX_READING_NODES
    assert len(record.readings) == MAX_READING_NODES * MAX_READINGS
    assert len(record.approvals) == MAX_APPROVALS
    assert len(record.released) == MAX_RELEASES
    assert all(e.held.count and e.held.left_out for e in record.entries)
    # What the API server counts against its limit, and the whole object as sent.
    assert sum(len(k) + len(v.encode()) for k, v in data.items()) < LIMIT
    assert configmap_bytes(data) < LIMIT
    # Read back, it is the same record, and written again, the same bytes.
    again = fence_record.decode(data, "123456789")
    assert again.unreadable == ()
    assert fence_record.encode(again) == data


def test_every_capped_field_is_cut_to_its_cap_with_a_marker() -> None:
    record = worst_record()
    reading = record.readings[-1]
    assert reading.identity is not None
    stored = {
        "fence.proof": record.entries[0].proof,
        "fence.approval": record.entries[0].approval,
        "fence.bootID": record.entries[0].boot_id,
        "fence.fingerprint": record.entries[0].fingerprint,
        "released.why": record.released[0].why,
        "approval.fingerprint": record.approvals[0].incident.fingerprint,
        "approval.subject": record.approvals[0].subject,
        "approval.rejection": record.approvals[0].rejection,
        "approval.approval": record.approvals[0].approval,
        "approval.channel": record.approvals[0].channel,
        "approval.ts": record.approvals[0].ts,
        "reading.source": reading.source,
        "reading.detail": reading.detail,
        "identity.value": reading.identity.value,
        "identity.source": reading.identity.source,
        "identity.agent": reading.identity.agent,
        "identity.detail": reading.identity.detail,
        "identity.scope": reading.identity.scope,
        "identity.alias": reading.identity.aliases[0],
    }
    assert set(stored) == set(FIELD_CAPS)
    for key, value in stored.items():
        assert stored_size(value) <= FIELD_CAPS[key], key
        assert value.endswith("more characters cut]"), key
        assert HOSTILE.startswith(value.split("...[")[0]), key
    assert len(reading.identity.aliases) == MAX_ALIASES


def test_a_300_kb_uuid_is_kept_cut_and_never_matches_a_machine() -> None:
    uuid = "4c4c4544-0042-3510-8052-b4c04f4e4d32"
    huge = uuid + "0" * 300_000
    reported = Reported(huge, "redfish https://bmc")
    assert stored_size(reported.value) <= FIELD_CAPS["identity.value"]
    assert reported.value.startswith(uuid)
    assert not same_identity(uuid, reported.value)
    assert not same_identity(reported.value[:64], reported.value)
    # An ordinary UUID is kept as it is.
    assert Reported(uuid, "redfish https://bmc").value == uuid


@pytest.mark.parametrize("text", ["", "plain", "\x1b" * 1000, "\U0001f4a3" * 1000, "é" * 99])
def test_capped_fits_and_twice_is_once(text: str) -> None:
    for cap in (64, 100, 500):
        once = capped(text, cap)
        assert stored_size(once) <= cap
        assert capped(once, cap) == once
        if stored_size(text) <= cap:
            assert once == text


def test_the_policy_refuses_a_budget_the_record_is_not_sized_for() -> None:
    budget = {"cluster": {"max_fenced_nodes": MAX_FENCED_NODES}}
    assert parse_policy(budget).cluster.max_fenced_nodes == MAX_FENCED_NODES
    with pytest.raises(PolicyError, match="max_fenced_nodes"):
        parse_policy({"cluster": {"max_fenced_nodes": MAX_FENCED_NODES + 1}})
