"""Debian's fence agents through the fence-agent driver against BMCs nobody here wrote:
fence_redfish against sushy-emulator (HTTPS only) and against the simulator's Redfish BMCs behind a
TLS front (socat, tls_front.py), fence_ipmilan against a BMC on pyghmi's server side."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from pydantic import SecretStr

from nodefence.fencing.drivers.fence_agent import FenceAgentDriver, ParameterValue
from nodefence.fencing.inventory import load_inventory
from nodefence_sim.redfish import bmcs_of
from nodefence_sim.testing import SimulatorHandle

from .agents import require_agent
from .conftest import WORKER_UUID
from .peers import PASSWORD, USER, Sushy, start_ipmi_bmc
from .tls_front import sim_bmc_parameters, tls_bmc

__all__ = ["tls_bmc"]

# sushy's fake driver applies a power change 1-11 s after the action.
POWER_TIMEOUT = 40.0
# IPMI 2.0 passwords are at most 20 bytes; ipmitool refuses longer ones.
IPMI_PASSWORD = "ipmi-Pa55-20-bytes"


def redfish_parameters(
    port: int, system: str, password: str = PASSWORD
) -> dict[str, ParameterValue]:
    return {
        "ip": "127.0.0.1",
        "ipport": str(port),
        "username": USER,
        "password": SecretStr(password),
        "ssl_insecure": "1",
        "systems_uri": system,
    }


def sushy_port(sushy: Sushy) -> int:
    return int(sushy.url.rsplit(":", 1)[1])


async def test_fence_redfish_powers_sushy_off_and_on(sushy: Sushy) -> None:
    agent = require_agent("fence_redfish")
    bmc = FenceAgentDriver(
        agent,
        redfish_parameters(sushy_port(sushy), f"/redfish/v1/Systems/{WORKER_UUID}"),
        poll_interval=0.5,
    )
    assert (await bmc.status(timeout=30)).state == "on"
    off = await bmc.power_off(timeout=POWER_TIMEOUT)
    assert off.state == "off", off.detail
    assert off.raw_state == "Status: OFF"
    assert off.reset_sent
    assert (await bmc.status(timeout=30)).state == "off"
    on = await bmc.power_on(timeout=POWER_TIMEOUT)
    assert on.state == "on", on.detail
    assert PASSWORD not in off.source + off.detail + on.detail


async def test_fence_redfish_with_a_wrong_password_is_no_proof(sushy: Sushy) -> None:
    agent = require_agent("fence_redfish")
    wrong = "wrong-horse-battery"
    bmc = FenceAgentDriver(
        agent,
        redfish_parameters(sushy_port(sushy), f"/redfish/v1/Systems/{WORKER_UUID}", wrong),
        poll_interval=0.5,
    )
    reading = await bmc.power_off(timeout=10)
    assert reading.state == "unknown"
    assert not reading.reset_sent
    assert "fence_redfish status failed" in reading.detail
    assert wrong not in reading.detail
    assert PASSWORD not in reading.detail
    # Nothing was sent: the system is still on.
    good = FenceAgentDriver(
        agent, redfish_parameters(sushy_port(sushy), f"/redfish/v1/Systems/{WORKER_UUID}")
    )
    assert (await good.status(timeout=30)).state == "on"


async def test_fence_redfish_against_the_simulators_bmc_behind_tls(
    cluster: SimulatorHandle, tls_bmc: int, tmp_path: Path
) -> None:
    agent = require_agent("fence_redfish")
    bmcs = bmcs_of(cluster.sim)
    inventory_file = tmp_path / "inventory.yaml"
    defaults = {"agent": "fence_redfish", "parameters": sim_bmc_parameters(cluster.sim, tls_bmc)}
    nodes = {"compute01": {"driver": "fence-agent"}, "compute02": {"driver": "fence-agent"}}
    inventory_file.write_text(
        yaml.safe_dump({"defaults": {"fence-agent": defaults}, "nodes": nodes})
    )
    inventory = load_inventory(inventory_file)
    assert agent == inventory.nodes["compute01"].agent  # type: ignore[union-attr]
    bmc = inventory.driver_for("compute01")
    other = inventory.driver_for("compute02")
    assert bmc is not None
    assert other is not None
    boot = cluster.sim.node_state("compute01")["bootID"]
    off = await bmc.power_off(timeout=POWER_TIMEOUT)
    assert off.state == "off", off.detail
    assert cluster.sim.node_state("compute01")["kubelet"] == "down"
    assert bmcs.resets[-1][0] == "compute01"
    # {node} reached each entry: the other machine was not touched.
    assert (await other.status(timeout=30)).state == "on"
    on = await bmc.power_on(timeout=POWER_TIMEOUT)
    assert on.state == "on", on.detail
    assert cluster.sim.node_state("compute01")["bootID"] != boot


async def test_fence_ipmilan_against_a_pyghmi_bmc(tmp_path: Path) -> None:
    agent = require_agent("fence_ipmilan")
    if shutil.which("ipmitool") is None:
        pytest.skip("ipmitool is not installed (Debian package ipmitool)")
    bmc = start_ipmi_bmc(tmp_path, power="on", off_delay=1.0, password=IPMI_PASSWORD)
    try:
        parameters: dict[str, ParameterValue] = {
            "ip": "127.0.0.1",
            "ipport": str(bmc.port),
            "username": USER,
            "password": SecretStr(IPMI_PASSWORD),
            "lanplus": "1",
            # pyghmi's BMC speaks cipher suite 3 only.
            "cipher": "3",
        }
        driver = FenceAgentDriver(agent, parameters, poll_interval=0.5)
        assert (await driver.status(timeout=30)).state == "on"
        off = await driver.power_off(timeout=POWER_TIMEOUT)
        assert off.state == "off", off.detail
        assert "power off requested" in bmc.process.output()
        on = await driver.power_on(timeout=POWER_TIMEOUT)
        assert on.state == "on", on.detail
        wrong = FenceAgentDriver(
            agent, {**parameters, "password": SecretStr("not-the-password")}, poll_interval=0.5
        )
        refused = await wrong.status(timeout=30)
        assert refused.state == "unknown"
        assert "not-the-password" not in refused.detail
    finally:
        bmc.process.stop()
