"""S10 bound to the node: a power proof counts only from the node's own machine.

The attacks of issue 18, against the receiver and the simulator's Redfish BMCs (which report each
machine's SMBIOS UUID, the Node's ``systemUUID``, as real hardware does): an inventory line that
points a node at another node's system, two nodes resolving to one system, and entries whose
identity cannot be checked. Each must power nothing off that is not the node's machine and taint
nothing without proof from it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest
import yaml
from tests.seeded_cluster import eventually, firing, node_events, oos_taints

from nodefence.fencing.binding import NodeIdentity, identity_problems
from nodefence.fencing.inventory import load_inventory
from nodefence_sim.controllers.kubelet import system_uuid
from nodefence_sim.redfish import SYSTEMS, bmcs_of
from nodefence_sim.resources import NODES
from nodefence_sim.testing import SimulatorHandle

from .identity_support import (
    NODE,
    OTHER,
    POLICY,
    check_config,
    inventory,
    kill,
    reasons,
    receiver,
    record_entries,
)

pytestmark = pytest.mark.invariant("S10")


# ----------------------------------------------------------------------------- the attacks
async def test_a_node_mapped_to_another_nodes_system_powers_nothing_off(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    """compute01's line points at compute02's system, and compute02's own line too: one alert
    for the dead compute01 sends no ForceOff anywhere, taints nothing, and says why."""
    bmcs = inventory(tmp_path, cluster, compute01={"system": f"{SYSTEMS}/{OTHER}"})
    await kill(cluster, NODE)
    async with receiver(cluster, bmcs) as nodefence:
        [decision] = await nodefence.alert(firing(NODE))
    assert decision["verdict"] != "fence", decision
    assert "compute01, compute02 to one machine" in reasons(decision), reasons(decision)
    assert bmcs_of(cluster.sim).resets == []
    healthy = cluster.sim.node_state(OTHER)
    assert (healthy["kubelet"], healthy["ready"]) == ("up", "True")
    assert oos_taints(cluster, NODE) == []
    assert record_entries(cluster) == ()
    refused = [e for e in node_events(cluster, NODE) if e["reason"] == "FenceRefused"]
    assert refused, node_events(cluster, NODE)
    assert "one machine" in refused[-1]["message"]

    checked = check_config(tmp_path, bmcs)
    assert checked.returncode == 2, checked.stdout + checked.stderr
    assert "nodes compute01, compute02 to one machine" in checked.stderr
    assert f"{SYSTEMS}/{OTHER}" in checked.stderr
    assert bmcs_of(cluster.sim).password.get_secret_value() not in checked.stderr


async def test_a_wrong_line_alone_is_caught_by_the_uuid_the_bmc_reports(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    """The same wrong line with compute02 not in the inventory at all: nothing in the file
    betrays it, but the system reports compute02's UUID, not compute01's systemUUID, so no
    power action goes out and the claim is let go at once."""
    bmcs = inventory(tmp_path, cluster, compute01={"system": f"{SYSTEMS}/{OTHER}"}, compute02=None)
    await kill(cluster, NODE)
    async with receiver(cluster, bmcs) as nodefence:
        [decision] = await nodefence.alert(firing(NODE))
    text = reasons(decision) + " ".join(r.get("detail", "") for r in decision["results"])
    assert "identity mismatch" in text, text
    assert system_uuid(OTHER) in text, text
    assert system_uuid(NODE) in text, text
    assert bmcs_of(cluster.sim).resets == []
    assert cluster.sim.node_state(OTHER)["ready"] == "True"
    assert oos_taints(cluster, NODE) == []
    assert record_entries(cluster) == (), "the claim was not rolled back"
    failed = [e for e in node_events(cluster, NODE) if e["reason"] == "NodefenceActionFailed"]
    assert failed, node_events(cluster, NODE)
    assert "identity mismatch" in failed[-1]["message"]
    assert check_config(tmp_path, bmcs).returncode == 0


async def test_two_nodes_on_one_system_give_no_taint_to_either(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    """compute02's line names compute01's system. compute01's machine is off after its fence;
    compute02's kubelet is dead but its machine runs: reading compute01's Off for it would
    taint a live machine. Neither is fenced through a system two nodes share."""
    bmcs = inventory(tmp_path, cluster, compute02={"system": NODE})
    await kill(cluster, NODE)
    await kill(cluster, OTHER)
    async with receiver(cluster, bmcs) as nodefence:
        first, second = await nodefence.alert(firing(NODE)), await nodefence.alert(firing(OTHER))
    for [decision] in (first, second):
        assert decision["verdict"] != "fence", decision
        assert "compute01, compute02 to one machine" in reasons(decision)
    assert bmcs_of(cluster.sim).resets == []
    assert oos_taints(cluster, NODE) == []
    assert oos_taints(cluster, OTHER) == []
    checked = check_config(tmp_path, bmcs)
    assert checked.returncode == 2
    assert "nodes compute01, compute02 to one machine" in checked.stderr


async def test_a_second_spelling_of_one_system_is_caught_by_its_uuid(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    """compute02's line reaches compute01's system through another spelling of the BMC's address,
    so the file alone cannot tell. compute01 is fenced through its own system (a reset sent, the
    proof says so); compute02's alert then reads compute01's UUID: no second power action, no
    taint on compute02, whose machine still runs."""
    other_address = cluster.url.replace("127.0.0.1", "localhost")
    bmcs = inventory(
        tmp_path, cluster, compute02={"address": other_address, "system": f"{SYSTEMS}/{NODE}"}
    )
    await kill(cluster, NODE)
    await kill(cluster, OTHER)
    async with receiver(cluster, bmcs) as nodefence:
        [fenced] = await nodefence.alert(firing(NODE))
        [refused] = await nodefence.alert(firing(OTHER))
    assert fenced["verdict"] == "fence", reasons(fenced)
    assert len(oos_taints(cluster, NODE)) == 1
    [entry] = [e for e in record_entries(cluster) if e.node == NODE]
    assert "after nodefence powered it off" in entry.proof, entry.proof
    assert f"identity matched ({system_uuid(NODE)})" in entry.proof, entry.proof
    text = reasons(refused) + " ".join(r.get("detail", "") for r in refused["results"])
    assert "identity mismatch" in text, text
    assert bmcs_of(cluster.sim).resets == [(NODE, "ForceOff")]
    assert oos_taints(cluster, OTHER) == []
    assert [e.node for e in record_entries(cluster)] == [NODE]


async def test_an_unchecked_identity_fences_and_every_word_says_so(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    """``identity: unchecked`` (a PDU outlet's kind of entry): the proof is still a read-back
    of Off, and every decision and Event made on the node says the identity was not checked."""
    bmcs = inventory(tmp_path, cluster, compute01={"identity": "unchecked"})
    await kill(cluster, NODE)
    async with receiver(cluster, bmcs) as nodefence:
        [decision] = await nodefence.alert(firing(NODE))
        [again] = await nodefence.alert(firing(NODE))
    assert decision["verdict"] == "fence", reasons(decision)
    for made in (decision, again):
        assert "identity unchecked" in reasons(made), reasons(made)
    [entry] = record_entries(cluster)
    assert "identity unchecked" in entry.proof
    events = node_events(cluster, NODE)
    assert events
    assert all("identity unchecked" in e["message"] for e in events), events
    assert check_config(tmp_path, bmcs).returncode == 0


async def test_a_stated_identity_must_be_the_one_reported(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    """An explicit ``identity`` stands in for a systemUUID the Node does not report; the wrong
    one blocks."""
    store = cluster.sim.store
    node = store.get(NODES, None, NODE)
    node["status"]["nodeInfo"]["systemUUID"] = ""
    store.update(NODES, None, NODE, node, subresource="all", check_rv=False)
    bmcs = inventory(
        tmp_path, cluster, compute01={"identity": "8a5c2c4e-1d6b-4a55-9d0e-0000000000ff"}
    )
    await kill(cluster, NODE)
    async with receiver(cluster, bmcs) as nodefence:
        [decision] = await nodefence.alert(firing(NODE))
    text = reasons(decision) + " ".join(r.get("detail", "") for r in decision["results"])
    assert "identity mismatch" in text, text
    assert "8a5c2c4e" in text, text
    assert bmcs_of(cluster.sim).resets == []
    assert oos_taints(cluster, NODE) == []


async def test_the_live_check_asks_every_bmc_which_machine_it_controls(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    """What check-fencing calls: every listed node's target is asked for its identity (read
    only) and judged against its Node; a wrong line and a second spelling of one BMC are named,
    the rest pass."""
    other_address = cluster.url.replace("127.0.0.1", "localhost")
    bmcs = inventory(
        tmp_path,
        cluster,
        compute01={"system": f"{SYSTEMS}/control01"},
        control03={"address": other_address, "system": f"{SYSTEMS}/control02"},
    )
    nodes = [
        NodeIdentity(name, system_uuid=system_uuid(name))
        for name in ("compute01", "compute02", "control01", "control02", "control03")
    ]
    checks = {c.node: c for c in await identity_problems(load_inventory(bmcs), nodes, timeout=10)}
    assert bmcs_of(cluster.sim).resets == []
    assert checks["compute02"].bound, checks["compute02"].message
    for name, twin in (("compute01", "control01"), ("control03", "control02")):
        assert not checks[name].bound
        assert twin in checks[name].message, checks[name].message
        assert not checks[twin].bound, "one machine for two nodes proves nothing for either"


async def test_cloned_machines_reporting_one_uuid_prove_nothing(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    """compute01 was cloned from compute02's image and reports its systemUUID, and its line
    points at compute02's system: the UUID matches, yet it is compute02's machine. The serving
    receiver's node index knows that two Nodes report that UUID, so nothing is powered off."""
    store = cluster.sim.store
    await kill(cluster, NODE)
    node = store.get(NODES, None, NODE)
    node["status"]["nodeInfo"]["systemUUID"] = system_uuid(OTHER)
    store.update(NODES, None, NODE, node, subresource="all", check_rv=False)
    bmcs = inventory(tmp_path, cluster, compute01={"system": f"{SYSTEMS}/{OTHER}"}, compute02=None)
    async with receiver(cluster, bmcs, follow=True) as nodefence:
        reader = nodefence.pipeline.reader
        await eventually(lambda: reader.nodes is not None and reader.nodes.fresh() is not None)
        [decision] = await nodefence.alert(firing(NODE))
    text = reasons(decision) + " ".join(r.get("detail", "") for r in decision["results"])
    assert "also reported by compute02" in text, text
    assert bmcs_of(cluster.sim).resets == []
    assert cluster.sim.node_state(OTHER)["ready"] == "True"
    assert oos_taints(cluster, NODE) == []


