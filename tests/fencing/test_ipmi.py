"""The IPMI driver against a BMC on pyghmi's own server side, in a separate process on a
loopback UDP port (pyghmi keeps its I/O state per process, so client and server stay apart)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from nodefence.fencing.drivers.ipmi import IpmiDriver

from .closing import Opened
from .peers import PASSWORD, USER, IpmiBmc, free_port, start_ipmi_bmc


def _running(bmc: IpmiBmc) -> Iterator[IpmiBmc]:
    try:
        yield bmc
    finally:
        bmc.process.stop()


@pytest.fixture
def ipmi_bmc(tmp_path: Path) -> Iterator[IpmiBmc]:
    yield from _running(start_ipmi_bmc(tmp_path, power="on", off_delay=1.0))


@pytest.fixture
def off_bmc(tmp_path: Path) -> Iterator[IpmiBmc]:
    """A machine that is already off."""
    yield from _running(start_ipmi_bmc(tmp_path, power="off"))


@pytest.fixture
def stuck_bmc(tmp_path: Path) -> Iterator[IpmiBmc]:
    """Accepts power off and never gets there."""
    yield from _running(start_ipmi_bmc(tmp_path, power="on", off_delay=3600))


def driver(port: int, password: str = PASSWORD) -> IpmiDriver:
    return IpmiDriver(
        "127.0.0.1", username=USER, password=SecretStr(password), port=port, poll_interval=0.2
    )


async def test_power_off_waits_for_off_then_power_on(ipmi_bmc: IpmiBmc, opened: Opened) -> None:
    bmc = opened(driver(ipmi_bmc.port))
    before = await bmc.status(timeout=10)
    off = await bmc.power_off(timeout=10)
    on = await bmc.power_on(timeout=10)
    assert before.state == "on"
    assert off.state == "off", off.detail
    assert off.raw_state == "off"
    assert off.source == f"ipmi 127.0.0.1:{ipmi_bmc.port}"
    assert on.state == "on", on.detail
    assert ipmi_bmc.process.output().count("power off requested") == 1


async def test_power_off_of_a_machine_already_off_sends_nothing(
    off_bmc: IpmiBmc, opened: Opened
) -> None:
    bmc = opened(driver(off_bmc.port))
    reading = await bmc.power_off(timeout=10)
    assert reading.state == "off"
    assert "power off requested" not in off_bmc.process.output()


async def test_wrong_password_is_no_proof(ipmi_bmc: IpmiBmc, opened: Opened) -> None:
    bmc = opened(driver(ipmi_bmc.port, password="not-the-password"))
    reading = await bmc.power_off(timeout=10)
    assert reading.state == "unknown"
    # The refusal itself is the answer, not the deadline running out behind it.
    assert reading.detail.startswith("the BMC refused the configured credentials"), reading.detail
    assert "not-the-password" not in reading.detail
    # Refusals are not retried: that would only lock the account out sooner.
    logins = {line for line in ipmi_bmc.process.output().splitlines() if "login attempt" in line}
    assert len(logins) == 1, logins
    assert "power off requested" not in ipmi_bmc.process.output()


async def test_bmc_that_accepts_power_off_but_stays_on_is_no_proof(
    stuck_bmc: IpmiBmc, opened: Opened
) -> None:
    bmc = opened(driver(stuck_bmc.port))
    # Long enough for the login, the read and the action on a busy machine.
    reading = await bmc.power_off(timeout=5)
    assert reading.state == "unknown"
    assert reading.raw_state == "on"
    assert "sent power off; the BMC still reports on after 5s" in reading.detail
    assert stuck_bmc.process.output().count("power off requested") == 1


async def test_bmc_down_is_no_proof_within_the_timeout(opened: Opened) -> None:
    bmc = opened(driver(free_port(socket.SOCK_DGRAM)))
    reading = await bmc.status(timeout=1.5)
    assert reading.state == "unknown"
    # The call's own deadline answers, though pyghmi's thread may still be waiting for the BMC.
    assert reading.detail.startswith("no answer from the BMC within 1.5s"), reading.detail
