"""The BMC in dry-run (:func:`read_power`): asked, never told. The same driver and the same
identity check as the power step (``shell.power_step``), then a read-only status, said in a reason
of its own (``dry-run-power``); no power action, no write (S8). A week of dry-run shows whether
the proof would have worked.
"""

from __future__ import annotations

import dataclasses

from nodefence.engine.guard_kinds import DRY_RUN_POWER
from nodefence.engine.model import Decision, Facts, PowerAction, Reason
from nodefence.fencing import registry
from nodefence.fencing.inventory import Inventory
from nodefence.kube.client import Deadline
from nodefence.observability.metrics import Metrics
from nodefence.policy import Policy
from nodefence.shell.power_step import DRY_RUN_MARGIN_SECONDS, before_action, bmc_timeout


async def read_power(
    decision: Decision,
    facts: Facts,
    *,
    policy: Policy,
    inventory: Inventory | None,
    metrics: Metrics,
    deadline: Deadline,
) -> Decision:
    """``decision`` with what a read-only look at its node's BMC found (unchanged when it is
    not a dry run or would not touch a BMC): the step's own driver lookup and identity check,
    then a status read in place of any power action. The read is counted like any other
    (``nodefence_power_actions_total{action="status"}``), so the dashboard's power-state panel
    shows a dry-run week's reads too."""
    action = next((a for a in decision.actions if isinstance(a, PowerAction)), None)
    if not decision.dry_run or action is None:
        return decision
    timeout = bmc_timeout(policy, decision, deadline, DRY_RUN_MARGIN_SECONDS)
    would = (
        f"a real run would power it {action.operation} and read it back"
        if action.send
        else "a real run would read it back"
    )
    driver, detail = registry.power_driver(inventory, action.node, action.driver)
    if driver is None:
        return _with(decision, False, f"no power-state read of node {action.node}: {detail}")
    try:
        _reported, bound = await before_action(driver, facts, timeout)
        if not bound.bound:
            metrics.power_action(action.driver, "status", "unknown")
            return _with(
                decision,
                False,
                f"read-only check: the {action.driver} target of node {action.node} is not shown "
                "to be its machine, so a real run would send nothing and have no proof: "
                f"{bound.message}",
            )
        reading = await driver.status(timeout)
    finally:
        await driver.close()
    metrics.power_action(action.driver, "status", reading.state)
    said = reading.raw_state or reading.state
    answered = reading.state != "unknown"
    identity = f"; {bound.message}" if bound.message else ""
    text = (
        f"read-only power-state read: {reading.source} reports node {action.node}'s machine {said}"
        f"{identity}; no power action sent, {would}"
        if answered
        else f"read-only power-state read: {reading.source} gave no power state for node "
        f"{action.node} ({reading.detail or 'no answer'}): a real run would have no proof"
    )
    return _with(decision, answered, text)


def _with(decision: Decision, passed: bool, message: str) -> Decision:
    return dataclasses.replace(
        decision, reasons=(*decision.reasons, Reason(DRY_RUN_POWER, passed, message))
    )
