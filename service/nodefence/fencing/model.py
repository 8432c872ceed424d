"""The contract every power driver keeps, what every driver's inventory entry can be asked, and
how a driver that only reads proof is called.

A driver answers with ``engine.evidence.PowerEvidence``. A fence is allowed only on
``state == "off"``, so a driver must never produce it from anything but a read-back of Off:
errors, timeouts and answers it does not understand are all ``unknown``, with a ``detail`` a
person can act on. Neither ``source`` nor ``detail`` ever carries a credential, because both end
up in decisions, Events and logs.
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from nodefence.engine.identity import UNCHECKED, Reported, parse_uuid

if TYPE_CHECKING:
    from nodefence.engine.evidence import PowerEvidence
    from nodefence.kube.client import Deadline, KubeClient
    from nodefence.policy import Fencing

PowerState = Literal["on", "off", "unknown"]

# Asked immediately before a power action goes out, as a fencing token: "" lets it go; anything
# else says why it must not (the claim that decided it is no longer the fence record's), and
# then nothing is sent. A BMC that answered late must not act for a claim that is gone.
SendCheck = Callable[[], Awaitable[str]]


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

    async def status(self, timeout: float) -> PowerEvidence: ...  # noqa: ASYNC109

    async def power_off(
        self,
        timeout: float,  # noqa: ASYNC109
        *,
        before_send: SendCheck | None = None,
    ) -> PowerEvidence: ...

    async def power_on(
        self,
        timeout: float,  # noqa: ASYNC109
        *,
        before_send: SendCheck | None = None,
    ) -> PowerEvidence: ...

    async def identity(self, timeout: float) -> Reported:  # noqa: ASYNC109
        """Which machine this target controls (S10): a Redfish system's ``UUID``, the IPMI system
        GUID, or a fence agent's plug (``basis="plug"``, ``agent`` set, so it is compared with
        the instance in the Node's providerID: ``nodefence.engine.identity.expected_plug``).
        Never raises: an empty ``value`` with a ``detail`` when it cannot be read, which is no
        proof."""

    async def close(self) -> None: ...


@dataclass(frozen=True)
class ProofPlace:
    """Where a driver that reads proof (rather than powering the machine) may look: the
    cluster, and nodefence's own namespace in it."""

    kube: KubeClient
    namespace: str


# How such a driver reads a node's proof before deciding (``DriverKind.read_proof``): never
# raises for an answer it does not like, which is ``unknown`` and no proof.
ProofReader = Callable[["ProofPlace", "Fencing", str, "Deadline"], Awaitable["PowerEvidence"]]


def machine_host(host: str) -> str:
    """A host as a machine key spells it (``BmcEntry.machine_keys``): ``[::1]`` and ``::1``,
    ``BMC-1`` and ``bmc-1`` are one host."""
    return host.strip().strip("[]").lower()


# How ``check-config`` shows a credential: never the value, never its length.
MASK = "***"

# What the machine must report for this node (a system UUID, an instance id or name), or
# ``unchecked`` where nothing can be read (a PDU outlet); unset: derived from the Node's
# systemUUID or providerID (``nodefence.engine.identity``).
Identity = Annotated[str | None, Field(min_length=1, max_length=256)]


class Strict(BaseModel):
    """A part of the inventory: a misspelt key is an error, not a silent default."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class BmcEntry(Strict, abc.ABC):
    """One node's inventory entry: how to reach the machine that powers it. Each powering driver
    gives its own (``fencing.drivers``), named by ``driver`` in the registry, and answers here
    everything the inventory, the identity checks and ``check-config`` ask of it, so none of them
    needs to know which driver it holds."""

    driver: str
    identity: Identity = None

    @abc.abstractmethod
    def build(self) -> PowerDriver:
        """A new driver for this entry's machine (the caller closes it)."""

    @abc.abstractmethod
    def target(self) -> str:
        """The machine the entry acts on as a person reads it (no secret), spelled the same for
        every entry that reaches it, so that two such entries are seen to share it."""

    def machine_keys(self) -> tuple[str, ...]:
        """Spellings-independent names of the machine (``fencing.binding.shared``): two
        entries of different drivers or option spellings that reach one machine share a key.
        None when the entry leaves the machine to discovery."""
        return ()

    def reads_uuid(self) -> bool:
        """Whether the target reports the machine's system UUID (a Redfish system, an IPMI BMC):
        then a stated identity must be a UUID, and the Node's ``systemUUID`` is a second witness
        of it, compared before any BMC is asked."""
        return True

    def stated(self) -> str:
        """The identity the entry states ("" when it states none, or says ``unchecked``)."""
        value = (self.identity or "").strip()
        return "" if value.lower() == UNCHECKED else value

    def unchecked(self) -> bool:
        return (self.identity or "").strip().lower() == UNCHECKED

    def problems(self, node: str) -> list[str]:
        """Configuration errors of this entry alone that no read can mend."""
        stated = self.stated()
        if stated and self.reads_uuid() and parse_uuid(stated) is None:
            return [
                f"configuration error: node {node}: identity {stated!r} is not a UUID, and a "
                f"{self.driver} BMC reports the machine's UUID"
            ]
        return []

    def described(self) -> dict[str, Any]:
        """The entry as ``check-config`` shows it: every credential (a ``SecretStr``, also
        inside a mapping such as a fence agent's parameters) masked."""
        shown = self.model_dump(mode="json")
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, SecretStr):
                shown[name] = MASK
            elif isinstance(value, Mapping):
                shown[name] = {
                    key: MASK if isinstance(item, SecretStr) else shown[name][key]
                    for key, item in value.items()
                }
        return shown

    @classmethod
    def canonical_option(cls, entry: Mapping[str, Any]) -> Callable[[str], str | None] | None:
        """For an entry whose options have several spellings (a fence agent's), the function
        that names each one's canonical option, so that an entry's own spelling replaces a
        default's other spelling of it; ``None`` when the spellings are the keys."""
        return None
