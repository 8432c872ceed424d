"""Which machine a fence agent acts on, read rather than assumed (S10, issue 18): fence_redfish's
system UUID read from sushy-emulator with the agent's own parameters, an agent's ``list`` checked
for the plug and the stated identity, and the inventory's static mistakes (an agent nothing can
check without ``identity: unchecked``, one machine under two spellings) named by check-config."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import SecretStr

from nodefence.engine.identity import MachineBinding, judge
from nodefence.fencing.binding import NodeIdentity, identity_problems, inventory_problems, shared
from nodefence.fencing.drivers.fence_agent import FenceAgentDriver, ParameterValue
from nodefence.fencing.drivers.fence_agent_identity import parse_list
from nodefence.fencing.drivers.fence_agent_metadata import agent_options
from nodefence.fencing.drivers.ipmi import IpmiDriver
from nodefence.fencing.inventory import Inventory, load_inventory
from nodefence_sim.controllers.kubelet import system_uuid

from .agents import require_agent
from .identity_support import check_config
from .listing_agent import LIST_PASSWORD, listing_agent
from .peers import PASSWORD, USER, Sushy, start_ipmi_bmc
from .sushy_nodes import sushy_nodes, swapped

pytestmark = pytest.mark.invariant("S10")

__all__ = ["sushy_nodes"]

NODE = "compute01"
OTHER = "compute02"


def redfish_parameters(
    sushy: Sushy, system: str | None, *, password: str = PASSWORD, host: str = "127.0.0.1"
) -> dict[str, ParameterValue]:
    port = sushy.url.rsplit(":", 1)[1]
    parameters: dict[str, ParameterValue] = {
        "ip": host,
        "ipport": port,
        # fence_redfish's older spelling of the user: the reader takes whatever the agent takes.
        "login": USER,
        "password": SecretStr(password),
        "ssl_insecure": "1",
    }
    if system is not None:
        parameters["systems_uri"] = f"/redfish/v1/Systems/{system}"
    # As the inventory gives them: each option under the name the agent's metadata reads it by.
    return agent_options(require_agent("fence_redfish")).normalise(parameters)


def fence_agent_binding(node: str, driver: FenceAgentDriver, expected: str = "") -> MachineBinding:
    return MachineBinding(node=node, target=driver.source, driver="fence-agent", expected=expected)


# --------------------------------------------------------------------- fence_redfish, read
async def test_fence_redfish_is_bound_by_the_uuid_of_the_system_it_acts_on(
    sushy_nodes: Sushy,
) -> None:
    """Through the agent's own ip, ipport, credentials and systems_uri, nodefence's Redfish
    client reads the system's UUID: each entry is bound to its own Node only, the byte-swapped
    spelling included, exactly as for driver: redfish."""
    agent = require_agent("fence_redfish")
    systems = {NODE: system_uuid(NODE).lower(), OTHER: swapped(system_uuid(OTHER))}
    for node, system in systems.items():
        driver = FenceAgentDriver(agent, redfish_parameters(sushy_nodes, system))
        said = await driver.identity(timeout=15)
        assert said.value.lower() == system.lower(), said
        assert said.source == driver.source
        for candidate in (NODE, OTHER):
            verdict = judge(
                fence_agent_binding(candidate, driver),
                said,
                node=candidate,
                system_uuid=system_uuid(candidate),
                provider_id="",
            )
            assert verdict.bound is (candidate == node), verdict.message
            if candidate != node:
                assert "identity mismatch" in verdict.message
                assert "fence_redfish" in verdict.message


async def test_fence_redfish_identity_failures_are_no_proof_and_show_no_password(
    sushy_nodes: Sushy,
) -> None:
    agent = require_agent("fence_redfish")
    wrong = "wrong-horse-battery"
    cases = [
        (redfish_parameters(sushy_nodes, system_uuid(NODE).lower(), password=wrong), "refused"),
        # Two systems and no systems_uri: the agent would take the last one listed; nodefence
        # does not guess which machine that is.
        (redfish_parameters(sushy_nodes, None), "lists 2 systems"),
    ]
    for parameters, why in cases:
        driver = FenceAgentDriver(agent, parameters)
        said = await driver.identity(timeout=15)
        assert said.value == "", said
        assert why in said.detail, said.detail
        assert wrong not in said.detail
        assert PASSWORD not in said.detail
        verdict = judge(
            fence_agent_binding(NODE, driver),
            said,
            node=NODE,
            system_uuid=system_uuid(NODE),
            provider_id="",
        )
        assert not verdict.bound


async def test_check_fencing_names_two_spellings_of_one_redfish_system(
    sushy_nodes: Sushy, tmp_path: Path
) -> None:
    """compute02's fence_redfish line reaches compute01's system by host name, compute01's by
    address: the file cannot tell, the UUIDs they read can, and neither node is bound."""
    require_agent("fence_redfish")
    port = sushy_nodes.url.rsplit(":", 1)[1]

    def entry(host: str) -> dict[str, Any]:
        return {
            "driver": "fence-agent",
            "agent": "fence_redfish",
            "parameters": {
                "ip": host,
                "ipport": port,
                "username": USER,
                "password": PASSWORD,
                "ssl_insecure": "1",
                "systems_uri": f"/redfish/v1/Systems/{system_uuid(NODE).lower()}",
            },
        }

    inventory = write(tmp_path, {NODE: entry("127.0.0.1"), OTHER: entry("localhost")})
    assert inventory_problems(inventory) == []
    nodes = [NodeIdentity(n, system_uuid=system_uuid(n)) for n in (NODE, OTHER)]
    checks = {c.node: c for c in await identity_problems(inventory, nodes, timeout=15)}
    for node, twin in ((NODE, OTHER), (OTHER, NODE)):
        assert not checks[node].bound
        assert twin in checks[node].message, checks[node].message
        assert checks[node].reported.lower() == system_uuid(NODE).lower()


# ------------------------------------------------------------------------ the list action
def test_the_list_output_is_read_as_fencing_py_reads_it() -> None:
    listed = parse_list("Warning: noise\nN/A\nvm-a,compute01\n vm-b , compute02 \nvm-c,\n")
    assert listed == {"vm-a": "compute01", "vm-b": "compute02", "vm-c": ""}
    assert parse_list("vm-a;one\n", ";") == {"vm-a": "one"}


async def test_a_stated_identity_is_checked_against_the_agents_own_list(tmp_path: Path) -> None:
    """The agent's ``list`` (run with the parameters on stdin, never on its command line) must
    show the plug, and the stated identity must be the plug or its alias there."""
    agent = listing_agent(tmp_path / "agent", {"vm-a": NODE, "vm-b": OTHER})
    cases = [
        ("vm-a", NODE, True, f"reports vm-a ({NODE})"),
        ("vm-a", "vm-a", True, "reports vm-a"),
        ("vm-b", NODE, False, "identity mismatch"),
        ("vm-z", "vm-z", False, "list does not include plug vm-z (2 listed)"),
    ]
    for plug, stated, bound, why in cases:
        driver = FenceAgentDriver(str(agent.path), secret(agent.parameters(plug)), identity=stated)
        said = await driver.identity(timeout=15)
        verdict = judge(
            fence_agent_binding(NODE, driver, expected=stated),
            said,
            node=NODE,
            system_uuid="",
            provider_id="",
        )
        assert verdict.bound is bound, verdict.message
        assert why in verdict.message + said.detail, verdict.message
        if stated == NODE and bound:
            assert "the Node's name" in verdict.message
    runs = agent.runs()
    assert [r["action"] for r in runs] == ["list"] * 4
    for run in runs:
        assert run["password_ok"]
        assert LIST_PASSWORD not in " ".join(run["argv"])
        assert LIST_PASSWORD not in json.dumps(run["env"])
    assert agent.power("vm-a") == agent.power("vm-b") == "on"


async def test_a_list_that_fails_is_no_proof_and_shows_no_password(tmp_path: Path) -> None:
    agent = listing_agent(tmp_path / "agent", {"vm-a": NODE})
    parameters = {**agent.parameters("vm-a"), "password": "not-the-password"}
    driver = FenceAgentDriver(str(agent.path), secret(parameters), identity=NODE)
    said = await driver.identity(timeout=15)
    assert said.value == ""
    assert "list failed (exit 1)" in said.detail, said.detail
    assert "not-the-password" not in said.detail
    assert not judge(
        fence_agent_binding(NODE, driver, NODE), said, node=NODE, system_uuid="", provider_id=""
    ).bound


def secret(parameters: dict[str, str]) -> dict[str, ParameterValue]:
    return {k: SecretStr(v) if k == "password" else v for k, v in parameters.items()}


# ------------------------------------------------------------------- the inventory alone
def write(tmp_path: Path, nodes: dict[str, Any]) -> Inventory:
    path = tmp_path / "bmcs.yaml"
    path.write_text(yaml.safe_dump({"nodes": nodes}))
    return load_inventory(path)


def test_an_agent_nothing_can_check_must_say_identity_unchecked(tmp_path: Path) -> None:
    agent = listing_agent(tmp_path / "agent", {"vm-a": NODE, "vm-b": OTHER, "vm-c": "c"})
    fence_agent = {"driver": "fence-agent", "agent": str(agent.path)}
    inventory = write(
        tmp_path,
        {
            "bare": {**fence_agent, "parameters": agent.parameters("vm-a")},
            "stated": {**fence_agent, "parameters": agent.parameters("vm-b"), "identity": "x"},
            "pdu": {**fence_agent, "parameters": agent.parameters("vm-c"), "identity": "unchecked"},
            "two": {**fence_agent, "parameters": agent.parameters("vm-d,vm-e"), "identity": "y"},
            "noplug": {**fence_agent, "parameters": {"password": "p"}, "identity": "z"},
        },
    )
    text = "\n".join(inventory_problems(inventory))
    assert "node bare: nothing shows which machine fence_listing acts on" in text, text
    assert "identity: unchecked" in text
    assert "node two: plug 'vm-d,vm-e' names several machines" in text, text
    assert "node noplug: identity 'z' is checked against fence_listing's list" in text, text
    assert "node stated" not in text
    assert "node pdu" not in text
    assert LIST_PASSWORD not in text


def test_native_and_agent_entries_reaching_one_bmc_are_one_machine(tmp_path: Path) -> None:
    """``redfish`` and ``fence_redfish``, ``ipmi`` and ``fence_idrac``, ``plug`` and ``port``:
    whichever driver and spelling, one machine for two nodes is a configuration error."""
    require_agent("fence_redfish")
    require_agent("fence_idrac")
    agent = listing_agent(tmp_path / "agent", {"vm-a": NODE})
    redfish_agent = {"driver": "fence-agent", "agent": "fence_redfish"}
    inventory = write(
        tmp_path,
        {
            "r1": {
                "driver": "redfish",
                "address": "https://10.0.0.11",
                "system": "1",
                "username": "u",
                "password": "p",
            },
            "r2": {
                **redfish_agent,
                "parameters": {
                    "ip": "10.0.0.11:443",
                    "username": "u",
                    "password": "p",
                    "systems_uri": "/redfish/v1/Systems/1/",
                },
            },
            "r3": {
                **redfish_agent,
                "parameters": {"ip": "10.0.0.11", "password": "p", "systems_uri": "/x/2"},
            },
            "i1": {"driver": "ipmi", "address": "10.0.0.12", "username": "u", "password": "p"},
            "i2": {
                "driver": "fence-agent",
                "agent": "fence_idrac",
                "parameters": {"ipaddr": "10.0.0.12", "login": "u", "passwd": "p"},
            },
            "v1": {
                "driver": "fence-agent",
                "agent": str(agent.path),
                "parameters": {"ip": "h", "password": "p", "plug": "vm-a"},
                "identity": NODE,
            },
            "v2": {
                "driver": "fence-agent",
                "agent": str(agent.path),
                "parameters": {"ipaddr": "h", "password": "p", "port": "vm-a"},
                "identity": "other-name",
            },
        },
    )
    sharing = shared(inventory)
    assert sharing["r1"] == ("r2",), sharing
    assert sharing["i1"] == ("i2",), sharing
    assert sharing["v1"] == ("v2",), sharing
    assert "r3" not in sharing
    text = "\n".join(inventory_problems(inventory))
    assert "nodes r1, r2 to one machine" in text, text
    assert "nodes i1, i2 to one machine" in text, text
    assert "nodes v1, v2 to one machine" in text, text


def test_fence_redfish_and_fence_ipmilan_need_no_unchecked_but_a_uuid_identity(
    tmp_path: Path,
) -> None:
    require_agent("fence_redfish")
    require_agent("fence_ipmilan")
    inventory = write(
        tmp_path,
        {
            "r": {
                "driver": "fence-agent",
                "agent": "fence_redfish",
                "parameters": {"ip": "10.0.0.1", "username": "u", "password": "p"},
            },
            "i": {
                "driver": "fence-agent",
                "agent": "fence_ipmilan",
                "parameters": {"ip": "10.0.0.2", "username": "u", "password": "p"},
                "identity": "rack-3",
            },
            "b": {
                "driver": "fence-agent",
                "agent": "fence_ipmilan",
                "parameters": {"ip": "10.0.0.3", "password": "p", "target": "0x82"},
            },
        },
    )
    text = "\n".join(inventory_problems(inventory))
    assert "node r" not in text, text
    assert "node i: identity 'rack-3' is not a UUID" in text, text
    assert "node b: nodefence cannot read which machine fence_ipmilan acts on" in text, text
    assert "bridges to the IPMI target 0x82" in text, text


def test_check_config_refuses_an_agent_nothing_can_check(tmp_path: Path) -> None:
    agent = listing_agent(tmp_path / "agent", {"vm-a": NODE})
    entry = {"driver": "fence-agent", "agent": str(agent.path), "parameters": {"plug": "vm-a"}}
    rules = {"rules": [{"name": "default", "fencing": {"driver": "fence-agent"}}]}
    results = []
    for identity in (None, "unchecked", NODE):
        bmcs = tmp_path / "bmcs.yaml"
        given = {**entry, **({"identity": identity} if identity else {})}
        bmcs.write_text(yaml.safe_dump({"nodes": {NODE: given}}))
        checked = check_config(tmp_path, bmcs, rules)
        results.append((checked.returncode, checked.stderr))
    (code, err), (unchecked, _), (stated, _) = results
    assert code == 2, err
    assert f"node {NODE}: nothing shows which machine fence_listing acts on" in err
    assert unchecked == 0
    assert stated == 0


async def test_a_bmc_is_read_again_by_a_new_driver_after_the_last_one_closed(
    tmp_path: Path,
) -> None:
    """Every fence, probe and identity read opens its own IPMI driver and closes it: a closed
    session pyghmi still hands out must not make the next reads of the same BMC fail."""
    bmc = start_ipmi_bmc(tmp_path, guid=system_uuid(NODE))
    try:
        for _ in range(3):
            driver = IpmiDriver(
                "127.0.0.1",
                username=USER,
                password=SecretStr(PASSWORD),
                port=bmc.port,
                poll_interval=0.2,
            )
            try:
                said = await driver.identity(timeout=15)
                reading = await driver.status(timeout=15)
            finally:
                await driver.close()
            assert said.value.upper() == system_uuid(NODE), said
            assert reading.state == "on", reading.detail
    finally:
        bmc.process.stop()


async def test_check_fencing_reads_each_stated_identity_through_the_agents_list(
    tmp_path: Path,
) -> None:
    """What check-fencing calls: the agent's list is run (read-only: no power action), each
    node bound only when its plug is listed under its stated identity; a plug the list lacks and
    a plug listed as another node's machine are named."""
    agent = listing_agent(tmp_path / "agent", {"vm-a": NODE, "vm-b": OTHER})

    def entry(plug: str, identity: str) -> dict[str, Any]:
        return {
            "driver": "fence-agent",
            "agent": str(agent.path),
            "parameters": agent.parameters(plug),
            "identity": identity,
        }

    inventory = write(
        tmp_path,
        {NODE: entry("vm-a", NODE), OTHER: entry("vm-z", OTHER), "control01": entry("vm-b", "x")},
    )
    assert inventory_problems(inventory) == []
    nodes = [NodeIdentity(n) for n in (NODE, OTHER, "control01")]
    checks = {c.node: c for c in await identity_problems(inventory, nodes, timeout=15)}
    assert checks[NODE].bound, checks[NODE].message
    assert checks[NODE].reported == "vm-a"
    assert not checks[OTHER].bound
    assert "does not include plug vm-z" in checks[OTHER].message, checks[OTHER].message
    assert not checks["control01"].bound
    assert f"vm-b ({OTHER})" in checks["control01"].message, checks["control01"].message
    assert set(agent.actions()) == {"list"}
    assert agent.power("vm-a") == agent.power("vm-b") == "on"
