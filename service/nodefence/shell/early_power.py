"""The read-only power-state read a decision asks for when only waits hold it back
(``Decision.needs_power_reading``, ``engine.power_waits``).

It goes through the power step's own parts: the rule's driver from the inventory, the identity
question before anything else (a target not shown to be this node's machine is not even read),
the status read within the rule's ``fencing.timeout_seconds`` and what the request has left, and
for a reading of Off the identity that goes with it. No power action is ever sent and nothing is
written: the answer is a fact of this decision only (``Facts.early_power``), dated with the API
server's clock of the snapshot it joins. The fence, if it comes, still runs the power step,
whose read-back of Off is the proof the fence record keeps (S10).

The read is counted like the power step's (``nodefence_power_actions_total{action="status"}``)
and logged, so an operator sees how often nodefence looked.
"""

from __future__ import annotations

import dataclasses

import structlog

from nodefence.engine.evidence import PowerEvidence
from nodefence.engine.model import Decision, Facts
from nodefence.fencing import registry
from nodefence.fencing.inventory import Inventory
from nodefence.kube.client import Deadline
from nodefence.observability.metrics import Metrics
from nodefence.policy import Policy
from nodefence.shell.power_step import (
    DRY_RUN_MARGIN_SECONDS,
    before_action,
    bmc_timeout,
    with_proof_read,
)

log = structlog.get_logger("nodefence.early_power")


class EarlyPower:
    """Reads a node's machine power state for a decision that waits on it."""

    def __init__(self, policy: Policy, inventory: Inventory | None, metrics: Metrics) -> None:
        self.policy = policy
        self.inventory = inventory
        self.metrics = metrics

    async def read(self, decision: Decision, facts: Facts, deadline: Deadline) -> PowerEvidence:
        """The machine's power state as its BMC reports it now, or ``unknown`` with why."""
        rule = self.policy.rule_named(decision.rule)
        node = facts.node
        fencing = rule.fencing if rule is not None else None
        if node is None or fencing is None:
            return PowerEvidence("unknown", "no BMC", "the decision names no rule with fencing")
        timeout = bmc_timeout(self.policy, decision, deadline, DRY_RUN_MARGIN_SECONDS)
        driver, detail = registry.power_driver(self.inventory, node.name, fencing.driver)
        if driver is None:
            return PowerEvidence("unknown", f"{fencing.driver} BMC", detail)
        try:
            reported, bound = await before_action(driver, facts, timeout)
            if not bound.bound:
                target = facts.machine.target if facts.machine else f"{fencing.driver} BMC"
                reading = PowerEvidence(
                    "unknown", target, f"not read: {bound.message}", identity=reported
                )
            else:
                reading = await driver.status(timeout)
                left = max(0.5, deadline.remaining - DRY_RUN_MARGIN_SECONDS)
                identity = await with_proof_read(driver, reading, facts, left)
                reading = dataclasses.replace(reading, identity=identity or reported)
        finally:
            await driver.close()
        self.metrics.power_action(fencing.driver, "status", reading.state)
        log.info(
            "early_power_read",
            node=node.name,
            driver=fencing.driver,
            state=reading.state,
            bmc_state=reading.raw_state,
            source=reading.source,
            detail=reading.detail,
        )
        return reading
