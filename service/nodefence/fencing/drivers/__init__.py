"""One module per fencing driver: its client, and for a driver that powers the machine its
inventory entry (``ENTRY``: how to build the client, the target's words, the machine keys, how
its identity is read and checked, how its secrets are masked); for a driver that reads proof
someone else produced, how it reads it (``read_proof``). The table of drivers
(``nodefence.engine.drivers``) names each module; this package loads the one a row names.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from nodefence.engine.drivers import DRIVERS, DriverKind, lookup
from nodefence.fencing.model import BmcEntry, ProofReader


def _module(kind: DriverKind) -> ModuleType:
    return importlib.import_module(kind.module)


def entry_model(kind: DriverKind) -> type[BmcEntry]:
    """A powering driver's inventory entry model (its module's ``ENTRY``)."""
    model = getattr(_module(kind), "ENTRY", None)
    if not (isinstance(model, type) and issubclass(model, BmcEntry)):
        raise TypeError(f"fencing driver {kind.name}: {kind.module} gives no ENTRY model")
    return model


def entries() -> tuple[type[BmcEntry], ...]:
    """The inventory entry models, one per powering driver, in the table's order."""
    return tuple(entry_model(kind) for kind in DRIVERS.values() if kind.powers)


def proof_reader(name: str) -> ProofReader | None:
    """How driver ``name`` reads a proof someone else produced before deciding (its module's
    ``read_proof``), or ``None`` for a driver that powers the machine or reads nothing."""
    kind = lookup(name)
    if kind.powers or not kind.module:
        return None
    reader: ProofReader = _module(kind).read_proof
    return reader
