"""A fence attempt that sent no power action lets its claim go at once, so the first delivery
after the fix proceeds; one whose power-off went out keeps its claim and never sends it again."""

from __future__ import annotations

from pathlib import Path

from tests.seeded_cluster import firing, oos_taints

from nodefence.engine import record as fence_record
from nodefence_sim.resources import CONFIGMAPS
from nodefence_sim.testing import SimulatorHandle

from .agents import scripted_agent
from .fence_agent_support import NODE, kill, receiver, text_of, write_inventory


def entries(handle: SimulatorHandle) -> tuple[fence_record.FenceEntry, ...]:
    held = handle.sim.store.peek(CONFIGMAPS, "nodefence", fence_record.CONFIGMAP)
    if held is None:
        return ()
    return fence_record.decode(held.get("data"), "1").entries


async def test_a_failure_before_any_power_action_releases_the_claim_at_once(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    agent = scripted_agent(tmp_path / "agent", "honest")
    wrong = write_inventory(
        tmp_path,
        {"agent": str(agent.path), "parameters": agent.parameters(password="wrong-Pa55")},
        [NODE],
    )
    await kill(cluster, NODE)
    async with receiver(cluster, wrong, timeout=8) as nodefence:
        [refused] = await nodefence.alert(firing(NODE))
    assert refused["verdict"] != "fence"
    assert "not sent" in text_of(refused), text_of(refused)
    assert "off" not in agent.actions()
    # Nothing went out, so nothing is held: no claim for the claim timeout to wait out.
    assert entries(cluster) == ()
    assert oos_taints(cluster, NODE) == []

    fixed = write_inventory(
        tmp_path, {"agent": str(agent.path), "parameters": agent.parameters()}, [NODE]
    )
    async with receiver(cluster, fixed, timeout=10) as nodefence:
        [fenced] = await nodefence.alert(firing(NODE))
    assert fenced["verdict"] == "fence", text_of(fenced)
    assert oos_taints(cluster, NODE)
    assert agent.actions().count("off") == 1


async def test_a_sent_power_off_keeps_its_claim_and_is_never_sent_again(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    agent = scripted_agent(tmp_path / "agent", "lies")
    bmcs = write_inventory(
        tmp_path, {"agent": str(agent.path), "parameters": agent.parameters()}, [NODE]
    )
    await kill(cluster, NODE)
    async with receiver(cluster, bmcs, timeout=6) as nodefence:
        [first] = await nodefence.alert(firing(NODE))
        [second] = await nodefence.alert(firing(NODE))
    for decision in (first, second):
        assert decision["verdict"] != "fence", text_of(decision)
    (entry,) = entries(cluster)
    assert entry.power_off_sent_at is not None
    assert agent.actions().count("off") == 1
    assert oos_taints(cluster, NODE) == []
