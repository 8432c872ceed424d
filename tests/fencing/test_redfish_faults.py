"""Redfish BMCs misbehaving in the ways real ones do, each of which must leave no proof: a BMC
that is down, one that accepts ForceOff but stays On, one too slow to answer, one that answers
too much or points elsewhere. A tiny aiohttp stand-in plays the BMC."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from pydantic import SecretStr

from nodefence.fencing.drivers.redfish import RedfishDriver, choose_reset_type

from .closing import Opened
from .peers import free_port

SYSTEM = "/redfish/v1/Systems/1"
TARGET = "/redfish/v1/Systems/1/Actions/Vendor.Reset"


@dataclass
class StandIn:
    """A BMC whose power state changes only when the test says so."""

    power: str = "On"
    allowed: list[str] | None = None
    resets: list[str] = field(default_factory=list)
    hang: bool = False
    unanswered: int = 0
    failures_before_answer: int = 0
    padding: int = 0
    follows_reset: bool = False
    url: str = ""

    def system(self) -> dict[str, Any]:
        action: dict[str, Any] = {"target": TARGET}
        if self.allowed is not None:
            action["ResetType@Redfish.AllowableValues"] = self.allowed
        body: dict[str, Any] = {
            "@odata.id": SYSTEM,
            "Id": "1",
            "PowerState": self.power,
            "Actions": {"#ComputerSystem.Reset": action},
        }
        if self.padding:
            body["Oem"] = {"padding": "x" * self.padding}
        return body


@pytest.fixture
async def stand_in() -> AsyncIterator[StandIn]:
    bmc = StandIn()

    async def system(_request: web.Request) -> web.StreamResponse:
        if bmc.hang:
            bmc.unanswered += 1
            await asyncio.Event().wait()
        if bmc.failures_before_answer > 0:
            bmc.failures_before_answer -= 1
            return web.Response(status=503)
        return web.json_response(bmc.system())

    async def reset(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        bmc.resets.append(str(body["ResetType"]))
        if bmc.follows_reset:
            bmc.power = "Off" if body["ResetType"] != "On" else "On"
        return web.Response(status=204)

    async def elsewhere(_request: web.Request) -> web.StreamResponse:
        raise web.HTTPTemporaryRedirect("http://192.0.2.1/redfish/v1/Systems/1")

    app = web.Application()
    app.router.add_get(SYSTEM, system)
    app.router.add_post(TARGET, reset)
    app.router.add_get("/redfish/v1/Systems/moved", elsewhere)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    bmc.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield bmc
    finally:
        await runner.cleanup()


def driver(url: str, system: str = SYSTEM) -> RedfishDriver:
    return RedfishDriver(
        url,
        username="fencer",
        password=SecretStr("hunter2-long-secret"),
        system=system,
        auth="basic",
        poll_interval=0.1,
        request_timeout=0.5,
    )


async def test_bmc_that_accepts_force_off_but_stays_on_is_no_proof(
    stand_in: StandIn, opened: Opened
) -> None:
    bmc = opened(driver(stand_in.url))
    reading = await bmc.power_off(timeout=1.5)
    assert reading.state == "unknown"
    assert reading.raw_state == "On"
    assert "sent ForceOff; the system still reports On after 1.5s" in reading.detail
    # Polled many times, acted once.
    assert stand_in.resets == ["ForceOff"]


async def test_reset_goes_to_the_target_the_system_lists(stand_in: StandIn, opened: Opened) -> None:
    stand_in.follows_reset = True
    bmc = opened(driver(stand_in.url))
    reading = await bmc.power_off(timeout=5)
    assert reading.state == "off"
    assert stand_in.resets == ["ForceOff"]


async def test_the_best_allowed_off_value_is_chosen(stand_in: StandIn, opened: Opened) -> None:
    stand_in.allowed = ["On", "GracefulShutdown", "PushPowerButton"]
    stand_in.follows_reset = True
    bmc = opened(driver(stand_in.url))
    reading = await bmc.power_off(timeout=5)
    assert reading.state == "off"
    assert stand_in.resets == ["GracefulShutdown"]


async def test_a_bmc_offering_no_off_value_gets_no_action(
    stand_in: StandIn, opened: Opened
) -> None:
    stand_in.allowed = ["On", "ForceRestart", "Nmi"]
    bmc = opened(driver(stand_in.url))
    reading = await bmc.power_off(timeout=5)
    assert reading.state == "unknown"
    assert "allows no reset type that would power off" in reading.detail
    assert "ForceRestart" in reading.detail
    assert stand_in.resets == []


async def test_slow_answers_beyond_the_timeout_are_no_proof(
    stand_in: StandIn, opened: Opened
) -> None:
    stand_in.hang = True
    bmc = opened(driver(stand_in.url))
    # The stand-in never answers: the reading can only come from the driver's own deadlines.
    reading = await bmc.power_off(timeout=2)
    assert reading.state == "unknown"
    # The call's deadline, after a request that hit the per-request timeout.
    assert reading.detail.startswith("no power off read back within 2s"), reading.detail
    assert "no answer within 0.5s" in reading.detail
    assert stand_in.unanswered >= 1
    assert stand_in.resets == []


async def test_transient_errors_of_status_reads_are_retried(
    stand_in: StandIn, opened: Opened
) -> None:
    stand_in.failures_before_answer = 3
    bmc = opened(driver(stand_in.url))
    reading = await bmc.status(timeout=5)
    assert reading.state == "on"
    assert stand_in.failures_before_answer == 0


async def test_bmc_down_is_no_proof_within_the_timeout(opened: Opened) -> None:
    bmc = opened(driver(f"http://127.0.0.1:{free_port()}"))
    reading = await bmc.power_off(timeout=1.0)
    assert reading.state == "unknown"
    # Refused connections are retried until the call's own deadline, which says why.
    assert reading.detail.startswith("no power off read back within 1s (last error: cannot "), (
        reading.detail
    )
    assert "cannot connect to 127.0.0.1" in reading.detail
    assert not reading.reset_sent


async def test_an_oversized_answer_is_no_proof(stand_in: StandIn, opened: Opened) -> None:
    stand_in.padding = 2 << 20
    bmc = opened(driver(stand_in.url))
    reading = await bmc.status(timeout=5)
    assert reading.state == "unknown"
    assert "exceeds" in reading.detail


async def test_a_redirect_to_another_host_is_not_followed(
    stand_in: StandIn, opened: Opened
) -> None:
    bmc = opened(driver(stand_in.url, system="/redfish/v1/Systems/moved"))
    reading = await bmc.status(timeout=5)
    assert reading.state == "unknown"
    assert "another host" in reading.detail


async def test_a_reading_other_than_off_is_not_proof(stand_in: StandIn, opened: Opened) -> None:
    stand_in.power = "PoweringOff"
    bmc = opened(driver(stand_in.url))
    reading = await bmc.status(timeout=5)
    assert reading.state == "unknown"
    assert reading.raw_state == "PoweringOff"
    assert "PoweringOff" in reading.detail


@pytest.mark.parametrize(
    ("allowed", "target", "current", "expected"),
    [
        (None, "off", "on", "ForceOff"),
        (None, "on", "off", "On"),
        (["On", "ForceOff", "GracefulShutdown"], "off", "on", "ForceOff"),
        (["On", "Off"], "off", "on", "Off"),
        (["On", "GracefulShutdown", "PushPowerButton"], "off", "on", "GracefulShutdown"),
        (["On", "PushPowerButton"], "off", "on", "PushPowerButton"),
        (["ForceOn", "ForceOff"], "on", "off", "ForceOn"),
        (["PushPowerButton"], "on", "off", "PushPowerButton"),
    ],
)
def test_reset_type_preference(
    allowed: list[str] | None, target: Any, current: Any, expected: str
) -> None:
    assert choose_reset_type(allowed, target, current) == expected


@pytest.mark.parametrize("current", ["unknown", "off"])
def test_power_button_is_never_pressed_without_knowing_the_machine_is_on(current: Any) -> None:
    """Pressing it on a machine that is off, or might be, could switch it on."""
    with pytest.raises(Exception, match="PushPowerButton is used only when"):
        choose_reset_type(["On", "PushPowerButton"], "off", current)
