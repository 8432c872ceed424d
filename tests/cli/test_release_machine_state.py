"""``release`` says what it left the machine in: a release takes the taint away, never the
power, so a machine nodefence powered off is said to stay off, with how to power it on."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from nodefence.commands.release import machine_state
from nodefence.engine.record import FenceEntry, Phase

NOW = datetime(2026, 12, 5, 3, 0, tzinfo=UTC)
FENCED = FenceEntry(
    node="compute02",
    uid="uid-compute02",
    phase=Phase.FENCED,
    claimed_at=NOW - timedelta(minutes=20),
    rule="default",
    alertname="KubeNodeNotReady",
    fingerprint="fp-1",
    boot_id="boot-1",
    effect="NoExecute",
    control_plane=False,
)


def test_a_machine_powered_off_and_never_on_is_said_to_stay_off() -> None:
    held = dataclasses.replace(FENCED, power_off_sent_at=NOW - timedelta(minutes=19))
    said = machine_state("compute02", held)
    assert said.startswith("nodefence powered the machine off at 2026-12-05T02:41:00Z")
    assert "stays off until someone does" in said
    assert "ResetType On" in said
    assert "chassis power on" in said
    assert "nodefence check-fencing compute02" in said


def test_a_reboot_and_no_power_action_are_told_apart() -> None:
    rebooted = dataclasses.replace(
        FENCED,
        power_off_sent_at=NOW - timedelta(minutes=19),
        power_on_sent_at=NOW - timedelta(minutes=18),
    )
    assert "and on again at 2026-12-05T02:42:00Z" in machine_state("compute02", rebooted)
    assert machine_state("compute02", FENCED).startswith("nodefence sent no power action")
