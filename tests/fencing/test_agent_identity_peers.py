"""The wrong-mapping attack of issue 18 through ``fencing.driver: fence-agent``, end to end: the
receiver, the simulated cluster and real agents against BMCs nobody here wrote. fence_redfish
against the simulator's Redfish BMCs behind TLS (each system reports its node's systemUUID, as
hardware does), fence_ipmilan against the pyghmi BMC answering Get System GUID, and an agent whose
``list`` names its machines. A line pointing a node at another machine powers nothing off and
taints nothing, with the reason; the right line fences, and the proof says which machine."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.seeded_cluster import firing, node_events, oos_taints

from nodefence_sim.controllers.kubelet import system_uuid
from nodefence_sim.redfish import SYSTEMS, bmcs_of
from nodefence_sim.testing import SimulatorHandle

from .agents import require_agent
from .fence_agent_support import kill, receiver, text_of
from .identity_support import record_entries
from .listing_agent import LIST_PASSWORD, listing_agent
from .peers import USER, start_ipmi_bmc
from .tls_front import sim_bmc_parameters, tls_bmc

__all__ = ["tls_bmc"]

NODE = "compute01"
OTHER = "compute02"
# IPMI 2.0 passwords are at most 20 bytes; ipmitool refuses longer ones.
IPMI_PASSWORD = "ipmi-Pa55-20-bytes"


def write(tmp_path: Path, nodes: dict[str, Any]) -> Path:
    path = tmp_path / "bmcs.yaml"
    path.write_text(yaml.safe_dump({"nodes": nodes}))
    return path


def fence_redfish(cluster: SimulatorHandle, port: int, system: str) -> dict[str, Any]:
    require_agent("fence_redfish")
    return {
        "driver": "fence-agent",
        "agent": "fence_redfish",
        "parameters": sim_bmc_parameters(cluster.sim, port, f"{SYSTEMS}/{system}"),
    }


async def test_fence_redfish_mapped_to_another_nodes_system_powers_nothing_off(
    cluster: SimulatorHandle, tls_bmc: int, tmp_path: Path
) -> None:
    """compute01's line points fence_redfish at compute02's system (compute02 is not in the
    inventory, so nothing in the file betrays it). The system's UUID is compute02's: no ForceOff
    anywhere, compute02 stays Ready, no taint, the claim let go, and the reason names both."""
    bmcs = write(tmp_path, {NODE: fence_redfish(cluster, tls_bmc, OTHER)})
    await kill(cluster, NODE)
    async with receiver(cluster, bmcs) as nodefence:
        [decision] = await nodefence.alert(firing(NODE))
    text = text_of(decision)
    assert decision["verdict"] != "fence", text
    assert "identity mismatch" in text, text
    assert system_uuid(OTHER) in text.upper(), text
    assert system_uuid(NODE) in text.upper(), text
    assert bmcs_of(cluster.sim).resets == []
    assert cluster.sim.node_state(OTHER)["ready"] == "True"
    assert oos_taints(cluster, NODE) == []
    assert record_entries(cluster) == (), "the claim was not let go"
    failed = [e for e in node_events(cluster, NODE) if e["reason"] == "NodefenceActionFailed"]
    assert failed, node_events(cluster, NODE)
    assert "identity mismatch" in failed[-1]["message"]
    assert bmcs_of(cluster.sim).password.get_secret_value() not in str(decision)


async def test_fence_redfish_on_the_nodes_own_system_fences_with_the_identity_in_the_proof(
    cluster: SimulatorHandle, tls_bmc: int, tmp_path: Path
) -> None:
    bmcs = write(
        tmp_path,
        {
            NODE: fence_redfish(cluster, tls_bmc, NODE),
            OTHER: fence_redfish(cluster, tls_bmc, OTHER),
        },
    )
    await kill(cluster, NODE)
    async with receiver(cluster, bmcs) as nodefence:
        [decision] = await nodefence.alert(firing(NODE))
    assert decision["verdict"] == "fence", text_of(decision)
    assert bmcs_of(cluster.sim).resets == [(NODE, "ForceOff")]
    assert len(oos_taints(cluster, NODE)) == 1
    [entry] = record_entries(cluster)
    assert "fence_redfish" in entry.proof, entry.proof
    assert "identity matched" in entry.proof, entry.proof
    assert system_uuid(NODE) in entry.proof.upper(), entry.proof
    assert "identity unchecked" not in text_of(decision)


@pytest.mark.parametrize(("guid_of", "fenced"), [(OTHER, False), (NODE, True)])
async def test_fence_ipmilan_is_bound_by_the_bmcs_system_guid(
    cluster: SimulatorHandle, tmp_path: Path, guid_of: str, *, fenced: bool
) -> None:
    """The pyghmi BMC answers Get System GUID with ``guid_of``'s systemUUID. Another node's:
    ipmitool is never asked to power off and nothing is tainted. compute01's own: the fence
    goes through fence_ipmilan and the proof names the GUID."""
    require_agent("fence_ipmilan")
    if shutil.which("ipmitool") is None:
        pytest.skip("ipmitool is not installed (Debian package ipmitool)")
    bmc = start_ipmi_bmc(
        tmp_path, power="on", off_delay=0.5, password=IPMI_PASSWORD, guid=system_uuid(guid_of)
    )
    try:
        entry = {
            "driver": "fence-agent",
            "agent": "fence_ipmilan",
            "parameters": {
                "ip": "127.0.0.1",
                "ipport": str(bmc.port),
                "username": USER,
                "password": IPMI_PASSWORD,
                "lanplus": "1",
                # pyghmi's BMC speaks cipher suite 3 only.
                "cipher": "3",
            },
        }
        await kill(cluster, NODE)
        async with receiver(cluster, write(tmp_path, {NODE: entry})) as nodefence:
            [decision] = await nodefence.alert(firing(NODE))
        text = text_of(decision)
        output = bmc.process.output()
    finally:
        bmc.process.stop()
    assert IPMI_PASSWORD not in text
    if not fenced:
        assert decision["verdict"] != "fence", text
        assert "identity mismatch" in text, text
        assert system_uuid(OTHER) in text.upper(), text
        assert "power off requested" not in output
        assert oos_taints(cluster, NODE) == []
        assert record_entries(cluster) == ()
        return
    assert decision["verdict"] == "fence", text
    assert "power off requested" in output
    assert len(oos_taints(cluster, NODE)) == 1
    [record] = record_entries(cluster)
    assert system_uuid(NODE) in record.proof.upper(), record.proof
    assert "identity matched" in record.proof


async def test_a_listed_plug_fences_and_another_machines_plug_powers_nothing_off(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    """The inventory says compute01's machine is the one its agent lists as compute01. Pointed
    at vm-b (listed as compute02) nothing is sent; pointed at vm-a the fence proceeds, the list
    read before the off and again with the proof."""
    agent = listing_agent(tmp_path / "agent", {"vm-a": NODE, "vm-b": OTHER})

    def entry(plug: str) -> dict[str, Any]:
        return {
            "driver": "fence-agent",
            "agent": str(agent.path),
            "parameters": agent.parameters(plug),
            "identity": NODE,
        }

    await kill(cluster, NODE)
    async with receiver(cluster, write(tmp_path, {NODE: entry("vm-b")})) as nodefence:
        [refused] = await nodefence.alert(firing(NODE))
    assert refused["verdict"] != "fence", text_of(refused)
    assert "identity mismatch" in text_of(refused), text_of(refused)
    assert f"vm-b ({OTHER})" in text_of(refused), text_of(refused)
    assert agent.actions() == ["list"]
    assert agent.power("vm-b") == "on"
    assert oos_taints(cluster, NODE) == []
    assert record_entries(cluster) == ()

    async with receiver(cluster, write(tmp_path, {NODE: entry("vm-a")})) as nodefence:
        [fenced] = await nodefence.alert(firing(NODE))
    assert fenced["verdict"] == "fence", text_of(fenced)
    actions = agent.actions()[1:]
    assert actions[0] == "list", actions
    assert "off" in actions
    assert actions.index("off") > 0
    assert "list" in actions[actions.index("off") :], "the identity was not read with the proof"
    assert agent.power("vm-a") == "off"
    assert agent.power("vm-b") == "on"
    assert len(oos_taints(cluster, NODE)) == 1
    [record] = record_entries(cluster)
    assert "identity matched (vm-a)" in record.proof, record.proof
    for run in agent.runs():
        assert LIST_PASSWORD not in " ".join(run["argv"])
    assert LIST_PASSWORD not in text_of(fenced) + str(node_events(cluster, NODE))
