"""S10 through ``fencing.driver: fence-agent``, end to end: the receiver, the simulated cluster,
and fence_redfish against the simulator's Redfish BMC behind TLS. The taint follows only a
separate ``status`` run reading Off; each fault of a scripted agent blocks it with a reason."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from tests.seeded_cluster import firing, node_events, oos_taints

from nodefence_sim.redfish import bmcs_of
from nodefence_sim.testing import SimulatorHandle

from .agents import AGENT_PASSWORD, gone_wrapper, scripted_agent, wait_until
from .fence_agent_support import NODE, kill, receiver, text_of, write_inventory
from .tls_front import sim_bmc_parameters, tls_bmc

pytestmark = pytest.mark.invariant("S10")

__all__ = ["tls_bmc"]


def redfish_defaults(cluster: SimulatorHandle, port: int) -> dict[str, Any]:
    return {"agent": "fence_redfish", "parameters": sim_bmc_parameters(cluster.sim, port)}


async def test_fence_redfish_fences_only_after_a_status_read_of_off(
    cluster: SimulatorHandle, tls_bmc: int, tmp_path: Path
) -> None:
    if shutil.which("fence_redfish", path="/usr/sbin:/usr/bin:/sbin:/bin") is None:
        pytest.skip("fence_redfish is not installed (Debian package fence-agents)")
    bmcs = write_inventory(tmp_path, redfish_defaults(cluster, tls_bmc), [NODE])
    await kill(cluster, NODE)
    async with receiver(cluster, bmcs) as nodefence:
        [decision] = await nodefence.alert(firing(NODE))
        metrics = nodefence.metrics.exposition().decode()
    assert decision["verdict"] == "fence", text_of(decision)
    text = text_of(decision)
    assert "fence-agent fence_redfish" in text
    assert "Status: OFF" in text
    # The machine was powered off through the BMC, once, and only then tainted.
    assert bmcs_of(cluster.sim).resets == [(NODE, "ForceOff")]
    assert oos_taints(cluster, NODE)
    password = bmcs_of(cluster.sim).password.get_secret_value()
    assert password not in str(decision)
    assert password not in str(node_events(cluster, NODE))
    assert 'driver="fence-agent"' in metrics


@pytest.mark.parametrize(
    ("mode", "why"),
    [
        ("lies", "status still reports Status: ON"),
        ("off-exits-2", "off exited 2"),
        ("garbage-status", "exited 7"),
        ("refuses", "Unable to obtain correct plug status"),
    ],
)
async def test_a_faulty_agent_blocks_the_taint_with_its_reason(
    cluster: SimulatorHandle,
    tmp_path: Path,
    mode: str,
    why: str,
    capfd: pytest.CaptureFixture[str],
) -> None:
    agent = scripted_agent(tmp_path / "agent", mode)
    defaults = {
        "agent": str(agent.path),
        "parameters": {**agent.parameters(), "power_timeout": "5"},
    }
    bmcs = write_inventory(tmp_path, defaults, [NODE])
    await kill(cluster, NODE)
    async with receiver(cluster, bmcs, timeout=8) as nodefence:
        [decision] = await nodefence.alert(firing(NODE))
    text = text_of(decision)
    assert decision["verdict"] != "fence", text
    assert why in text, text
    assert oos_taints(cluster, NODE) == []
    events = str(node_events(cluster, NODE))
    assert why in events, events
    logged = capfd.readouterr()
    assert "power_action" in logged.out + logged.err  # the step was logged...
    for shown in (text, events, logged.out, logged.err):
        assert AGENT_PASSWORD not in shown  # ...and no password anywhere


async def test_a_hanging_agent_blocks_the_taint_and_leaves_no_process(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    from .agents import group_alive

    agent = scripted_agent(tmp_path / "agent", "hang")
    bmcs = write_inventory(
        tmp_path, {"agent": str(agent.path), "parameters": agent.parameters()}, [NODE]
    )
    await kill(cluster, NODE)
    async with receiver(cluster, bmcs, timeout=3) as nodefence:
        [decision] = await nodefence.alert(firing(NODE))
    assert decision["verdict"] != "fence"
    assert "killed" in text_of(decision), text_of(decision)
    assert oos_taints(cluster, NODE) == []
    for run in agent.runs():
        assert wait_until(lambda run=run: not group_alive(run["pgid"]))


async def test_a_wrapper_exiting_2_without_status_off_does_not_taint(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    """Exit code 2 is the API's "off" only together with the agent's own "Status: OFF": a
    wrapper whose program is gone exits 2 too, and that proves nothing."""
    wrapper = gone_wrapper(tmp_path)
    defaults = {
        "agent": str(wrapper),
        "parameters": {"ip": "192.0.2.10", "password": AGENT_PASSWORD, "power_timeout": "5"},
    }
    bmcs = write_inventory(tmp_path, defaults, [NODE])
    await kill(cluster, NODE)
    async with receiver(cluster, bmcs, timeout=8) as nodefence:
        [decision] = await nodefence.alert(firing(NODE))
    text = text_of(decision)
    assert decision["verdict"] != "fence", text
    assert "without printing Status: OFF" in text, text
    assert "can't open file" in text, text
    assert oos_taints(cluster, NODE) == []
    assert AGENT_PASSWORD not in text + str(node_events(cluster, NODE))
