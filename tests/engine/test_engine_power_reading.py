"""Power-step readings in the fence record: written and read back whole (the identity the S10
judgement is made again on), bounded, and a fact only for the request that asked."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import replace

from engine_factories import NODE, NOW, UID, ago, entry, facts, node, record
from hypothesis import given
from hypothesis import strategies as st

from nodefence.engine import power_reading
from nodefence.engine import record as fence_record
from nodefence.engine.evidence import PowerEvidence
from nodefence.engine.identity import Reported
from nodefence.engine.record import MAX_DETAIL, MAX_READINGS, READING_PREFIX, RecordedReading


def every_field_set() -> Reported:
    """A Reported with every field away from its default, so a field the record drops shows."""
    values: dict[str, object] = {}
    for f in dataclasses.fields(Reported):
        values[f.name] = ("alias-1", "alias-2") if f.name == "aliases" else f"{f.name}-value"
    return Reported(**values)  # type: ignore[arg-type]


def reading(by: str = "req-1", *, at: float = 5, **changes: object) -> RecordedReading:
    base = RecordedReading(
        node=NODE,
        uid=UID,
        by=by,
        operation="off",
        state="off",
        source="redfish https://bmc-1/redfish/v1/Systems/1",
        at=ago(at),
        detail="ForceOff sent; PowerState Off",
        action_sent=True,
        reset_sent=True,
        identity=every_field_set(),
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def test_a_reading_round_trips_with_every_field_of_its_identity() -> None:
    written = replace(record(entry()), readings=(reading(), reading("req-2", state="on")))
    data = fence_record.encode(written)
    assert set(data) == {f"fence.{NODE}", f"{READING_PREFIX}{NODE}"}
    read = fence_record.decode(data, "3")
    assert read.readings == written.readings
    assert read.entries == written.entries


def test_an_unreadable_reading_is_no_reading_and_costs_the_entry_nothing() -> None:
    data = fence_record.encode(replace(record(entry()), readings=(reading(),)))
    listed = json.loads(data[f"{READING_PREFIX}{NODE}"])
    good = listed[0]
    data[f"{READING_PREFIX}{NODE}"] = json.dumps(
        [{"by": "x", "state": "off"}, "not an object", {**good, "at": "yesterday"}, good]
    )
    data[f"{READING_PREFIX}worker-2"] = "not json"
    read = fence_record.decode(data, "3")
    assert read.readings == (reading(),)
    assert read.unreadable == ()
    assert read.holders == (NODE,)
    # Nobody's key to keep: the next write leaves the unreadable ones out.
    assert f"{READING_PREFIX}worker-2" not in fence_record.encode(read, data)


def test_a_request_keeps_one_reading_and_a_node_at_most_a_few() -> None:
    held = record(entry())
    for n in range(MAX_READINGS + 2):
        held = fence_record.with_reading(held, reading(f"req-{n}", at=10 - n))
    held = fence_record.with_reading(held, reading("req-5", at=1, state="on"))
    mine = [r for r in held.readings if r.node == NODE]
    assert len(mine) == MAX_READINGS
    assert [r.by for r in mine][-1] == "req-5"
    assert [r.state for r in mine if r.by == "req-5"] == ["on"]


def test_old_readings_and_long_details_are_not_kept() -> None:
    old = replace(reading("req-old", at=fence_record.READING_KEEP_SECONDS + 60), node="worker-2")
    held = replace(record(), readings=(old,))
    held = fence_record.with_reading(held, reading(detail="x" * (MAX_DETAIL * 3)))
    assert [r.by for r in held.readings] == ["req-1"]
    assert len(held.readings[0].detail) == MAX_DETAIL


def test_the_reading_is_the_requests_own_and_for_this_node_object_only() -> None:
    held = replace(
        record(entry()),
        readings=(reading("req-1"), reading("req-2", state="on", uid="uid-older-node")),
    )
    base = facts(node(), record_=held)
    assert power_reading.of_request(base, "req-1") == PowerEvidence(
        "off",
        "redfish https://bmc-1/redfish/v1/Systems/1",
        "ForceOff sent; PowerState Off",
        at=ago(5),
        action_sent=True,
        identity=every_field_set(),
        reset_sent=True,
    )
    # Another request's reading, and one for a node object of the same name that is gone.
    assert power_reading.of_request(base, "req-3") is None
    assert power_reading.of_request(base, "req-2") is None
    assert power_reading.of_request(base, "") is None
    assert power_reading.with_reading(base, "req-3") is base


tokens = st.sampled_from(["req-a", "req-b", "req-c"])
uids = st.sampled_from([UID, "uid-other"])
states = st.sampled_from(["off", "on", "unknown"])


@given(
    st.lists(st.tuples(tokens, uids, states, st.integers(0, 600)), max_size=12),
    tokens,
)
def test_no_request_decides_on_a_reading_it_did_not_write(
    written: list[tuple[str, str, str, int]], asking: str
) -> None:
    held = record(entry())
    for by, uid, state, age in written:
        held = fence_record.with_reading(held, reading(by, at=age, uid=uid, state=state))
    seen = power_reading.with_reading(facts(node(), record_=held), asking)
    own = [r for r in held.readings if (r.by, r.uid) == (asking, UID)]
    if not own:
        assert seen.power is None
    else:
        assert seen.power == power_reading.evidence(own[-1])
        assert seen.power.at is not None
        assert seen.power.at <= NOW
