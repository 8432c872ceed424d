"""A false proof does not go unnoticed: the BMC accepts ForceOff, reports Off and leaves the
machine running. After the fence, the node comes back Ready with the boot ID it had at fence
time, which no machine that was off can do: nodefence keeps the taint, says why in the decision,
puts a Warning Event on the Node, counts it, and holds the taint until a person releases it."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import yaml
from tests.seeded_cluster import eventually, firing, node_events, oos_taints, resolved

from nodefence_sim.redfish import bmcs_of
from nodefence_sim.resources import NODES
from nodefence_sim.testing import SimulatorHandle

from .identity_support import NODE, POLICY, inventory, kill, reasons, receiver, record_entries

# The unfence needs no waiting here, and no new boot ID: the rule as an operator who powers the
# machine on by hand would write it, whose fences nodefence used to release silently.
AUDITED: dict[str, Any] = {
    **POLICY,
    "rules": [{**POLICY["rules"][0], "healthy_delay_seconds": 0, "require_new_boot_id": False}],
}


def contradicted_total(exposition: str) -> float:
    for line in exposition.splitlines():
        if line.startswith(f'nodefence_proof_contradicted_total{{node="{NODE}"}}'):
            return float(line.split()[-1])
    return 0.0


async def test_back_with_the_fence_time_boot_id_holds_the_taint_and_raises_the_alarm(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    bmcs = bmcs_of(cluster.sim)
    bmcs.lying.add(NODE)
    boot_id = cluster.sim.node_state(NODE)["bootID"]
    await kill(cluster, NODE)
    async with receiver(cluster, inventory(tmp_path, cluster), AUDITED) as nodefence:
        [fenced] = await nodefence.alert(firing(NODE))
        assert fenced["verdict"] == "fence", reasons(fenced)
        assert bmcs.resets == [(NODE, "ForceOff")]
        assert len(oos_taints(cluster, NODE)) == 1

        # The machine never stopped: its kubelet answers again, same boot.
        cluster.sim.node_up(NODE)
        await eventually(lambda: cluster.sim.node_state(NODE)["ready"] == "True")
        assert cluster.sim.node_state(NODE)["bootID"] == boot_id

        [audited] = await nodefence.alert(resolved(NODE))
        status, body = await nodefence.post("/reconcile", {})
        assert status == 200, body
        status, again = await nodefence.post("/reconcile", {})
        assert status == 200, again
        exposition = nodefence.metrics.exposition().decode()

    for decision in (audited, *body["decisions"], *again["decisions"]):
        if decision["node"] != NODE:
            continue
        assert decision["verdict"] != "unfence", decision
        text = reasons(decision)
        assert "proof" in text, text
        assert boot_id in text, text
        assert "held until a person releases it" in text, text
    assert "was false" in reasons(audited)
    [taint] = oos_taints(cluster, NODE)
    assert taint["value"] == "nodeshutdown"
    [entry] = record_entries(cluster)
    assert entry.proof_contradicted_at is not None
    warnings = [e for e in node_events(cluster, NODE) if e["reason"] == "FenceProofContradicted"]
    assert warnings, node_events(cluster, NODE)
    assert warnings[0]["type"] == "Warning"
    assert boot_id in warnings[0]["message"]
    assert not [e for e in node_events(cluster, NODE) if e["reason"] == "NodeUnfenced"]
    # Counted once per incident, however often it is judged again.
    assert contradicted_total(exposition) == 1.0
    assert f'nodefence_proof_contradicted_timestamp_seconds{{node="{NODE}"}}' in exposition


async def test_a_person_releases_the_held_taint(cluster: SimulatorHandle, tmp_path: Path) -> None:
    """Removing the taint is the person's release: nodefence lets go of its entry and does not
    put the taint back."""
    bmcs_of(cluster.sim).lying.add(NODE)
    await kill(cluster, NODE)
    async with receiver(cluster, inventory(tmp_path, cluster), AUDITED) as nodefence:
        [fenced] = await nodefence.alert(firing(NODE))
        assert fenced["verdict"] == "fence", reasons(fenced)
        cluster.sim.node_up(NODE)
        await eventually(lambda: cluster.sim.node_state(NODE)["ready"] == "True")
        await nodefence.post("/reconcile", {})
        [entry] = record_entries(cluster)
        assert entry.proof_contradicted_at is not None

        store = cluster.sim.store
        node = store.get(NODES, None, NODE)
        node["spec"]["taints"] = [
            t
            for t in node["spec"].get("taints") or []
            if t["key"] != "node.kubernetes.io/out-of-service"
        ]
        store.update(NODES, None, NODE, node)
        status, body = await nodefence.post("/reconcile", {})
        assert status == 200, body
    assert record_entries(cluster) == ()
    assert oos_taints(cluster, NODE) == []


async def test_a_real_power_off_comes_back_with_a_new_boot_id_and_is_unfenced(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    """The honest BMC: the machine was off, it comes back with a new boot ID, and the fence
    is released as before (no alarm)."""
    await kill(cluster, NODE)
    async with receiver(cluster, inventory(tmp_path, cluster), AUDITED) as nodefence:
        [fenced] = await nodefence.alert(firing(NODE))
        assert fenced["verdict"] == "fence", reasons(fenced)
        cluster.sim.node_up(NODE, reboot=True)
        await eventually(lambda: cluster.sim.node_state(NODE)["ready"] == "True")

        async def unfenced() -> bool:
            await nodefence.post("/reconcile", {})
            return not oos_taints(cluster, NODE)

        await eventually(unfenced, within=30, interval=0.2)
        exposition = nodefence.metrics.exposition().decode()
    assert contradicted_total(exposition) == 0.0
    assert not [e for e in node_events(cluster, NODE) if e["reason"] == "FenceProofContradicted"]


async def test_nodefence_release_lets_go_of_a_held_fence(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    """The release the Event and the alert point to: ``nodefence release NODE --reason``."""
    bmcs_of(cluster.sim).lying.add(NODE)
    await kill(cluster, NODE)
    async with receiver(cluster, inventory(tmp_path, cluster), AUDITED) as nodefence:
        [fenced] = await nodefence.alert(firing(NODE))
        assert fenced["verdict"] == "fence", reasons(fenced)
        cluster.sim.node_up(NODE)
        await eventually(lambda: cluster.sim.node_state(NODE)["ready"] == "True")
        await nodefence.post("/reconcile", {})
    [entry] = record_entries(cluster)
    assert entry.proof_contradicted_at is not None
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(AUDITED))
    env = {
        **os.environ,
        "KUBECONFIG": str(cluster.kubeconfig),
        "NODEFENCE_NAMESPACE": "nodefence",
        "NODEFENCE_AUTH_DISABLED": "true",
        "NODEFENCE_POLICY_FILE": str(policy),
    }
    status, _ = await run_nodefence(env, "status", "-o", "json")
    [held] = [f for f in json.loads(status)["fenced"] if f["node"] == NODE]
    assert held["proofContradictedAt"] is not None
    assert "HELD" in (await run_nodefence(env, "status"))[0]
    await run_nodefence(env, "release", NODE, "--reason", "BMC firmware fixed; volumes checked")
    assert record_entries(cluster) == ()
    assert oos_taints(cluster, NODE) == []


async def run_nodefence(env: dict[str, str], *args: str) -> tuple[str, str]:
    """Not subprocess.run: the simulator answers on this test's event loop."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "nodefence",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == 0, out.decode() + err.decode()
    return out.decode(), err.decode()
