"""What a power driver, a power-status service or external fencing answers about a machine's
power: one type from the driver to the decision, through the power step and the fence record
(``engine.record.RecordedReading`` adds only who asked)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from nodefence.engine.caps import field
from nodefence.engine.identity import Reported


@dataclass(frozen=True)
class PowerEvidence:
    """One answer about the power of the machine behind a node, whoever gave it: its BMC or
    fence agent (a driver's answer, then the power step's evidence, then the fence record's
    reading), a power-status service, or a proof external fencing wrote in nodefence's
    namespace. Only ``state == "off"`` counts as proof, for a BMC only a state read back after
    any power action, and for a written proof only one written after the node's last sign of
    life. A driver never produces ``off`` from anything but a read-back of Off: errors, timeouts
    and answers it does not understand are ``unknown``, with a ``detail`` a person can act on.
    Neither ``source`` nor ``detail`` ever carries a credential: both end up in decisions,
    Events and logs."""

    state: str  # "off", "on" or "unknown"
    source: str
    detail: str = ""
    # When it was read (the first reply after the reading) or, for a written proof, when it was
    # written; on the API server's clock either way.
    at: datetime | None = None
    # Whether nodefence sent the power action itself in this incident.
    action_sent: bool = False
    # Which machine the BMC or agent said it controls, read with the state (a Redfish system's
    # UUID from the same GET) or with the proof (None: not read, e.g. for external proof, which
    # names no machine).
    identity: Reported | None = None
    # Whether a reset went out in this very step (``action_sent`` also covers one sent by an
    # earlier attempt of the incident); a proof says "powered it off" only when one was sent.
    reset_sent: bool = False
    # The BMC's own word (``Off``, ``PoweringOff``, ``Status: OFF``) for people; ``state`` is
    # the only part a guard may decide on.
    raw_state: str = ""
    # Why the action this call was to send was not sent ("": nothing was held back): the
    # ``before_send`` check said the claim that decided it no longer holds.
    withheld: str = ""

    def __post_init__(self) -> None:
        """``source`` and ``detail`` kept to the caps of ``engine.caps`` from the moment the
        driver answers (a BMC's error page can be a megabyte): the decision, the question a
        person is asked about it and the fence record's reading all quote the same text."""
        object.__setattr__(self, "source", field("reading.source", self.source))
        object.__setattr__(self, "detail", field("reading.detail", self.detail))
