"""One option, two spellings (S10): fencing.py reads ``systems_uri`` and ``systems-uri``,
``plug`` and ``port``, ``ip`` and ``ipaddr`` as one option and acts on the last line. nodefence
takes each agent's own description of its options, gives every option one name, and refuses an
entry that spells one option twice; so what it judges is what the agent acts on. The agent's side
is read from the real fence-agents: their own stdin parser, run on exactly the lines nodefence
sends."""

from __future__ import annotations

import json
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from pydantic import SecretStr

from nodefence.engine.identity import MachineBinding, judge
from nodefence.fencing.drivers.fence_agent import FenceAgentBmc, FenceAgentDriver, is_secret_key
from nodefence.fencing.drivers.fence_agent_identity import text_option
from nodefence.fencing.drivers.redfish import RedfishDriver
from nodefence.fencing.inventory import InventoryError
from nodefence_sim.controllers.kubelet import system_uuid

from .agents import load_yaml_inventory, require_agent
from .peers import PASSWORD, USER, Sushy
from .sushy_nodes import NODE, OTHER, sushy_nodes, swapped

__all__ = ["sushy_nodes"]

# The agents the documentation names.
AGENTS = (
    "fence_redfish",
    "fence_ipmilan",
    "fence_ipmilanplus",
    "fence_idrac",
    "fence_imm",
    "fence_ilo3",
    "fence_openstack",
    "fence_aws",
    "fence_gce",
    "fence_azure_arm",
    "fence_vmware_rest",
    "fence_kubevirt",
    "fence_scsi",
)
# Options the inventory refuses (nodefence sets the action; the others write credentials out or
# act on another address than ip), left out of the spellings sent here.
RESERVED = {"action", "debug_file", "verbose", "verbose_level", "port_as_ip"}

# The agent's own main(), with its check_input (the first step after fencing.py has parsed stdin)
# replaced by a print of what was parsed: the options it would act on, keyed by long option.
_PARSER = r"""
import json, sys
sys.path.insert(0, "/usr/share/fence")
agent = sys.argv[1]
def parsed(device_opt, opt, other_conditions=False):
    print(json.dumps(opt))
    sys.exit(0)
namespace = {"__name__": "fence_agent_under_test", "__file__": agent}
exec(compile(open(agent).read(), agent, "exec"), namespace)
namespace["check_input"] = parsed
sys.argv = [agent]
namespace["main"]()
"""


def parsed_by_agent(agent: str, stdin: bytes) -> dict[str, str]:
    """What the agent's own parser makes of ``stdin``: ``{"--plug": ..., "--ip": ...}``."""
    done = subprocess.run(
        ["/usr/bin/python3", "-c", _PARSER, agent],
        input=stdin,
        capture_output=True,
        timeout=60,
        check=True,
    )
    result: dict[str, str] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return result


def valued_spellings(agent: str) -> list[tuple[str, str, str]]:
    """Each (deprecated spelling, newer spelling, long option) of the agent's options that take
    a value, read from its metadata with an XML parser of its own (not nodefence's)."""
    text = subprocess.run(
        [agent, "-o", "metadata"], capture_output=True, timeout=60, check=True
    ).stdout
    spellings = []
    # The installed agent's own description, not untrusted input.
    root = ET.fromstring(text)  # noqa: S314
    for parameter in root.iter("parameter"):
        older = parameter.get("obsoletes")
        getopt = parameter.find("getopt")
        mixed = getopt.get("mixed", "") if getopt is not None else ""
        newer = str(parameter.get("name"))
        if older and "=[" in mixed and newer not in RESERVED:
            long = mixed.split("--", 1)[1].split("=", 1)[0]
            spellings.append((older, newer, long))
    return spellings


@pytest.mark.parametrize("name", AGENTS)
def test_what_nodefence_judges_is_what_the_agent_parses(tmp_path: Path, name: str) -> None:
    """Every option the agent knows under two spellings, one in ``defaults`` and the other in the
    entry (both ways round): the entry's value wins in nodefence and in the agent's own parser,
    under one name, and a credential stays a secret under either spelling."""
    agent = require_agent(name)
    spellings = valued_spellings(agent)
    assert spellings, f"{name} lists no option under two spellings"
    for default_index, entry_index in ((0, 1), (1, 0)):
        defaults = {pair[default_index]: f"default-{pair[2]}" for pair in spellings}
        own = {pair[entry_index]: f"entry-{pair[2]}" for pair in spellings}
        inventory = load_yaml_inventory(
            tmp_path,
            {
                "defaults": {"fence-agent": {"agent": agent, "parameters": defaults}},
                "nodes": {
                    NODE: {"driver": "fence-agent", "identity": "unchecked", "parameters": own}
                },
            },
        )
        bmc = inventory.nodes[NODE]
        assert isinstance(bmc, FenceAgentBmc)
        driver = inventory.driver_for(NODE)
        assert isinstance(driver, FenceAgentDriver)
        parsed = parsed_by_agent(agent, driver._stdin("status"))
        for older, newer, long in spellings:
            # One name per option, whichever spelling the entry used: the newer one.
            assert older not in bmc.parameters or older == newer
            assert text_option(bmc.parameters, newer) == f"entry-{long}" or is_secret_key(newer)
            assert parsed[f"--{long}"] == f"entry-{long}", (older, newer)
            if is_secret_key(older) or is_secret_key(newer):
                assert isinstance(bmc.parameters[newer], SecretStr), newer
        # The options nodefence names the machine by are those the agent parsed.
        for option, long in (("ip", "ip"), ("plug", "plug"), ("systems_uri", "systems-uri")):
            if f"--{long}" in parsed:
                assert text_option(bmc.parameters, option) == parsed[f"--{long}"]


