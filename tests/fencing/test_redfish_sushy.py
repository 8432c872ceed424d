"""The Redfish driver against sushy-emulator, a Redfish BMC nobody here wrote: basic auth, TLS
from a private CA, and its fake driver, whose ForceOff reaches Off only after a random delay."""

from __future__ import annotations

import time

from pydantic import SecretStr

from nodefence.fencing.redfish import RedfishDriver

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


async def test_discovers_the_only_system_and_reads_it_on(sushy: Sushy) -> None:
    bmc = driver(sushy)
    try:
        reading = await bmc.status(timeout=10)
    finally:
        await bmc.close()
    assert reading.state == "on"
    assert reading.raw_state == "On"
    assert reading.source == f"redfish {sushy.url}/redfish/v1/Systems/{WORKER_UUID}"


async def test_power_off_waits_for_the_read_back_of_off_then_powers_on(sushy: Sushy) -> None:
    bmc = driver(sushy)
    try:
        started = time.monotonic()
        off = await bmc.power_off(timeout=POWER_TIMEOUT)
        off_seconds = time.monotonic() - started
        after = await bmc.status(timeout=10)
        on = await bmc.power_on(timeout=POWER_TIMEOUT)
    finally:
        await bmc.close()
    assert off.state == "off", off.detail
    assert off.raw_state == "Off"
    assert off_seconds < POWER_TIMEOUT
    assert after.state == "off"
    assert on.state == "on", on.detail
    assert PASSWORD not in off.source + off.detail


async def test_power_off_of_a_machine_already_off_answers_at_once(sushy_two_systems: Sushy) -> None:
    bmc = driver(sushy_two_systems, system=SPARE_UUID)
    try:
        started = time.monotonic()
        reading = await bmc.power_off(timeout=POWER_TIMEOUT)
    finally:
        await bmc.close()
    assert reading.state == "off"
    # No action was needed, so no wait for the emulator's delayed power change either.
    assert time.monotonic() - started < 5


async def test_several_systems_need_an_explicit_system(sushy_two_systems: Sushy) -> None:
    guess = driver(sushy_two_systems)
    named = driver(sushy_two_systems, system=f"/redfish/v1/Systems/{WORKER_UUID}")
    try:
        refused = await guess.power_off(timeout=10)
        reading = await named.status(timeout=10)
    finally:
        await guess.close()
        await named.close()
    assert refused.state == "unknown"
    assert "lists 2 systems" in refused.detail
    assert "name the system" in refused.detail
    assert reading.state == "on"


async def test_wrong_password_is_no_proof(sushy: Sushy) -> None:
    bmc = driver(sushy, password=SecretStr("wrong-password-1234"))
    try:
        reading = await bmc.power_off(timeout=10)
    finally:
        await bmc.close()
    assert reading.state == "unknown"
    assert "refused the configured credentials" in reading.detail
    assert "wrong-password-1234" not in reading.detail + reading.source


async def test_certificate_from_another_ca_is_no_proof(sushy: Sushy, other_ca: Ca) -> None:
    bmc = driver(sushy, ca_file=str(other_ca.cert_file))
    try:
        started = time.monotonic()
        reading = await bmc.status(timeout=10)
    finally:
        await bmc.close()
    assert reading.state == "unknown"
    assert "not trusted" in reading.detail
    # A certificate problem does not go away by retrying: the answer comes at once.
    assert time.monotonic() - started < 5


async def test_system_trust_store_does_not_vouch_for_a_private_ca(sushy: Sushy) -> None:
    bmc = driver(sushy, ca_file=None)
    try:
        reading = await bmc.status(timeout=10)
    finally:
        await bmc.close()
    assert reading.state == "unknown"
    assert "not trusted" in reading.detail


async def test_insecure_is_an_explicit_choice_that_skips_verification(
    sushy_other_ca: Sushy,
) -> None:
    bmc = driver(sushy_other_ca, ca_file=None, insecure=True)
    try:
        reading = await bmc.status(timeout=10)
    finally:
        await bmc.close()
    assert reading.state == "on"
