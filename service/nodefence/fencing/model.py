"""What a power driver answers, and the contract every driver keeps.

A fence is allowed only on ``state == "off"``, so a driver must never produce it from anything but
a read-back of Off: errors, timeouts and answers it does not understand are all ``unknown``, with a
``detail`` a person can act on. Neither ``source`` nor ``detail`` ever carries a credential, because
both end up in decisions, Events and logs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from nodefence.engine.identity import Reported

PowerState = Literal["on", "off", "unknown"]


@dataclass(frozen=True)
class PowerReading:
    """One answer about a machine's power: ``raw_state`` keeps the BMC's own word (``Off``,
    ``PoweringOff``) for the record, ``state`` is the only part a guard may decide on."""

    state: PowerState
    source: str
    detail: str = ""
    raw_state: str = ""
    # Whether this call sent a power action (a machine already in the target state gets none):
    # a proof says "powered it off" only when one was sent.
    reset_sent: bool = False
    # The machine's identity as read together with the state (a Redfish system's UUID from the
    # same GET), or "" when the driver reads it separately (``PowerDriver.identity``).
    identity: str = ""


class PowerDriver(Protocol):
    """A machine's BMC. Every method returns within ``timeout`` seconds and never raises for
    anything the BMC or the network does: the bound is a parameter, not a caller's
    ``asyncio.timeout``, because the call must end in a reading that says why, not in an exception.
    ``power_off`` and ``power_on`` send their action at most once per call (a repeated action could
    undo a power state someone else set meanwhile), then read the state back until it matches or
    the time is up; not reaching the target is ``unknown``, whatever the last read said, since a
    machine told to power on that still reads Off may be on its way up."""

    async def status(self, timeout: float) -> PowerReading: ...  # noqa: ASYNC109

    async def power_off(self, timeout: float) -> PowerReading: ...  # noqa: ASYNC109

    async def power_on(self, timeout: float) -> PowerReading: ...  # noqa: ASYNC109

    async def identity(self, timeout: float) -> Reported:  # noqa: ASYNC109
        """Which machine this target controls (S10): a Redfish system's ``UUID``, the IPMI system
        GUID, or a fence agent's plug (``basis="plug"``, ``agent`` set, so it is compared with
        the instance in the Node's providerID: ``nodefence.engine.identity.expected_plug``).
        Never raises: an empty ``value`` with a ``detail`` when it cannot be read, which is no
        proof."""

    async def close(self) -> None: ...
