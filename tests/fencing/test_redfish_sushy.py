"""The Redfish driver against sushy-emulator, a Redfish BMC nobody here wrote: basic auth, TLS
from a private CA, and its fake driver, whose ForceOff reaches Off only after a random delay."""

from __future__ import annotations

from pydantic import SecretStr

from nodefence.fencing.drivers.redfish import RedfishDriver

from .closing import Opened
from .conftest import SPARE_UUID, WORKER_UUID
from .peers import PASSWORD, USER, Ca, Sushy

# The fake driver applies a power change 1-11 s (whole seconds of the wall clock) after the action.
POWER_TIMEOUT = 20.0


def driver(sushy: Sushy, **overrides: object) -> RedfishDriver:
    options: dict[str, object] = {
        "username": USER,
        "password": SecretStr(PASSWORD),
        "auth": "basic",
        "ca_file": str(sushy.ca_file),
        "poll_interval": 0.25,
    }
    options.update(overrides)
    return RedfishDriver(sushy.url, **options)  # type: ignore[arg-type]


def reset_actions(sushy: Sushy) -> int:
    """Reset actions the emulator received, from its access log (written before it answers)."""
    return sum(
        "POST " in line and "/Actions/ComputerSystem.Reset " in line
        for line in sushy.process.log.read_text(errors="replace").splitlines()
    )


async def test_discovers_the_only_system_and_reads_it_on(sushy: Sushy, opened: Opened) -> None:
    bmc = opened(driver(sushy))
    reading = await bmc.status(timeout=10)
    assert reading.state == "on"
    assert reading.raw_state == "On"
    assert reading.source == f"redfish {sushy.url}/redfish/v1/Systems/{WORKER_UUID}"


async def test_power_off_waits_for_the_read_back_of_off_then_powers_on(
    sushy: Sushy, opened: Opened
) -> None:
    bmc = opened(driver(sushy))
    off = await bmc.power_off(timeout=POWER_TIMEOUT)
    # Off is read back only within the call's deadline: past it the reading would be unknown.
    assert off.state == "off", off.detail
    assert off.raw_state == "Off"
    # Polled until Off, acted once.
    assert reset_actions(sushy) == 1
    after = await bmc.status(timeout=10)
    assert after.state == "off"
    on = await bmc.power_on(timeout=POWER_TIMEOUT)
    assert on.state == "on", on.detail
    assert reset_actions(sushy) == 2
    assert PASSWORD not in off.source + off.detail


async def test_power_off_of_a_machine_already_off_answers_at_once(
    sushy_two_systems: Sushy, opened: Opened
) -> None:
    bmc = opened(driver(sushy_two_systems, system=SPARE_UUID))
    reading = await bmc.power_off(timeout=POWER_TIMEOUT)
    assert reading.state == "off"
    # No action was needed, so no wait for the emulator's delayed power change either.
    assert not reading.reset_sent
    assert reset_actions(sushy_two_systems) == 0


async def test_several_systems_need_an_explicit_system(
    sushy_two_systems: Sushy, opened: Opened
) -> None:
    guess = opened(driver(sushy_two_systems))
    named = opened(driver(sushy_two_systems, system=f"/redfish/v1/Systems/{WORKER_UUID}"))
    refused = await guess.power_off(timeout=10)
    reading = await named.status(timeout=10)
    assert refused.state == "unknown"
    assert "lists 2 systems" in refused.detail
    assert "name the system" in refused.detail
    assert reading.state == "on"
    assert reset_actions(sushy_two_systems) == 0


async def test_wrong_password_is_no_proof(sushy: Sushy, opened: Opened) -> None:
    bmc = opened(driver(sushy, password=SecretStr("wrong-password-1234")))
    reading = await bmc.power_off(timeout=10)
    assert reading.state == "unknown"
    assert reading.detail.startswith("the BMC refused the configured credentials"), reading.detail
    assert "wrong-password-1234" not in reading.detail + reading.source


async def test_certificate_from_another_ca_is_no_proof(
    sushy: Sushy, other_ca: Ca, opened: Opened
) -> None:
    bmc = opened(driver(sushy, ca_file=str(other_ca.cert_file)))
    reading = await bmc.status(timeout=10)
    assert reading.state == "unknown"
    # A certificate problem does not go away by retrying: the refusal itself is the answer, not
    # the deadline running out behind retries of it.
    assert reading.detail.startswith("the TLS certificate of 127.0.0.1 is not trusted"), (
        reading.detail
    )


async def test_system_trust_store_does_not_vouch_for_a_private_ca(
    sushy: Sushy, opened: Opened
) -> None:
    bmc = opened(driver(sushy, ca_file=None))
    reading = await bmc.status(timeout=10)
    assert reading.state == "unknown"
    assert "not trusted" in reading.detail


async def test_insecure_is_an_explicit_choice_that_skips_verification(
    sushy_other_ca: Sushy, opened: Opened
) -> None:
    bmc = opened(driver(sushy_other_ca, ca_file=None, insecure=True))
    reading = await bmc.status(timeout=10)
    assert reading.state == "on"
