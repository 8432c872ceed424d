"""A stated ``identity`` that contradicts the Node is no proof (S10).

Two inventory rows swapped together with their identities: compute01's line points at
compute02's system and states compute02's UUID, and the other way round. Each entry agrees with
itself (the BMC reports exactly the UUID the line states), and each contradicts the systemUUID
its own Node reports. Believing the statement over the Node powers off compute02's healthy
machine for compute01's alert and taints compute01 with its machine still on. The Node is the
second witness: ``check-config``, ``check-fencing`` and the fence itself all refuse.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from tests.seeded_cluster import firing, oos_taints

from nodefence.engine.identity import (
    PLUG,
    SYSTEM_UUID,
    MachineBinding,
    Reported,
    byte_swapped,
    judge,
)
from nodefence.fencing.binding import NodeIdentity, identity_problems
from nodefence.fencing.inventory import load_inventory
from nodefence_sim.controllers.kubelet import system_uuid
from nodefence_sim.redfish import SYSTEMS, bmcs_of
from nodefence_sim.testing import SimulatorHandle

from .identity_support import NODE, OTHER, POLICY, inventory, kill, reasons, receiver

pytestmark = pytest.mark.invariant("S10")

CONTRADICTS = "contradicts the Node"


def swapped(tmp_path: Path, cluster: SimulatorHandle) -> Path:
    """compute01 and compute02 swapped, each line with the other machine's UUID stated."""
    return inventory(
        tmp_path,
        cluster,
        compute01={"system": f"{SYSTEMS}/{OTHER}", "identity": system_uuid(OTHER)},
        compute02={"system": f"{SYSTEMS}/{NODE}", "identity": system_uuid(NODE)},
    )


def _env(tmp_path: Path, cluster: SimulatorHandle, bmcs: Path) -> dict[str, str]:
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(POLICY))
    return {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "KUBECONFIG": str(cluster.kubeconfig),
        "NODEFENCE_AUTH_DISABLED": "true",
        "NODEFENCE_POLICY_FILE": str(policy),
        "NODEFENCE_BMC_INVENTORY": str(bmcs),
    }


async def test_swapped_rows_with_their_identities_power_nothing_off(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    bmcs = swapped(tmp_path, cluster)
    await kill(cluster, NODE)

    async with receiver(cluster, bmcs) as nodefence:
        [decision] = await nodefence.alert(firing(NODE))

    text = reasons(decision) + " ".join(r.get("detail", "") for r in decision["results"])
    assert decision["verdict"] != "fence", decision
    assert CONTRADICTS in text, text
    assert f"systemUUID {system_uuid(NODE)}" in text, text
    assert bmcs_of(cluster.sim).resets == [], "a power action went to a machine"
    healthy = cluster.sim.node_state(OTHER)
    assert (healthy["kubelet"], healthy["ready"]) == ("up", "True")
    assert oos_taints(cluster, NODE) == []


async def test_check_fencing_and_check_config_name_both_contradictions(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    bmcs = swapped(tmp_path, cluster)
    env = _env(tmp_path, cluster, bmcs)

    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "nodefence",
        "check-fencing",
        NODE,
        OTHER,
        "-o",
        "json",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == 1, out.decode() + err.decode()
    checks = {c["node"]: c for c in json.loads(out)["identities"]}
    for name in (NODE, OTHER):
        assert not checks[name]["bound"], checks[name]
        assert CONTRADICTS in checks[name]["message"], checks[name]
    assert bmcs_of(cluster.sim).resets == []

    configured = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "nodefence", "check-config"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    assert configured.returncode == 1, configured.stdout + configured.stderr
    for name, uuid in ((NODE, system_uuid(NODE)), (OTHER, system_uuid(OTHER))):
        assert f"node {name}: the BMC inventory states identity" in configured.stderr
        assert f"systemUUID {uuid}" in configured.stderr
    report = json.loads(configured.stdout)["reachability"]["kubernetes"]["stated_identities"]
    assert len(report["problems"]) == 2
    password = bmcs_of(cluster.sim).password.get_secret_value()
    assert password not in configured.stdout + configured.stderr


async def test_a_stated_identity_that_agrees_with_the_node_still_binds(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    """The statement in SMBIOS's byte-swapped spelling is the same machine, not a contradiction."""
    import uuid

    swapped_spelling = str(byte_swapped(uuid.UUID(system_uuid(NODE))))
    bmcs = inventory(tmp_path, cluster, compute01={"identity": swapped_spelling})
    nodes = [NodeIdentity(NODE, system_uuid=system_uuid(NODE))]

    [check] = await identity_problems(load_inventory(bmcs), nodes, timeout=10)

    assert check.bound, check.message


UUIDS = st.uuids(version=4).map(str)


@given(stated=UUIDS, node_uuid=UUIDS)
def test_no_statement_binds_a_machine_whose_uuid_the_node_contradicts(
    stated: str, node_uuid: str
) -> None:
    """Whatever the BMC reports, a stated UUID other than the Node's own never binds."""
    binding = MachineBinding("n1", "redfish x", "redfish", expected=stated)
    for said in (stated, node_uuid):
        verdict = judge(
            binding,
            Reported(said, "redfish x", basis=SYSTEM_UUID),
            node="n1",
            system_uuid=node_uuid,
            provider_id="",
        )
        assert verdict.bound == (stated == node_uuid), verdict.message


def test_a_listed_plug_must_include_the_instance_the_providerid_names() -> None:
    """fence_openstack with a stated identity: the agent's list gives the plug and alias of the
    stated machine; the Node's providerID names another server, so it is not bound."""
    binding = MachineBinding("n1", "fence-agent fence_openstack", "fence-agent", expected="web-1")
    ours = "5f0c1a2b-0000-4000-8000-000000000001"
    theirs = "5f0c1a2b-0000-4000-8000-000000000002"

    def listed(plug: str) -> Reported:
        return Reported(
            plug,
            "fence-agent fence_openstack",
            basis=PLUG,
            agent="/usr/sbin/fence_openstack",
            aliases=("web-1",),
        )

    bound = judge(
        binding, listed(ours), node="n1", system_uuid="", provider_id=f"openstack:///{ours}"
    )
    refused = judge(
        binding, listed(theirs), node="n1", system_uuid="", provider_id=f"openstack:///{ours}"
    )

    assert bound.bound, bound.message
    assert not refused.bound
    assert CONTRADICTS in refused.message
