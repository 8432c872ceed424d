"""S4: whose out-of-service taint is on the node, from what the API server recorded.

A taint with the right key, value and effect looks the same whoever wrote it: an administrator
running the runbook by hand writes exactly the taint nodefence writes. So appearances prove
nothing, and a taint is nodefence's only where the API server's own record of the write says so:

- nodefence stamps its taint's ``timeAdded`` with the API server's clock and keeps the value
  the write's reply carried in its fence record entry (``taint_added``); ``kubectl taint`` and
  ``kubectl edit`` leave ``timeAdded`` unset or set another one, so a taint removed and
  re-applied by someone else no longer carries it;
- before that value is recorded (the taint written, the entry not yet confirmed, say after a
  crash), the Node's ``managedFields`` must show nodefence's field manager as the last writer
  of ``spec.taints`` (a list the API server owns whole), and the taint's ``timeAdded`` must not
  predate the claim.

Anything else is someone else's: nodefence never confirms a claim on it, never purges under it
and never removes it. Entries written before nodefence recorded its taint writes (format 1
without ``taintAdded``) keep the older test (key, value and effect), so an upgrade does not
strand the fences it holds.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodefence.engine.model import OUT_OF_SERVICE_VALUE, NodeFacts, Taint
from nodefence.engine.record import FenceEntry, Phase
from nodefence.engine.wording import instant

# The field manager nodefence's node writes carry (``?fieldManager=``): what the API server
# records as the writer in ``metadata.managedFields``.
FIELD_MANAGER = "nodefence"


@dataclass(frozen=True)
class Authorship:
    ours: bool
    why: str


def _who(node: NodeFacts) -> str:
    writers = ", ".join(node.taints_written_by) or "an unknown writer"
    return f"spec.taints was last written by {writers}"


def taint_authorship(node: NodeFacts, entry: FenceEntry) -> Authorship:
    """Whether the out-of-service taint now on ``node`` is the one nodefence wrote for
    ``entry``, and why (worded for the decision record)."""
    taint = node.out_of_service_taint
    if taint is None:
        return Authorship(False, "no out-of-service taint is on the node")
    shown = f"{taint.value or '(no value)'}:{taint.effect}"
    if taint.value != OUT_OF_SERVICE_VALUE or taint.effect != entry.effect:
        return Authorship(
            False,
            f"the out-of-service taint is {shown}, not the {OUT_OF_SERVICE_VALUE}:{entry.effect} "
            "nodefence applies",
        )
    if entry.taint_added is not None:
        return _recorded(taint, entry)
    if entry.phase is Phase.CLAIMED:
        return _written_during_claim(node, taint, entry)
    return Authorship(True, "fenced before nodefence recorded its taint writes; matched by value")


def _recorded(taint: Taint, entry: FenceEntry) -> Authorship:
    assert entry.taint_added is not None
    recorded = instant(entry.taint_added)
    if taint.time_added == entry.taint_added:
        return Authorship(
            True, f"the taint carries the timeAdded of nodefence's write ({recorded})"
        )
    found = instant(taint.time_added) if taint.time_added is not None else "none"
    return Authorship(
        False,
        f"the taint's timeAdded is {found}, not the {recorded} of nodefence's own write: "
        "someone removed nodefence's taint and applied their own",
    )


def _written_during_claim(node: NodeFacts, taint: Taint, entry: FenceEntry) -> Authorship:
    if FIELD_MANAGER not in node.taints_written_by:
        return Authorship(
            False,
            f"the taint appeared while nodefence's entry was only claimed and {_who(node)}, "
            f"not {FIELD_MANAGER}: it is someone else's",
        )
    if taint.time_added is None or taint.time_added < entry.claimed_at:
        return Authorship(
            False,
            "the taint appeared while nodefence's entry was only claimed and carries no "
            f"timeAdded from after the claim ({instant(entry.claimed_at)}): it is not the one "
            "nodefence writes",
        )
    return Authorship(
        True,
        f"{FIELD_MANAGER} last wrote spec.taints and the taint's timeAdded "
        f"({instant(taint.time_added)}) follows the claim",
    )
