"""Every fencing driver, in one table: the names a rule's ``fencing.driver`` may take, whether the
driver powers the machine or only reads proof someone else produced, and the module that
implements it (``nodefence.fencing.drivers``). Policy validation, the engine, the inventory, the
power step, ``check-config`` and ``check-fencing`` all read this table, so a new driver is its
module plus one row here.

The table sits below the policy, and names its modules rather than importing them: the policy
and the engine it steers decide on names and never load a driver (``.importlinter``);
``nodefence.fencing.registry`` loads the module behind a row when a BMC is to be reached.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Proof(StrEnum):
    """What a driver's proof that the machine is off is (S10), which is how the engine judges it
    and how ``check-config`` says it."""

    # Inference alone (NotReady and a silent Lease): no proof; the machine may still be running.
    NONE = "none"
    # Written by someone else (external fencing) where nodefence reads it: it counts only if the
    # API server stamped the write after the node's last sign of life (S12).
    WRITTEN = "written"
    # The machine's power state, read from it (its BMC, fence agent or a power-status endpoint),
    # after a power-off nodefence sent where the driver powers it.
    READ_BACK = "read back"


@dataclass(frozen=True)
class DriverKind:
    """``powers``: the driver's module gives an inventory entry model (``ENTRY``) through which
    the power step reads and changes the machine's power; otherwise it gives ``read_proof``,
    how the proof is read before deciding, or (``module`` empty: ``none``) nothing. ``proof``:
    what its proof is (most read the machine's state), the one thing the engine and the CLI
    ask of a driver."""

    name: str
    module: str = ""
    powers: bool = False
    proof: Proof = Proof.READ_BACK


DRIVERS: dict[str, DriverKind] = {
    kind.name: kind
    for kind in (
        # The BMC's Redfish PowerState read back Off.
        DriverKind("redfish", "nodefence.fencing.drivers.redfish", powers=True),
        # The BMC's IPMI chassis power read back off.
        DriverKind("ipmi", "nodefence.fencing.drivers.ipmi", powers=True),
        # A separate status run of the node's ClusterLabs fence agent exiting 2 (Status: OFF).
        DriverKind("fence-agent", "nodefence.fencing.drivers.fence_agent", powers=True),
        # External fencing's written proof ConfigMap.
        DriverKind("annotation", "nodefence.fencing.drivers.annotation", proof=Proof.WRITTEN),
        # A power-status endpoint answering off.
        DriverKind("http", "nodefence.fencing.drivers.http"),
        # Inference alone: no proof.
        DriverKind("none", proof=Proof.NONE),
    )
}


class UnknownDriverError(ValueError):
    pass


def names() -> tuple[str, ...]:
    return tuple(DRIVERS)


def power_drivers() -> tuple[str, ...]:
    """The drivers that power a machine, in the table's order."""
    return tuple(name for name, kind in DRIVERS.items() if kind.powers)


def lookup(name: str) -> DriverKind:
    kind = DRIVERS.get(name)
    if kind is None:
        raise UnknownDriverError(f"unknown fencing driver {name!r} (use {', '.join(names())})")
    return kind
