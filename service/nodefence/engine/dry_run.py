"""A dry run's look at the BMC: asked, never told (S8), so a week of dry run shows whether the
proof would have worked.

A dry-run decision whose plan would ask the node's BMC (a ``PowerAction``) wants that look
(``Decision.dry_run_read``). The shell takes it with the power step's own driver lookup and
identity check, and a status read in place of the power action (``shell.dry_run_power``); the
engine decides again with it as ``Facts.dry_run_power`` and says what it found in a reason of
its own (``dry-run-power``), last, since it is about the plan the other reasons made.
"""

from __future__ import annotations

import dataclasses

from nodefence.engine.guard_kinds import DRY_RUN_POWER
from nodefence.engine.model import Decision, DryRunRead, Facts, PowerAction, Reason


def noted(decision: Decision, facts: Facts) -> Decision:
    """``decision`` with what the read-only look at its node's BMC found, or asking for that
    look when it was not taken; unchanged when it is not a dry run or would not touch a BMC."""
    action = next((a for a in decision.actions if isinstance(a, PowerAction)), None)
    if not decision.dry_run or action is None:
        return decision
    read = facts.dry_run_power
    if read is None:
        return dataclasses.replace(decision, dry_run_read=action)
    reason = Reason(DRY_RUN_POWER, *found(action, read))
    return dataclasses.replace(decision, reasons=(*decision.reasons, reason))


def found(action: PowerAction, read: DryRunRead) -> tuple[bool, str]:
    """Whether the look found what a real run's proof needs (a power state from the node's own
    machine), and in words."""
    node = action.node
    if read.no_driver is not None:
        return False, f"no power-state read of node {node}: {read.no_driver}"
    reading = read.reading
    if reading is None:
        return False, (
            f"read-only check: the {action.driver} target of node {node} is not shown to be its "
            f"machine, so a real run would send nothing and have no proof: {read.identity}"
        )
    if reading.state == "unknown":
        return False, (
            f"read-only power-state read: {reading.source} gave no power state for node {node} "
            f"({reading.detail or 'no answer'}): a real run would have no proof"
        )
    would = (
        f"a real run would power it {action.operation} and read it back"
        if action.send
        else "a real run would read it back"
    )
    identity = f"; {read.identity}" if read.identity else ""
    said = reading.raw_state or reading.state
    return True, (
        f"read-only power-state read: {reading.source} reports node {node}'s machine {said}"
        f"{identity}; no power action sent, {would}"
    )
