"""The BMC inventory: strict loading with errors that name the file and the field, and
passwords that appear in no error and no description."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodefence.fencing.drivers.ipmi import IpmiDriver
from nodefence.fencing.drivers.redfish import RedfishDriver
from nodefence.fencing.inventory import InventoryError, load_inventory

from .closing import Opened

SECRET = "pa55-w0rd-that-must-not-leak"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bmc-inventory.yaml"
    path.write_text(text)
    return path


def valid(tmp_path: Path) -> Path:
    ca = tmp_path / "ca.pem"
    ca.write_text("not parsed at load time\n")
    return write(
        tmp_path,
        f"""
nodes:
  worker1:
    driver: redfish
    address: https://10.0.0.11
    system: /redfish/v1/Systems/1
    username: fencer
    password: {SECRET}
    tls: {{ca_file: {ca}}}
  worker2:
    driver: ipmi
    address: 10.0.0.12
    port: 6230
    username: fencer
    password: {SECRET}
""",
    )


async def test_a_valid_inventory_gives_a_driver_per_listed_node(
    tmp_path: Path, opened: Opened
) -> None:
    inventory = load_inventory(valid(tmp_path))
    redfish = inventory.driver_for("worker1")
    ipmi = inventory.driver_for("worker2")
    assert isinstance(redfish, RedfishDriver)
    assert isinstance(ipmi, IpmiDriver)
    opened(redfish)
    opened(ipmi)
    assert redfish.source == "redfish https://10.0.0.11/redfish/v1/Systems/1"
    assert ipmi.source == "ipmi 10.0.0.12:6230"
    assert inventory.driver_for("worker3") is None


def test_defaults_are_the_safe_ones(tmp_path: Path) -> None:
    inventory = load_inventory(valid(tmp_path))
    worker1 = inventory.describe()["nodes"]["worker1"]
    assert worker1["auth"] == "session"
    assert worker1["tls"]["insecure"] is False


def test_describe_masks_every_password(tmp_path: Path) -> None:
    described = load_inventory(valid(tmp_path)).describe()
    assert SECRET not in json.dumps(described)
    assert described["nodes"]["worker2"]["password"] == "***"
    assert described["nodes"]["worker2"]["address"] == "10.0.0.12"
    assert described["nodes"]["worker1"]["username"] == "fencer"


def test_secrets_stay_out_of_repr(tmp_path: Path) -> None:
    inventory = load_inventory(valid(tmp_path))
    assert SECRET not in repr(inventory)
    assert SECRET not in str(inventory)


BAD = [
    (
        f"nodes:\n  w1: {{driver: redfish, address: https://b, username: u, password: {SECRET}\n",
        "not valid YAML at line",
    ),
    (
        f"nodes:\n  w1: {{driver: redfish, address: https://b, username: u, password: {SECRET},"
        " passwrod: oops}\n",
        "nodes.w1.passwrod: unknown key",
    ),
    (
        "nodes:\n  w1: {driver: redfish, address: https://b, username: u}\n",
        "nodes.w1.password: required field missing",
    ),
    (
        f"nodes:\n  w1: {{driver: amt, address: b, username: u, password: {SECRET}}}\n",
        "nodes.w1: unknown driver (use redfish, ipmi or fence-agent)",
    ),
    (
        f"nodes:\n  w1: {{address: b, username: u, password: {SECRET}}}\n",
        "nodes.w1: driver missing",
    ),
    (
        f"nodes:\n  w1: {{driver: redfish, address: https://b, username: u, password: {SECRET},"
        " tls: {ca_file: /nonexistent/ca.pem}}\n",
        "nodes.w1.tls.ca_file: CA file /nonexistent/ca.pem does not exist",
    ),
    (
        f"nodes:\n  w1: {{driver: redfish, address: 'ftp://b', username: u, password: {SECRET}}}\n",
        "nodes.w1.address: not an http(s) BMC address",
    ),
    (
        f"nodes:\n  w1: {{driver: redfish, address: https://b, username: u, password: {SECRET},"
        " auth: digest}\n",
        "nodes.w1.auth:",
    ),
    (
        f"nodes:\n  w1: {{driver: ipmi, address: b, username: u, password: {SECRET},"
        " port: 70000}\n",
        "nodes.w1.port:",
    ),
    (f"bmcs:\n  w1: {{password: {SECRET}}}\n", "bmcs: unknown key"),
    ("- just\n- a list\n", "must be a mapping"),
]


@pytest.mark.parametrize(("text", "expected"), BAD)
def test_bad_inventories_fail_naming_file_and_field(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(InventoryError) as caught:
        load_inventory(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ")
    assert expected in message
    assert SECRET not in message


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match=r"missing\.yaml: cannot read the BMC inventory"):
        load_inventory(tmp_path / "missing.yaml")


def test_plain_http_only_when_the_address_says_so(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f"nodes:\n  a: {{driver: redfish, address: bmc-a, username: u, password: {SECRET}}}\n"
        f"  b: {{driver: redfish, address: 'http://bmc-b:8000', username: u,"
        f" password: {SECRET}}}\n",
    )
    inventory = load_inventory(path)
    a, b = inventory.driver_for("a"), inventory.driver_for("b")
    assert isinstance(a, RedfishDriver)
    assert isinstance(b, RedfishDriver)
    assert a.source == "redfish https://bmc-a"
    assert b.source == "redfish http://bmc-b:8000"


def test_an_empty_file_is_an_empty_inventory(tmp_path: Path) -> None:
    assert load_inventory(write(tmp_path, "")).nodes == {}
