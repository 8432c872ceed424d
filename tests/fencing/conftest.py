"""Fixtures for the power driver tests: certificate authorities and a running sushy-emulator."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from .closing import Opened
from .peers import Ca, Sushy, make_ca, start_sushy, sushy_installed

WORKER_UUID = "8a5c2c4e-1d6b-4a55-9d0e-000000000001"
SPARE_UUID = "8a5c2c4e-1d6b-4a55-9d0e-000000000002"


def fake_system(uuid: str, name: str, power_state: str) -> dict[str, object]:
    return {
        "uuid": uuid,
        "name": name,
        "power_state": power_state,
        "nics": [{"mac": "00:5c:52:31:3a:9c", "ip": "172.22.0.100"}],
    }


@pytest.fixture
async def opened() -> AsyncIterator[Opened]:
    """``opened(driver)``: the driver is closed when the test ends, passed or failed."""
    drivers = Opened()
    try:
        yield drivers
    finally:
        await drivers.close_all()


@pytest.fixture
def ca(tmp_path: Path) -> Ca:
    return make_ca(tmp_path, "bmc")


@pytest.fixture
def other_ca(tmp_path: Path) -> Ca:
    return make_ca(tmp_path, "other")


def _sushy(tmp_path: Path, ca: Ca, systems: list[dict[str, object]]) -> Iterator[Sushy]:
    if not sushy_installed():
        pytest.skip("sushy-emulator (sushy-tools, in the dev extra) is not installed")
    emulator = start_sushy(tmp_path, systems, ca)
    try:
        yield emulator
    finally:
        emulator.process.stop()


@pytest.fixture
def sushy(tmp_path: Path, ca: Ca) -> Iterator[Sushy]:
    """One powered-on system, as on a typical server BMC."""
    yield from _sushy(tmp_path, ca, [fake_system(WORKER_UUID, "worker1", "On")])


@pytest.fixture
def sushy_two_systems(tmp_path: Path, ca: Ca) -> Iterator[Sushy]:
    """A BMC (a chassis manager) with two systems behind it."""
    yield from _sushy(
        tmp_path,
        ca,
        [fake_system(WORKER_UUID, "worker1", "On"), fake_system(SPARE_UUID, "spare", "Off")],
    )


@pytest.fixture
def sushy_other_ca(tmp_path: Path, other_ca: Ca) -> Iterator[Sushy]:
    """A BMC whose certificate comes from a CA the inventory does not name."""
    yield from _sushy(tmp_path, other_ca, [fake_system(WORKER_UUID, "worker1", "On")])