def clone(cluster: SimulatorHandle) -> None:
    """compute01 was cloned from compute02's image and kept its systemUUID."""
    store = cluster.sim.store
    node = store.get(NODES, None, NODE)
    node["status"]["nodeInfo"]["systemUUID"] = system_uuid(OTHER)
    store.update(NODES, None, NODE, node, subresource="all", check_rv=False)


def node_lists(cluster: SimulatorHandle, since: int) -> int:
    """Lists of every Node sent since ``since`` (not a single Node's GET, not a watch)."""
    return sum(
        1
        for r in cluster.faults.requests(since)
        if r.verb == "list" and r.path == "/api/v1/nodes" and "watch" not in r.query
    )


async def test_cloned_machines_prove_nothing_without_a_node_index_either(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    """The same clone judged by a receiver with no node index (as the one-shot ``reconcile`` of
    a receiver that scales to zero is): before the power step the Nodes are listed live, so
    compute02 is found reporting the same UUID, and nothing is sent to the BMC or tainted."""
    await kill(cluster, NODE)
    clone(cluster)
    bmcs = inventory(tmp_path, cluster, compute01={"system": f"{SYSTEMS}/{OTHER}"}, compute02=None)
    async with receiver(cluster, bmcs) as nodefence:
        assert nodefence.pipeline.reader.nodes is None
        cursor = cluster.faults.cursor
        [decision] = await nodefence.alert(firing(NODE))
    text = reasons(decision) + " ".join(r.get("detail", "") for r in decision["results"])
    assert f"systemUUID {system_uuid(OTHER)} is also reported by compute02" in text, text
    assert decision["verdict"] != "fence", decision
    assert node_lists(cluster, cursor) >= 1, "the twins were not read live"
    assert bmcs_of(cluster.sim).resets == []
    assert cluster.sim.node_state(OTHER)["ready"] == "True"
    assert oos_taints(cluster, NODE) == []
    assert record_entries(cluster) == (), "the claim was not rolled back"
    failed = [e for e in node_events(cluster, NODE) if e["reason"] == "NodefenceActionFailed"]
    assert failed, node_events(cluster, NODE)
    assert "also reported by compute02" in failed[-1]["message"]


async def test_without_a_node_index_a_node_of_its_own_machine_is_still_fenced(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    """The live list finds no other Node with compute01's UUID: the power-off goes out and the
    proof stands, as with an index."""
    await kill(cluster, NODE)
    bmcs = inventory(tmp_path, cluster)
    async with receiver(cluster, bmcs) as nodefence:
        cursor = cluster.faults.cursor
        [decision] = await nodefence.alert(firing(NODE))
    assert decision["verdict"] == "fence", decision
    assert node_lists(cluster, cursor) >= 1
    assert bmcs_of(cluster.sim).resets, "no power-off sent"
    assert oos_taints(cluster, NODE)


async def test_check_fencing_names_a_target_that_reports_another_machine(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    """``nodefence check-fencing`` asks each BMC which machine it controls (read-only) and fails
    naming the node whose target reports another Node's machine; the others are bound."""
    bmcs = inventory(tmp_path, cluster, compute01={"system": f"{SYSTEMS}/{OTHER}"}, compute02=None)
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(POLICY))
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "KUBECONFIG": str(cluster.kubeconfig),
        "NODEFENCE_AUTH_DISABLED": "true",
        "NODEFENCE_POLICY_FILE": str(policy),
        "NODEFENCE_BMC_INVENTORY": str(bmcs),
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "nodefence",
        "check-fencing",
        "-o",
        "json",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == 1, out.decode() + err.decode()
    report = json.loads(out)
    checks = {c["node"]: c for c in report["identities"]}
    assert not checks[NODE]["bound"]
    assert "identity mismatch" in checks[NODE]["message"]
    assert checks[NODE]["reported"].upper() == system_uuid(OTHER)
    assert all(c["bound"] for name, c in checks.items() if name != NODE), checks
    assert bmcs_of(cluster.sim).resets == []
    assert bmcs_of(cluster.sim).password.get_secret_value() not in out.decode() + err.decode()


async def test_the_proof_says_powered_off_only_when_a_reset_was_sent(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    """A machine found already Off gets no reset; its proof says so instead of claiming that
    nodefence powered it off."""
    await kill(cluster, NODE)
    bmcs_of(cluster.sim).powered_off.add(NODE)
    async with receiver(cluster, inventory(tmp_path, cluster)) as nodefence:
        [decision] = await nodefence.alert(firing(NODE))
    assert decision["verdict"] == "fence", reasons(decision)
    assert bmcs_of(cluster.sim).resets == []
    [entry] = record_entries(cluster)
    assert "no reset was sent" in entry.proof, entry.proof
    assert "powered it off" not in entry.proof, entry.proof
    assert "powered it off" not in reasons(decision), reasons(decision)
    assert f"identity matched ({system_uuid(NODE)})" in entry.proof
