"""The proof audited after the fact (S10): a machine that was off comes back with a new boot ID.

``status.nodeInfo.bootID`` is the kernel's random per-boot id, which the kubelet reports with the
status that makes the node Ready again. A node fenced on a BMC's (or agent's) Off that returns
Ready with the boot ID recorded at fence time was never powered off: the BMC lied, or acted on
another machine. Everything done on that proof may have let a second copy of its workloads run
beside the first, so nodefence does not quietly unfence it: it says so loudly (a Warning Event,
a metric, a shipped alert) and holds its taint until a person has looked and released it.
"""

from __future__ import annotations

from nodefence.engine.guard_kinds import PROOF_CONTRADICTED
from nodefence.engine.model import NodeFacts, Reason
from nodefence.engine.readiness import node_is_ready
from nodefence.engine.record import FenceEntry
from nodefence.engine.wording import instant
from nodefence.policy import Rule


def _release_hint(node: str) -> str:
    return (
        f"the taint is held until a person releases it (nodefence release {node} --reason ..., "
        "or removes the taint) after checking what ran twice"
    )


def _proved_by_power(entry: FenceEntry, rule: Rule) -> bool:
    """Whether the fence stood on a power-off nodefence sent or read from the node's machine."""
    fencing = rule.fencing
    return entry.power_off_sent_at is not None or (fencing is not None and fencing.powers)


def contradiction(node: NodeFacts, entry: FenceEntry, rule: Rule) -> tuple[Reason, bool] | None:
    """None while the proof stands. Otherwise the blocking reason and whether this is the first
    sighting (to be written into the record, which keeps the taint held from then on)."""
    if entry.proof_contradicted_at is not None:
        return (
            Reason(
                PROOF_CONTRADICTED,
                False,
                f"node {node.name}'s power-off proof was found false at "
                f"{instant(entry.proof_contradicted_at)} (it came back with the boot ID "
                f"{entry.boot_id or '(none)'} it had when fenced); {_release_hint(node.name)}",
            ),
            False,
        )
    if not _proved_by_power(entry, rule) or not node_is_ready(node):
        return None
    if not node.boot_id or node.boot_id != entry.boot_id:
        return None
    proof = f" ({entry.proof})" if entry.proof else ""
    return (
        Reason(
            PROOF_CONTRADICTED,
            False,
            f"node {node.name} is Ready again with boot ID {node.boot_id}, the one it had when "
            f"it was fenced: a machine that was powered off boots with a new boot ID, so the "
            f"power-off proof{proof} was false and the machine may have run all along; not "
            f"unfenced: {_release_hint(node.name)}",
        ),
        True,
    )
