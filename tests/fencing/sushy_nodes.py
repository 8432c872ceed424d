"""sushy-emulator with one system per node, each reporting its node's SMBIOS UUID in a spelling
real firmware uses: what the identity tests against sushy share."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodefence_sim.controllers.kubelet import system_uuid

from .conftest import fake_system
from .peers import Ca, Sushy, start_sushy, sushy_installed

NODE = "compute01"
OTHER = "compute02"


def swapped(value: str) -> str:
    """The SMBIOS variant: the first three fields byte-swapped, as some firmware reports it."""
    return str(uuid.UUID(bytes=uuid.UUID(value).bytes_le))


@pytest.fixture
def sushy_nodes(tmp_path: Path, ca: Ca) -> Iterator[Sushy]:
    """compute01's system reports its UUID in lower case, compute02's byte-swapped."""
    if not sushy_installed():
        pytest.skip("sushy-emulator (sushy-tools, in the dev extra) is not installed")
    systems = [
        fake_system(system_uuid(NODE).lower(), NODE, "On"),
        fake_system(swapped(system_uuid(OTHER)), OTHER, "On"),
    ]
    emulator = start_sushy(tmp_path, systems, ca)
    try:
        yield emulator
    finally:
        emulator.process.stop()
