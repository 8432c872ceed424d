"""``nodefence status`` says what each machine's BMC or fence agent answered to nodefence's power
steps, as the fence record keeps it: when (the API server's clock), which step, the state, and
which machine the target said it controls."""

from __future__ import annotations

from datetime import UTC, datetime

from nodefence.commands.status import as_text, report
from nodefence.engine import record as fence_record
from nodefence.engine.identity import Reported
from nodefence.engine.record import FenceRecord, RecordedReading

AT = datetime(2026, 12, 2, 3, 4, 5, tzinfo=UTC)
SOURCE = "redfish https://bmc-7/redfish/v1/Systems/1"


def readings() -> tuple[RecordedReading, ...]:
    off = RecordedReading(
        node="worker-7",
        uid="uid-7",
        by="replica-1/abc",
        operation="off",
        state="off",
        source=SOURCE,
        at=AT,
        action_sent=True,
        reset_sent=True,
        identity=Reported("4C4C4544-0037", SOURCE),
    )
    on = RecordedReading(
        node="worker-3",
        uid="uid-3",
        by="replica-2/def",
        operation="status",
        state="unknown",
        source="fence_aws i-0abc",
        at=AT,
        detail="Unable to connect",
    )
    return (off, on)


def shown(record: FenceRecord) -> str:
    status = {
        **report(record, []),
        "pause": {"paused": False},
        "notReadyNotFenced": [],
        "notReadyNotJudged": [],
    }
    return as_text(status)


def test_status_lists_each_reading_the_record_keeps() -> None:
    record = fence_record.decode(fence_record.encode(FenceRecord(readings=readings())), "9")
    listed = report(record, [])["powerReadings"]
    assert [(r["node"], r["state"]) for r in listed] == [
        ("worker-3", "unknown"),
        ("worker-7", "off"),
    ]
    assert listed[1]["identity"] == "4C4C4544-0037"
    assert listed[1]["actionSent"] is True
    text = shown(record)
    assert "Power-step readings kept in the record: 2" in text
    assert (
        f"  worker-7  2026-12-02T03:04:05Z  off: {SOURCE} answered off; machine 4C4C4544-0037"
        in text
    )
    assert (
        "  worker-3  2026-12-02T03:04:05Z  status: fence_aws i-0abc answered unknown: "
        "Unable to connect" in text
    )


def test_status_says_when_no_reading_is_kept() -> None:
    assert "Power-step readings kept in the record: none" in shown(FenceRecord())
