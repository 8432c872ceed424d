"""Fence-agent inventory entries, shared defaults with ``{node}``, and the one driver registry:
a bad entry is a clear error naming the field (never quoting a secret) and loads nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from nodefence.engine.drivers import lookup, names, power_drivers
from nodefence.fencing.drivers.fence_agent import FenceAgentBmc, FenceAgentDriver
from nodefence.fencing.inventory import InventoryError
from nodefence.fencing.registry import conflicts, power_driver
from nodefence.policy import PolicyError, parse_policy

from .agents import load_yaml_inventory, scripted_agent

SECRET = "sh4red-Secret-value"


def test_a_fence_agent_entry_loads_with_secret_parameters(tmp_path: Path) -> None:
    agent = scripted_agent(tmp_path, "honest")
    inventory = load_yaml_inventory(
        tmp_path,
        {
            "nodes": {
                "w1": {
                    "driver": "fence-agent",
                    "agent": str(agent.path),
                    "parameters": {"ip": "10.0.0.1", "password": SECRET, "secret_key": SECRET},
                }
            }
        },
    )
    entry = inventory.nodes["w1"]
    assert isinstance(entry, FenceAgentBmc)
    assert isinstance(entry.parameters["password"], SecretStr)
    assert isinstance(entry.parameters["secret_key"], SecretStr)
    assert entry.parameters["ip"] == "10.0.0.1"
    assert SECRET not in repr(inventory)
    described = inventory.describe()["nodes"]["w1"]
    assert described["parameters"] == {"ip": "10.0.0.1", "password": "***", "secret_key": "***"}
    assert "password" not in described  # no stray top-level key for agents
    assert isinstance(inventory.driver_for("w1"), FenceAgentDriver)


def test_an_agent_name_is_found_on_path_and_in_sbin(tmp_path: Path) -> None:
    from .agents import require_agent

    path = require_agent("fence_redfish")
    inventory = load_yaml_inventory(
        tmp_path, {"nodes": {"w1": {"driver": "fence-agent", "agent": "fence_redfish"}}}
    )
    assert inventory.nodes["w1"].agent == path


def test_defaults_are_shared_and_node_placeholders_filled(tmp_path: Path) -> None:
    agent = scripted_agent(tmp_path, "honest")
    inventory = load_yaml_inventory(
        tmp_path,
        {
            "defaults": {
                "fence-agent": {
                    "agent": str(agent.path),
                    "parameters": {
                        "username": "fencer",
                        "password": SECRET,
                        "systems_uri": "/redfish/v1/Systems/{node}",
                        "ip": "{node}-bmc.example",
                    },
                }
            },
            "nodes": {
                "w1": {"driver": "fence-agent"},
                "w2": {"driver": "fence-agent", "parameters": {"ip": "10.0.0.2"}},
            },
        },
    )
    one, two = inventory.nodes["w1"], inventory.nodes["w2"]
    assert one.parameters["systems_uri"] == "/redfish/v1/Systems/w1"
    assert one.parameters["ip"] == "w1-bmc.example"
    assert two.parameters["ip"] == "10.0.0.2"  # the node's own value wins
    assert two.parameters["systems_uri"] == "/redfish/v1/Systems/w2"
    assert isinstance(two.parameters["password"], SecretStr)


def test_named_defaults_serve_the_entries_that_use_them(tmp_path: Path) -> None:
    openstack = scripted_agent(tmp_path / "os", "honest")
    aws = scripted_agent(tmp_path / "aws", "honest")
    inventory = load_yaml_inventory(
        tmp_path,
        {
            "defaults": {
                "openstack": {
                    "driver": "fence-agent",
                    "agent": str(openstack.path),
                    "parameters": {"password": SECRET, "project-name": "k8s"},
                },
                "aws": {"driver": "fence-agent", "agent": str(aws.path)},
            },
            "nodes": {
                "vm1": {"use": "openstack", "parameters": {"plug": "5f0c"}},
                "vm2": {"use": "aws", "parameters": {"plug": "i-0abc"}},
            },
        },
    )
    one, two = inventory.nodes["vm1"], inventory.nodes["vm2"]
    assert one.agent == str(openstack.path)
    # Under the name the agent reads it by (its long option --project-name, with "_" for "-").
    assert one.parameters["project_name"] == "k8s"
    assert one.parameters["plug"] == "5f0c"
    assert two.agent == str(aws.path)
    assert "password" not in two.parameters


def test_defaults_also_serve_redfish_entries(tmp_path: Path) -> None:
    inventory = load_yaml_inventory(
        tmp_path,
        {
            "defaults": {"redfish": {"username": "fencer", "password": SECRET, "auth": "basic"}},
            "nodes": {"w1": {"driver": "redfish", "address": "https://{node}.bmc", "system": "1"}},
        },
    )
    # Placeholders are filled in the defaults only; an entry's own values are literal.
    assert inventory.nodes["w1"].address == "https://{node}.bmc"
    assert inventory.nodes["w1"].auth == "basic"


@pytest.mark.parametrize(
    ("entry", "defaults", "message"),
    [
        ({"agent": "fence_nowhere_at_all"}, None, "fence agent fence_nowhere_at_all is not"),
        ({"agent": "bin/fence_x"}, None, "give a name on PATH or an absolute path"),
        ({"agent": "/nonexistent/fence_x"}, None, "does not exist or is not executable"),
        ({"parameters": {"ipport": 443}}, None, "values are strings (quote 443)"),
        ({"parameters": {"password": 12345}}, None, "values are strings (quote a value)"),
        ({"parameters": {"plug": "a\naction=reboot"}}, None, "may not contain a line break"),
        ({"parameters": {"action": "reboot"}}, None, "parameter action is not allowed"),
        ({"parameters": {"debug_file": "/tmp/x"}}, None, "parameter debug_file is not allowed"),
        ({"parameters": {"bad key": "x"}}, None, "is not a fence agent option name"),
        ({}, {"fence-agent": {"parameters": {"ip": "{host}"}}}, "unknown placeholder {host}"),
        ({}, {"pdu": {}}, "defaults.pdu: no entry uses it"),
        ({}, {"fence-agent": {"driver": "ipmi"}}, "the defaults of a driver are its own"),
        ({"use": "aws"}, None, "nodes.w1.use: no defaults named 'aws'"),
    ],
)
def test_bad_fence_agent_entries_fail_clearly(
    tmp_path: Path, entry: dict[str, Any], defaults: dict[str, Any] | None, message: str
) -> None:
    agent = scripted_agent(tmp_path, "honest")
    data: dict[str, Any] = {
        "nodes": {
            "w1": {
                "driver": "fence-agent",
                "agent": str(agent.path),
                "parameters": {"password": SECRET},
                **entry,
            }
        }
    }
    if defaults is not None:
        data["defaults"] = defaults
    with pytest.raises(InventoryError) as raised:
        load_yaml_inventory(tmp_path, data)
    assert message in str(raised.value)
    assert SECRET not in str(raised.value)
    assert "12345" not in str(raised.value)


def test_the_policys_driver_names_are_the_registrys() -> None:
    for name in names():
        fencing = {"driver": name, "url": "http://power/{node}"}
        assert parse_policy({"rules": [{"name": "r", "fencing": fencing}]}).rules[0].fencing
    with pytest.raises(PolicyError, match="unknown fencing driver 'pdu'"):
        parse_policy({"rules": [{"name": "r", "fencing": {"driver": "pdu"}}]})
    assert set(power_drivers()) == {"redfish", "ipmi", "fence-agent"}
    assert lookup("fence-agent").powers
    with pytest.raises(ValueError, match="unknown fencing driver 'pdu'"):
        lookup("pdu")


def test_fence_agent_rules_may_power_off_and_reboot() -> None:
    policy = parse_policy(
        {"rules": [{"name": "vm", "fencing": {"driver": "fence-agent", "action": "reboot"}}]}
    )
    fencing = policy.rules[0].fencing
    assert fencing is not None
    assert fencing.powers


def test_a_rule_entry_mismatch_is_no_driver_and_a_conflict(tmp_path: Path) -> None:
    inventory = load_yaml_inventory(
        tmp_path,
        {
            "nodes": {
                "w1": {
                    "driver": "ipmi",
                    "address": "192.0.2.1",
                    "username": "u",
                    "password": SECRET,
                }
            }
        },
    )
    driver, why = power_driver(inventory, "w1", "redfish")
    assert driver is None
    assert "fences with driver redfish but the inventory entry for node w1 is driver ipmi" in why
    same, _ = power_driver(inventory, "w1", "ipmi")
    assert same is not None
    policy = parse_policy({"rules": [{"name": "default", "fencing": {"driver": "redfish"}}]})
    (static,) = conflicts(policy, inventory)
    assert "node w1 is driver ipmi but no rule fences with it" in static
    (live,) = conflicts(policy, inventory, [("w1", {})])
    assert "rule 'default' fences with driver redfish" in live
    # A rule whose selector does not match the node is no conflict on the cluster's facts.
    scoped = parse_policy(
        {
            "rules": [
                {
                    "name": "bm",
                    "match": {"node_selector": "hw=bm"},
                    "fencing": {"driver": "redfish"},
                },
                {"name": "rest", "fencing": {"driver": "ipmi"}},
            ]
        }
    )
    assert conflicts(scoped, inventory, [("w1", {"hw": "vm"})]) == []
    assert conflicts(scoped, inventory) == []
