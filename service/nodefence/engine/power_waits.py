"""Waits that know the evidence: a machine its BMC reads Off has nothing left to wait for.

Two of the fence path's waits exist because a NotReady node may still be running: the NotReady
minimum (``min_not_ready_seconds``: a hang, a partition or a kubelet restart may end on its own)
and the fallback's wait for an alert (``cluster.fallback_after_seconds``). Neither proves
anything; the proof is the power step's read-back of Off. Where the node's own machine already
reads Off, waiting only keeps its pods down.

So, for a rule with ``power_off_ends_wait`` (shipped on) and a driver that powers machines,
when a decision is held back by those waits alone, the shell reads the machine's power state
read-only (the power step's driver, identity check and timeouts, no power action) and the engine
decides again with that reading as ``Facts.early_power``. Off, from the machine shown to be this
node's, ends both waits; anything else (On, unknown, another machine) keeps them, and the reason
says which evidence shortened or kept the wait. Every other guard still runs: S1 (Ready not
True), S2 (the Lease silent for its window), the budget, storm, quorum, flap, exclusion, pause and
silences. The reading is never the fence's proof: the power step reads the machine again and
records that answer before any taint (S10).

Who can fake it: a node cannot make its BMC report Off, and a BMC that answers for another
machine is caught by the identity binding (``machine.bound_to_node``). The reading is dated by
the API server's clock of the snapshot it was taken with.
"""

from __future__ import annotations

from collections.abc import Iterable

from nodefence.engine.guard_kinds import ended_by_off
from nodefence.engine.machine import bound_to_node
from nodefence.engine.model import Facts, NodeFacts, Reason
from nodefence.engine.wording import instant
from nodefence.policy import Rule


def applies(rule: Rule) -> bool:
    """Whether the rule lets a reading of Off end its waits: its setting is on and its driver
    can read a machine's power state."""
    fencing = rule.fencing
    return rule.power_off_ends_wait and fencing is not None and fencing.powers


def off_here(node: NodeFacts, facts: Facts, rule: Rule) -> str | None:
    """The words for a read-only reading of Off from this node's machine, which ends the waits;
    None when there is none (not read, not Off, not shown to be this machine, or not allowed)."""
    early = facts.early_power
    if not applies(rule) or early is None or early.state != "off":
        return None
    identity = bound_to_node(node, facts, early)
    if not identity.passed:
        return None
    when = f" at {instant(early.at)}" if early.at is not None else ""
    said = early.raw_state or early.state
    return (
        f"{early.source} reports node {node.name}'s machine {said} (read-only{when}; "
        f"{identity.message}): a machine that is off has nothing left to wait for"
    )


def kept(node: NodeFacts, facts: Facts, rule: Rule) -> str:
    """Why the wait applies although a reading could have ended it, or "" when the rule does not
    let one (or no reading was taken): the machine reads On, gives no state, or is not shown to
    be this node's."""
    early = facts.early_power
    if not applies(rule) or early is None:
        return ""
    said = early.raw_state or early.state
    if early.state == "off":
        identity = bound_to_node(node, facts, early)
        return f"; {early.source} reports a machine {said}, but {identity.message}"
    if early.state == "on":
        return (
            f"; {early.source} reports node {node.name}'s machine {said}: a hang, a partition or a "
            "kubelet that stopped, so the wait applies"
        )
    detail = f" ({early.detail})" if early.detail else ""
    return f"; {early.source} gave no power state{detail}, so the wait applies"


def may_end(rule: Rule, facts: Facts, blocking: Iterable[Reason]) -> bool:
    """Whether a read-only reading could end something holding this decision back: the rule
    allows it, none was taken, and a wait a reading of Off ends is among the blocking guards
    (whether it is all of them is ``Decision.needs_power_reading``'s to say)."""
    waits = any(ended_by_off(reason.guard) for reason in blocking)
    return applies(rule) and facts.early_power is None and waits