@pytest.mark.parametrize(
    ("parameters", "named"),
    [
        (
            {"systems_uri": "/redfish/v1/Systems/1", "systems-uri": "/redfish/v1/Systems/2"},
            "systems",
        ),
        ({"plug": "vm-first", "port": "vm-second"}, "plug and port"),
        ({"ip": "10.0.0.11", "ipaddr": "10.0.0.12"}, "ip and ipaddr"),
        ({"username": "user-first", "login": "user-second"}, "username and login"),
    ],
)
def test_one_option_under_two_spellings_in_an_entry_is_refused(
    tmp_path: Path, parameters: dict[str, str], named: str
) -> None:
    """The agent would act on the later line, whichever nodefence looked at: the entry is an
    error naming both keys (never a value), and nothing loads."""
    agent = require_agent("fence_redfish")
    with pytest.raises(InventoryError) as caught:
        load_yaml_inventory(
            tmp_path,
            {"nodes": {NODE: {"driver": "fence-agent", "agent": agent, "parameters": parameters}}},
        )
    message = str(caught.value)
    assert NODE in message
    assert named in message or all(key in message for key in parameters), message
    assert "one option" in message
    for value in parameters.values():
        assert value not in message


def test_an_option_the_agent_does_not_read_is_refused(tmp_path: Path) -> None:
    """A misspelt option is ignored by the agent with a warning; nodefence would have judged a
    machine by it. An error, naming the key."""
    agent = require_agent("fence_redfish")
    with pytest.raises(InventoryError, match="systems_url"):
        load_yaml_inventory(
            tmp_path,
            {
                "nodes": {
                    NODE: {
                        "driver": "fence-agent",
                        "agent": agent,
                        "parameters": {"ip": "10.0.0.11", "systems_url": "/redfish/v1/Systems/1"},
                    }
                }
            },
        )


async def test_a_respelt_override_is_judged_and_acted_on_as_one(
    tmp_path: Path, sushy_nodes: Sushy
) -> None:
    """The README's pattern with a mistaken entry: ``defaults`` give ``systems_uri`` for the
    node's own system, compute01's entry overrides it as ``systems-uri`` with compute02's
    system. nodefence reads the identity of the system the agent acts on (compute02's), so the
    binding to compute01 fails before any power action; and that system is the one the agent
    powers off when asked."""
    agent = require_agent("fence_redfish")
    port = sushy_nodes.url.rsplit(":", 1)[1]
    own = system_uuid(NODE).lower()
    other = swapped(system_uuid(OTHER))
    inventory = load_yaml_inventory(
        tmp_path,
        {
            "defaults": {
                "fence-agent": {
                    "agent": agent,
                    "parameters": {
                        "ip": "127.0.0.1",
                        "ipport": port,
                        "username": USER,
                        "password": PASSWORD,
                        "ssl_insecure": "1",
                        "systems_uri": f"/redfish/v1/Systems/{own}",
                    },
                }
            },
            "nodes": {
                NODE: {
                    "driver": "fence-agent",
                    "parameters": {"systems-uri": f"/redfish/v1/Systems/{other}"},
                }
            },
        },
    )
    driver = inventory.driver_for(NODE)
    assert isinstance(driver, FenceAgentDriver)
    said = await driver.identity(timeout=15)
    assert said.value.lower() == other.lower(), said
    verdict = judge(
        MachineBinding(node=NODE, target=driver.source, driver="fence-agent"),
        said,
        node=NODE,
        system_uuid=system_uuid(NODE),
        provider_id="",
    )
    assert not verdict.bound, verdict.message
    assert other in driver.source
    # The agent acts on the same system nodefence read: compute02's goes off, compute01's stays.
    off = await driver.power_off(timeout=60)
    assert off.state == "off", off.detail
    for system, expected in ((other, "Off"), (own, "On")):
        reader = RedfishDriver(
            sushy_nodes.url,
            username=USER,
            password=SecretStr(PASSWORD),
            system=system,
            auth="basic",
            ca_file=str(sushy_nodes.ca_file),
        )
        try:
            reading = await reader.status(timeout=15)
        finally:
            await reader.close()
        assert reading.raw_state == expected, (system, reading)
