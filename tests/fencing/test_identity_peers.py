"""Which machine a real BMC says it controls, read by the drivers and judged against the Node:
sushy-emulator's systems carry the UUIDs of simulated nodes (one of them in SMBIOS's
byte-swapped spelling), and the pyghmi BMC answers Get System GUID with a node's UUID."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from nodefence.engine.identity import MachineBinding, judge
from nodefence.fencing.ipmi import IpmiDriver
from nodefence.fencing.redfish import RedfishDriver
from nodefence_sim.controllers.kubelet import system_uuid

from .conftest import fake_system
from .peers import PASSWORD, USER, Ca, Sushy, start_ipmi_bmc, start_sushy, sushy_installed

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


def redfish(sushy: Sushy, system: str) -> RedfishDriver:
    return RedfishDriver(
        sushy.url,
        username=USER,
        password=SecretStr(PASSWORD),
        system=system,
        auth="basic",
        ca_file=str(sushy.ca_file),
    )


def binding(node: str, target: str) -> MachineBinding:
    return MachineBinding(node=node, target=target, driver="redfish")


async def test_sushy_systems_are_bound_to_their_nodes_only(sushy_nodes: Sushy) -> None:
    systems = {NODE: system_uuid(NODE).lower(), OTHER: swapped(system_uuid(OTHER))}
    reported = {}
    for node, system in systems.items():
        driver = redfish(sushy_nodes, system)
        try:
            reported[node] = await driver.identity(timeout=10)
            status = await driver.status(timeout=10)
        finally:
            await driver.close()
        # Read with the state, from the same GET.
        assert status.identity.lower() == system.lower()
    for node, said in reported.items():
        assert said.value.lower() == systems[node].lower(), said
        for candidate in (NODE, OTHER):
            verdict = judge(
                binding(candidate, said.source),
                said,
                node=candidate,
                system_uuid=system_uuid(candidate),
                provider_id="",
            )
            assert verdict.bound is (candidate == node), verdict.message
            if candidate != node:
                assert "identity mismatch" in verdict.message


async def test_an_unreachable_system_reports_no_identity(sushy_nodes: Sushy) -> None:
    driver = RedfishDriver(
        sushy_nodes.url,
        username=USER,
        password=SecretStr("not-the-password"),
        system=system_uuid(NODE).lower(),
        auth="basic",
        ca_file=str(sushy_nodes.ca_file),
    )
    try:
        said = await driver.identity(timeout=10)
    finally:
        await driver.close()
    assert said.value == ""
    assert "refused the configured credentials" in said.detail
    verdict = judge(
        binding(NODE, said.source), said, node=NODE, system_uuid=system_uuid(NODE), provider_id=""
    )
    assert not verdict.bound
    assert "did not report which machine it controls" in verdict.message


async def test_ipmi_system_guid_is_the_nodes_uuid(tmp_path: Path) -> None:
    bmc = start_ipmi_bmc(tmp_path, guid=system_uuid(NODE))
    driver = IpmiDriver(
        "127.0.0.1", username=USER, password=SecretStr(PASSWORD), port=bmc.port, poll_interval=0.2
    )
    try:
        said = await driver.identity(timeout=15)
    finally:
        await driver.close()
        bmc.process.stop()
    assert said.value.upper() == system_uuid(NODE), said
    ipmi = MachineBinding(node=NODE, target=said.source, driver="ipmi")
    for node, bound in ((NODE, True), (OTHER, False)):
        verdict = judge(ipmi, said, node=node, system_uuid=system_uuid(node), provider_id="")
        assert verdict.bound is bound, verdict.message
