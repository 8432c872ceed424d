"""The simulator's Redfish BMCs, driven by the project's Redfish driver through the inventory the
simulator writes: ForceOff stops the node's kubelet as ``down`` does, On brings it back with a
new bootID, and power is separate from the kubelet as on real machines."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import SecretStr

from nodefence.fencing.drivers.redfish import RedfishDriver
from nodefence.fencing.inventory import Inventory, load_inventory
from nodefence_sim.redfish import SimBmcs, bmcs_of, write_bmc_inventory
from nodefence_sim.simulation import Simulation
from nodefence_sim.testing import SimulatorHandle, running_simulator

from .closing import Opened

NODE = "compute01"
STARTUP_SECONDS = 30.0


class FakeClock:
    def __init__(self) -> None:
        self.moment = datetime.now(UTC).replace(microsecond=0)

    def __call__(self) -> datetime:
        return self.moment

    def advance(self, seconds: float) -> None:
        self.moment += timedelta(seconds=seconds)


@dataclass
class Cluster:
    handle: SimulatorHandle
    clock: FakeClock
    inventory: Inventory
    bmcs: SimBmcs

    @property
    def sim(self) -> Simulation:
        return self.handle.sim


# Its own: the seed cluster on a fake clock, with its BMC inventory and BMCs beside it.
@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    clock = FakeClock()
    sim = Simulation.from_scenario("seed", clock=clock)
    async with running_simulator(sim) as handle:
        path = write_bmc_inventory(tmp_path / "bmcs.yaml", handle.url, sim)
        yield Cluster(handle, clock, load_inventory(path), bmcs_of(sim))


def driver_for(cluster: Cluster, node: str = NODE) -> RedfishDriver:
    driver = cluster.inventory.driver_for(node)
    assert isinstance(driver, RedfishDriver)
    return driver


async def test_inventory_lists_every_node_with_a_session_login(
    cluster: Cluster, tmp_path: Path
) -> None:
    names = {str(state["name"]) for state in cluster.sim.node_states()}
    assert set(cluster.inventory.nodes) == names
    entry = cluster.inventory.describe()["nodes"][NODE]
    assert entry["address"] == cluster.handle.url
    assert entry["system"] == f"/redfish/v1/Systems/{NODE}"
    assert entry["auth"] == "session"
    assert (tmp_path / "bmcs.yaml").stat().st_mode & 0o077 == 0


async def test_force_off_stops_the_kubelet_and_on_reboots_it(
    cluster: Cluster, opened: Opened
) -> None:
    sim = cluster.sim
    boot_before = sim.node_state(NODE)["bootID"]
    driver = opened(driver_for(cluster))
    assert (await driver.status(timeout=5)).state == "on"
    off = await driver.power_off(timeout=5)
    assert off.state == "off", off.detail
    assert off.raw_state == "Off"
    assert off.source == f"redfish {cluster.handle.url}/redfish/v1/Systems/{NODE}"
    stopped = sim.node_state(NODE)
    assert stopped["kubelet"] == "down"

    # A dead kubelet renews nothing: a minute later its Lease is as old as the power-off and
    # the node lifecycle controller has marked the node Unknown.
    cluster.clock.advance(60)
    sim.settle()
    later = sim.node_state(NODE)
    assert later["leaseRenewTime"] == stopped["leaseRenewTime"]
    assert later["ready"] == "Unknown"
    assert (await driver.status(timeout=5)).state == "off"

    on = await driver.power_on(timeout=5)
    assert on.state == "on", on.detail
    await driver.close()
    back = sim.node_state(NODE)
    assert back["kubelet"] == "up"
    assert back["ready"] == "True"
    assert back["bootID"] != boot_before
    assert cluster.bmcs.resets == [(NODE, "ForceOff"), (NODE, "On")]
    # close() logged the session out.
    assert cluster.bmcs.sessions == {}


async def test_a_hung_kubelet_still_reads_on_and_keeps_its_age_after_force_off(
    cluster: Cluster, opened: Opened
) -> None:
    sim = cluster.sim
    sim.node_down(NODE, since_seconds=1200)
    hung = sim.node_state(NODE)
    driver = opened(driver_for(cluster))
    assert (await driver.status(timeout=5)).state == "on"
    assert (await driver.power_off(timeout=5)).state == "off"
    # Powering off a dead kubelet does not make its last sign of life "now".
    assert sim.node_state(NODE)["leaseRenewTime"] == hung["leaseRenewTime"]


async def test_power_off_of_a_machine_already_off_sends_no_second_action(
    cluster: Cluster, opened: Opened
) -> None:
    driver = opened(driver_for(cluster))
    first = await driver.power_off(timeout=5)
    second = await driver.power_off(timeout=5)
    assert first.state == second.state == "off"
    assert cluster.bmcs.resets == [(NODE, "ForceOff")]


async def test_a_kubelet_started_from_the_control_surface_means_the_machine_runs(
    cluster: Cluster, opened: Opened
) -> None:
    driver = opened(driver_for(cluster))
    assert (await driver.power_off(timeout=5)).state == "off"
    cluster.sim.node_up(NODE, reboot=True)
    assert (await driver.status(timeout=5)).state == "on"


async def test_basic_auth_works_and_a_wrong_password_is_no_proof(
    cluster: Cluster, opened: Opened
) -> None:
    good = RedfishDriver(
        cluster.handle.url,
        username=cluster.bmcs.username,
        password=cluster.bmcs.password,
        system=NODE,
        auth="basic",
    )
    bad_session = RedfishDriver(
        cluster.handle.url,
        username=cluster.bmcs.username,
        password=SecretStr("guessed-password"),
        system=NODE,
    )
    opened(good)
    opened(bad_session)
    assert (await good.status(timeout=5)).state == "on"
    refused = await bad_session.power_off(timeout=5)
    assert refused.state == "unknown"
    assert "refused the configured credentials" in refused.detail
    assert cluster.bmcs.resets == []
    assert cluster.sim.node_state(NODE)["kubelet"] == "up"


async def test_an_unknown_system_is_no_proof(cluster: Cluster, opened: Opened) -> None:
    driver = opened(
        RedfishDriver(
            cluster.handle.url,
            username=cluster.bmcs.username,
            password=cluster.bmcs.password,
            system="no-such-node",
        )
    )
    reading = await driver.power_off(timeout=5)
    assert reading.state == "unknown"
    assert "not found" in reading.detail


async def test_simulate_writes_a_loadable_bmc_inventory(tmp_path: Path, opened: Opened) -> None:
    out = tmp_path / "inventory.yaml"
    log = tmp_path / "simulate.log"
    with log.open("w") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "nodefence", "simulate", "--bmc-inventory-out", str(out)],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while "listening on" not in log.read_text():
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "simulate did not start in time"
            await asyncio.sleep(0.05)
        inventory = load_inventory(out)
        driver = inventory.driver_for("control02")
        assert driver is not None
        reading = await opened(driver).status(timeout=5)
    finally:
        process.terminate()
        process.wait(timeout=10)
    assert reading.state == "on"
    assert set(inventory.nodes) >= {"control01", "control02", "compute01"}
