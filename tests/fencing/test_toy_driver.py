"""A new powering driver is one module plus one row in the table of drivers: the toy driver
(``toy_driver``, a fixture) added by this test alone is accepted by the policy, read from the
inventory with its secret masked, read by ``check-fencing``, and fences a node through the normal
path, its proof a read-back after the power-off and its machine shown to be the node's (S10)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.seeded_cluster import firing, oos_taints

from nodefence.engine import drivers
from nodefence.engine.record import Phase
from nodefence.fencing.binding import NodeIdentity
from nodefence.fencing.check import check_fencing
from nodefence.fencing.inventory import InventoryError, load_inventory
from nodefence.policy import parse_policy
from nodefence_sim.controllers.kubelet import system_uuid
from nodefence_sim.testing import SimulatorHandle

from . import toy_driver
from .identity_support import NODE, POLICY, kill, reasons, receiver, record_entries

TOKEN = "toy-t0ken-s3cret"
TOY_POLICY: dict[str, Any] = {
    **POLICY,
    "rules": [{"name": "default", "fencing": {"driver": "toy", "action": "off"}}],
}


@pytest.fixture(autouse=True)
def toy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one row a new driver adds, for this test only; its machine is on and reports the
    node's own system UUID."""
    monkeypatch.setitem(drivers.DRIVERS, "toy", toy_driver.KIND)
    monkeypatch.setattr(toy_driver, "MACHINES", {NODE: ("on", system_uuid(NODE))})
    monkeypatch.setattr(toy_driver, "SENT", [])


def toy_inventory(tmp_path: Path, **entry: Any) -> Path:
    path = tmp_path / "bmcs.yaml"
    given = {"driver": "toy", "machine": NODE, "token": TOKEN, **entry}
    path.write_text(yaml.safe_dump({"nodes": {NODE: given}}))
    return path


def test_the_policy_and_the_inventory_take_the_new_driver(tmp_path: Path) -> None:
    fencing = parse_policy(TOY_POLICY).rules[0].fencing
    assert fencing is not None
    assert fencing.driver == "toy"
    assert fencing.powers
    inventory = load_inventory(toy_inventory(tmp_path))
    entry = inventory.nodes[NODE]
    assert isinstance(entry, toy_driver.ToyBmc)
    described = inventory.describe()
    assert described["nodes"][NODE]["token"] == "***"
    assert described["nodes"][NODE]["machine"] == NODE
    assert TOKEN not in json.dumps(described) + repr(inventory)
    with pytest.raises(InventoryError, match=rf"nodes\.{NODE}\.tokn: unknown key") as caught:
        load_inventory(toy_inventory(tmp_path, tokn="x"))
    assert TOKEN not in str(caught.value)


async def test_check_fencing_reads_the_new_driver(tmp_path: Path) -> None:
    policy = parse_policy(TOY_POLICY)
    inventory = load_inventory(toy_inventory(tmp_path))
    result = await check_fencing(
        policy,
        inventory,
        [],
        {NODE: {}},
        identities=[NodeIdentity(NODE, system_uuid(NODE))],
    )
    [node] = result.nodes
    assert (node.driver, node.state) == ("toy", "on")
    assert node.answered
    [identity] = result.identities
    assert identity.bound, identity.message
    assert result.ok, result.as_dict()
    assert toy_driver.SENT == [], "check-fencing only reads"


async def test_a_node_is_fenced_through_the_new_driver(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    await kill(cluster, NODE)
    async with receiver(cluster, toy_inventory(tmp_path), TOY_POLICY) as nodefence:
        [decision] = await nodefence.alert(firing(NODE))
    assert decision["verdict"] == "fence", reasons(decision)
    assert toy_driver.SENT == [(NODE, "off")]
    assert toy_driver.MACHINES[NODE][0] == "off"
    assert oos_taints(cluster, NODE)
    [entry] = record_entries(cluster)
    assert entry.phase is Phase.FENCED
    assert f"identity matched ({system_uuid(NODE)})" in entry.proof


async def test_a_machine_that_is_not_the_nodes_is_not_powered_off(
    cluster: SimulatorHandle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(toy_driver, "MACHINES", {NODE: ("on", system_uuid("compute02"))})
    await kill(cluster, NODE)
    async with receiver(cluster, toy_inventory(tmp_path), TOY_POLICY) as nodefence:
        [decision] = await nodefence.alert(firing(NODE))
    assert decision["verdict"] != "fence", reasons(decision)
    assert toy_driver.SENT == []
    assert not oos_taints(cluster, NODE)
