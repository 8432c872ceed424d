"""What a power driver answers, and the contract every driver keeps.

A fence is allowed only on ``state == "off"``, so a driver must never produce it from anything but
a read-back of Off: errors, timeouts and answers it does not understand are all ``unknown``, with a
``detail`` a person can act on. Neither ``source`` nor ``detail`` ever carries a credential, because
both end up in decisions, Events and logs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from nodefence.engine.identity import Reported

PowerState = Literal["on", "off", "unknown"]

# Asked immediately before a power action goes out, as a fencing token: "" lets it go; anything
# else says why it must not (the claim that decided it is no longer the fence record's), and
# then nothing is sent. A BMC that answered late must not act for a claim that is gone.
SendCheck = Callable[[], Awaitable[str]]


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
    # Why the action this call was to send was not sent ("": nothing was held back): the
    # ``before_send`` check said the claim that decided it no longer holds.
    withheld: str = ""


class PowerDriver(Protocol):
    """A machine's BMC. Every method returns within ``timeout`` seconds and never raises for
    anything the BMC or the network does: the bound is a parameter, not a caller's
    ``asyncio.timeout``, because the call must end in a reading that says why, not in an exception.
    ``power_off`` and ``power_on`` send their action at most once per call (a repeated action could
    undo a power state someone else set meanwhile), then read the state back until it matches or
    the time is up; not reaching the target is ``unknown``, whatever the last read said, since a
    machine told to power on that still reads Off may be on its way up. With ``before_send``,
    each action is sent only if the check, awaited right before that send, lets it go: the
    reads before a send can take long (a stalled BMC), and the claim may be gone when they end;
    a held-back action is ``unknown`` with ``withheld`` saying why."""

    async def status(self, timeout: float) -> PowerReading: ...  # noqa: ASYNC109

    async def power_off(
        self,
        timeout: float,  # noqa: ASYNC109
        *,
        before_send: SendCheck | None = None,
    ) -> PowerReading: ...

    async def power_on(
        self,
        timeout: float,  # noqa: ASYNC109
        *,
        before_send: SendCheck | None = None,
    ) -> PowerReading: ...

    async def identity(self, timeout: float) -> Reported:  # noqa: ASYNC109
        """Which machine this target controls (S10): a Redfish system's ``UUID``, the IPMI system
        GUID, or a fence agent's plug (``basis="plug"``, ``agent`` set, so it is compared with
        the instance in the Node's providerID: ``nodefence.engine.identity.expected_plug``).
        Never raises: an empty ``value`` with a ``detail`` when it cannot be read, which is no
        proof."""

    async def close(self) -> None: ...
