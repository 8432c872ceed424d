"""Credentials at the edges (S10, secrets): every credential an agent's metadata lists is a secret
under each of its spellings, an IPMI Kg never reaches a command line, and no output shows one."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import SecretStr

from nodefence.fencing.drivers.fence_agent import is_secret_key
from nodefence.fencing.drivers.fence_agent_metadata import agent_options
from nodefence.fencing.drivers.ipmi import IpmiBmc, IpmiDriver
from nodefence.fencing.inventory import InventoryError

from .agents import load_yaml_inventory, require_agent
from .test_agent_spellings import AGENTS

KG = "0123456789abcdef0123456789abcdef01234567"
# The credentials the agents' metadata names: passwords, keys, tokens, SNMP secrets, the Kg.
CREDENTIALS = {
    "password",
    "passwd",
    "password_script",
    "passwd_script",
    "secret_key",
    "access_key",
    "apikey",
    "token",
    "community",
    "snmp_priv_passwd",
    "snmp_priv_passwd_script",
    "hexadecimal_kg",
    "key",
}


@pytest.mark.parametrize("name", AGENTS)
def test_every_spelling_of_a_credential_is_a_secret(name: str) -> None:
    """Each credential option of the agent, under its key, its long option and the name the
    inventory gives it, is masked: a spelling the mask missed would be printed in clear."""
    options = agent_options(require_agent(name))
    for key, long in options.long_options.items():
        canonical = options.canonical(key)
        spellings = {key, long, long.replace("-", "_"), str(canonical)}
        if spellings & CREDENTIALS:
            for spelling in spellings:
                assert is_secret_key(spelling), (name, spelling)


@pytest.mark.parametrize("agent", ["fence_ipmilan", "fence_idrac", "fence_ipmilanplus"])
def test_a_kg_for_ipmitools_command_line_is_refused(tmp_path: Path, agent: str) -> None:
    """fence_ipmilan hands the Kg to ipmitool as ``-y KEY``: on the command line, for every
    process to read while it runs. Refused at load, pointing at the native driver."""
    with pytest.raises(InventoryError) as caught:
        load_yaml_inventory(
            tmp_path,
            {
                "nodes": {
                    "compute01": {
                        "driver": "fence-agent",
                        "agent": require_agent(agent),
                        "identity": "unchecked",
                        "parameters": {
                            "ip": "10.0.0.12",
                            "username": "admin",
                            "password": "ipmi-Pa55",
                            "hexadecimal_kg": KG,
                        },
                    }
                }
            },
        )
    message = str(caught.value)
    assert "driver: ipmi with kg" in message
    assert "command line" in message
    assert KG not in message
    assert "ipmi-Pa55" not in message


def test_the_native_ipmi_driver_takes_the_kg_as_a_secret(tmp_path: Path) -> None:
    inventory = load_yaml_inventory(
        tmp_path,
        {
            "nodes": {
                "compute01": {
                    "driver": "ipmi",
                    "address": "10.0.0.12",
                    "username": "admin",
                    "password": "ipmi-Pa55",
                    "kg": KG,
                }
            }
        },
    )
    bmc = inventory.nodes["compute01"]
    assert isinstance(bmc, IpmiBmc)
    assert isinstance(bmc.kg, SecretStr)
    assert bmc.kg.get_secret_value() == KG
    shown = yaml.safe_dump(inventory.describe()) + repr(inventory)
    assert KG not in shown
    driver = inventory.driver_for("compute01")
    assert isinstance(driver, IpmiDriver)
    assert KG not in repr(driver.__dict__)


def test_a_kg_that_is_not_hexadecimal_is_refused_without_showing_it(tmp_path: Path) -> None:
    with pytest.raises(InventoryError) as caught:
        load_yaml_inventory(
            tmp_path,
            {
                "nodes": {
                    "compute01": {
                        "driver": "ipmi",
                        "address": "10.0.0.12",
                        "username": "admin",
                        "password": "ipmi-Pa55",
                        "kg": "not-hex-Secret",
                    }
                }
            },
        )
    assert "kg must be hexadecimal" in str(caught.value)
    assert "not-hex-Secret" not in str(caught.value)
