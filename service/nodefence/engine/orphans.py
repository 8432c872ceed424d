"""S3 and S4 for a fence whose record entry is gone: adopted back only where authorship proves it.

The fence record is nodefence's authority; its mirror annotations on the Node are for people and
can be written by the node's own credentials (S12). A node carrying nodefence's mirror and an
out-of-service taint, but no entry, shows a record that lost it (deleted by hand, restored from
an old copy). The taint still spends a budget slot (the budget guard counts every tainted node),
and it is said loudly. nodefence takes it back into its record only where the API server shows
nodefence wrote it: its field manager is the last writer of ``spec.taints``, the taint carries
the ``timeAdded`` nodefence stamps, and the mirror names this very node object. Anything short
of that is left to a person: nodefence never removes a taint it cannot show it applied.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodefence.engine import mirror
from nodefence.engine.authorship import FIELD_MANAGER
from nodefence.engine.model import OUT_OF_SERVICE_VALUE, ClaimAction, Facts, NodeFacts
from nodefence.engine.record import FenceEntry, Phase
from nodefence.engine.wording import instant, parse_instant

ADOPTED = "adopted"


@dataclass(frozen=True)
class Orphan:
    """What to say about the orphaned fence, and the claim that adopts it back (None: it is
    left to a person)."""

    adopted: bool
    message: str
    claim: ClaimAction | None = None


def is_orphan(node: NodeFacts, facts: Facts) -> bool:
    """nodefence's mirror and an out-of-service taint on the node, and no entry for it."""
    return (
        facts.record.entry(node.name) is None
        and node.out_of_service_taint is not None
        and node.annotations.get(mirror.FENCED_BY) == mirror.FENCED_BY_VALUE
    )


def judge(node: NodeFacts, facts: Facts) -> Orphan:
    taint = node.out_of_service_taint
    assert taint is not None
    lost = (
        f"node {node.name} carries nodefence's out-of-service taint and mirror annotations, "
        f"but the fence record (ConfigMap nodefence-fences) holds no entry for it: the record "
        "was deleted or lost entries"
    )
    notes = node.annotations
    why_not = ""
    if FIELD_MANAGER not in node.taints_written_by:
        writers = ", ".join(node.taints_written_by) or "an unknown writer"
        why_not = f"spec.taints was last written by {writers}, not {FIELD_MANAGER}"
    elif taint.time_added is None:
        why_not = "the taint carries no timeAdded, which nodefence stamps on every taint it writes"
    elif taint.value != OUT_OF_SERVICE_VALUE:
        why_not = f"the taint's value is {taint.value or '(none)'}, not {OUT_OF_SERVICE_VALUE}"
    elif notes.get(mirror.NODE_UID) != node.uid:
        why_not = "the mirror annotations were written for another node object"
    if why_not:
        return Orphan(
            False,
            f"{lost}; the taint is not shown to be nodefence's ({why_not}), so nodefence "
            "leaves it alone and counts it against the budget: a person must check the node and "
            "remove the taint by hand when it is safe",
        )
    added = taint.time_added
    assert added is not None
    claimed_at = parse_instant(notes.get(mirror.FENCED_AT)) or added
    entry = FenceEntry(
        node=node.name,
        uid=node.uid,
        phase=Phase.FENCED,
        claimed_at=min(claimed_at, added),
        rule=notes.get(mirror.RULE, ""),
        alertname=notes.get(mirror.ALERTNAME, ""),
        fingerprint=notes.get(mirror.ALERT_FINGERPRINT, ""),
        boot_id=notes.get(mirror.BOOT_ID, ""),
        effect=taint.effect,
        control_plane=node.is_control_plane,
        claimed_by=ADOPTED,
        fenced_at=added,
        proof=notes.get(mirror.PROOF, "") + " (entry adopted back after the record lost it)",
        taint_added=added,
    )
    return Orphan(
        True,
        f"{lost}; the API server shows nodefence wrote the taint ({FIELD_MANAGER} last wrote "
        f"spec.taints, timeAdded {instant(added)}), so its entry is written back",
        ClaimAction(entry, facts.record.resource_version),
    )
