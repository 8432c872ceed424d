"""The IPMI driver against a BMC on pyghmi's own server side, in a separate process on a
loopback UDP port (pyghmi keeps its I/O state per process, so client and server stay apart)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from nodefence.fencing.ipmi import IpmiDriver

from .peers import PASSWORD, USER, IpmiBmc, free_port, start_ipmi_bmc


@pytest.fixture
def ipmi_bmc(tmp_path: Path) -> Iterator[IpmiBmc]:
    bmc = start_ipmi_bmc(tmp_path, power="on", off_delay=1.0)
    try:
        yield bmc
    finally:
        bmc.process.stop()


@pytest.fixture
def stuck_bmc(tmp_path: Path) -> Iterator[IpmiBmc]:
    """Accepts power off and never gets there."""
    bmc = start_ipmi_bmc(tmp_path, power="on", off_delay=3600)
    try:
        yield bmc
    finally:
        bmc.process.stop()


def driver(port: int, password: str = PASSWORD) -> IpmiDriver:
    return IpmiDriver(
        "127.0.0.1", username=USER, password=SecretStr(password), port=port, poll_interval=0.2
    )


async def test_power_off_waits_for_off_then_power_on(ipmi_bmc: IpmiBmc) -> None:
    bmc = driver(ipmi_bmc.port)
    try:
        before = await bmc.status(timeout=10)
        off = await bmc.power_off(timeout=10)
        on = await bmc.power_on(timeout=10)
    finally:
        await bmc.close()
    assert before.state == "on"
    assert off.state == "off", off.detail
    assert off.raw_state == "off"
    assert off.source == f"ipmi 127.0.0.1:{ipmi_bmc.port}"
    assert on.state == "on", on.detail
    assert ipmi_bmc.process.output().count("power off requested") == 1


async def test_power_off_of_a_machine_already_off_sends_nothing(tmp_path: Path) -> None:
    peer = start_ipmi_bmc(tmp_path, power="off")
    bmc = driver(peer.port)
    try:
        reading = await bmc.power_off(timeout=10)
    finally:
        await bmc.close()
        peer.process.stop()
    assert reading.state == "off"
    assert "power off requested" not in peer.process.output()


async def test_wrong_password_is_no_proof(ipmi_bmc: IpmiBmc) -> None:
    bmc = driver(ipmi_bmc.port, password="not-the-password")
    try:
        started = time.monotonic()
        reading = await bmc.power_off(timeout=10)
        elapsed = time.monotonic() - started
    finally:
        await bmc.close()
    assert reading.state == "unknown"
    assert "refused the configured credentials" in reading.detail
    assert "not-the-password" not in reading.detail
    # Refusals are not retried: that would only lock the account out sooner.
    assert elapsed < 5
    assert "power off requested" not in ipmi_bmc.process.output()


async def test_bmc_that_accepts_power_off_but_stays_on_is_no_proof(stuck_bmc: IpmiBmc) -> None:
    bmc = driver(stuck_bmc.port)
    try:
        reading = await bmc.power_off(timeout=2)
    finally:
        await bmc.close()
    assert reading.state == "unknown"
    assert reading.raw_state == "on"
    assert "sent power off; the BMC still reports on after 2s" in reading.detail
    assert stuck_bmc.process.output().count("power off requested") == 1


async def test_bmc_down_is_no_proof_within_the_timeout() -> None:
    bmc = driver(free_port(socket.SOCK_DGRAM))
    try:
        started = time.monotonic()
        reading = await bmc.status(timeout=1.5)
        elapsed = time.monotonic() - started
    finally:
        await bmc.close()
    assert reading.state == "unknown"
    assert "no answer from the BMC within 1.5s" in reading.detail
    assert elapsed < 3
