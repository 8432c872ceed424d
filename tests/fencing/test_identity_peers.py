"""Which machine a real BMC says it controls, read by the drivers and judged against the Node:
sushy-emulator's systems carry the UUIDs of simulated nodes (one of them in SMBIOS's
byte-swapped spelling), and the pyghmi BMC answers Get System GUID with a node's UUID."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import SecretStr

from nodefence.engine.identity import MachineBinding, judge
from nodefence.fencing.binding import inventory_problems, machine_binding, shared
from nodefence.fencing.drivers.fence_agent import FenceAgentDriver
from nodefence.fencing.drivers.ipmi import IpmiDriver
from nodefence.fencing.drivers.redfish import RedfishDriver
from nodefence.fencing.inventory import Inventory, InventoryError, load_inventory
from nodefence_sim.controllers.kubelet import system_uuid

from .peers import PASSWORD, USER, Sushy, start_ipmi_bmc
from .sushy_nodes import sushy_nodes, swapped

__all__ = ["sushy_nodes"]

NODE = "compute01"
OTHER = "compute02"
SERVER = "5f0c4a8e-2b1d-4c3a-9e8f-1a2b3c4d5e6f"
MACHINE_LOWER = "4c4c4544-0042-3510-8044-b4c04f4e3732"
MACHINE_SWAPPED = "44454C4C-4200-1035-8044-B4C04F4E3732"


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
        assert status.identity is not None
        assert status.identity.value.lower() == system.lower()
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


@pytest.mark.parametrize(
    ("agent", "plug", "provider_id", "bound"),
    [
        ("fence_openstack", SERVER, f"openstack:///{SERVER}", True),
        ("fence_openstack", SERVER, f"openstack://RegionOne/{SERVER.upper()}", True),
        ("fence_openstack", SERVER, "openstack:///0c1a2b3c-4d5e-4f60-8a7b-9c0d1e2f3a4b", False),
        ("fence_aws", "i-0123456789abcdef0", "aws:///eu-west-1a/i-0123456789abcdef0", True),
        ("fence_aws", "i-0123456789abcdef0", "aws:///eu-west-1a/i-0fedcba9876543210", False),
        ("fence_openstack", SERVER, "", False),
    ],
)
async def test_a_fence_agents_plug_is_bound_by_the_nodes_provider_id(
    agent: str, plug: str, provider_id: str, *, bound: bool
) -> None:
    """The agent's identity is the plug it is given, judged against the instance the Node's
    providerID names (the agents themselves are Debian's, only named here, never run)."""
    driver = FenceAgentDriver(f"/usr/sbin/{agent}", {"plug": plug, "password": SecretStr("x")})
    said = await driver.identity(timeout=1)
    assert said.value == plug
    binding = MachineBinding(node=NODE, target=said.source, driver="fence-agent")
    verdict = judge(binding, said, node=NODE, system_uuid="", provider_id=provider_id)
    assert verdict.bound is bound, verdict.message


async def test_a_fence_agent_without_a_plug_names_no_machine() -> None:
    driver = FenceAgentDriver("/usr/sbin/fence_redfish", {"ip": "192.0.2.1"})
    said = await driver.identity(timeout=1)
    assert said.value == ""
    binding = MachineBinding(node=NODE, target=said.source, driver="fence-agent")
    assert not judge(binding, said, node=NODE, system_uuid="", provider_id="").bound
    unchecked = MachineBinding(node=NODE, target=said.source, driver="fence-agent", unchecked=True)
    verdict = judge(unchecked, None, node=NODE, system_uuid="", provider_id="")
    assert verdict.bound
    assert "identity unchecked" in verdict.message


def _load(tmp_path: Path, nodes: dict[str, object]) -> Inventory:
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump({"nodes": nodes}))
    return load_inventory(path)


def redfish_entry(**extra: object) -> dict[str, object]:
    return {
        "driver": "redfish",
        "address": "https://10.0.0.11",
        "username": "fencer",
        "password": "s3cret-pass",
        **extra,
    }


def test_the_inventory_takes_an_identity_or_unchecked(tmp_path: Path) -> None:
    inventory = _load(
        tmp_path,
        {
            "worker1": redfish_entry(system="1", identity=system_uuid(NODE)),
            "pdu7": redfish_entry(address="https://10.0.0.12", identity="unchecked"),
        },
    )
    stated = machine_binding(inventory, "worker1")
    pdu = machine_binding(inventory, "pdu7")
    assert stated is not None
    assert stated.expected == system_uuid(NODE)
    assert pdu is not None
    assert pdu.unchecked
    assert not pdu.expected
    assert inventory_problems(inventory) == []
    with pytest.raises(InventoryError, match=r"nodes\.worker1\.identity"):
        _load(tmp_path, {"worker1": redfish_entry(identity="")})


def test_one_machine_twice_in_the_inventory_is_a_configuration_error(tmp_path: Path) -> None:
    """Two spellings of one system, one identity twice: each named, no password shown."""
    inventory = _load(
        tmp_path,
        {
            "worker1": redfish_entry(system="/redfish/v1/Systems/1"),
            "worker2": redfish_entry(address="https://10.0.0.11:443/", system="1"),
            "worker3": redfish_entry(address="https://10.0.0.13", identity=MACHINE_LOWER),
            "worker4": redfish_entry(address="https://10.0.0.14", identity=MACHINE_SWAPPED),
            "worker5": redfish_entry(address="https://10.0.0.15", identity="rack-3"),
        },
    )
    problems = inventory_problems(inventory)
    text = "\n".join(problems)
    assert "nodes worker1, worker2 to one machine" in text, text
    assert "nodes worker3, worker4 to one machine" in text, text
    assert "worker5: identity 'rack-3' is not a UUID" in text, text
    assert "s3cret-pass" not in text
    assert shared(inventory)["worker1"] == ("worker2",)
