"""The BMC in dry-run (:class:`DryRunPower`): asked, never told. A dry-run decision whose plan
would ask a node's BMC says so (``Decision.dry_run_read``); the loop has it read here with the
same driver and the same identity check as the power step (``shell.power_step``), then a
read-only status in place of any power action; no power action, no write (S8). The engine
decides again with what was found (``Facts.dry_run_power``) and says it in a reason of its own
(``engine.dry_run``). A week of dry-run shows whether the proof would have worked.

The read is counted like any other (``nodefence_power_actions_total{action="status"}``), so the
dashboard's power-state panel shows a dry-run week's reads too.
"""

from __future__ import annotations

from nodefence.engine.model import Decision, DryRunRead, Facts, PowerAction
from nodefence.fencing import registry
from nodefence.fencing.inventory import Inventory
from nodefence.kube.client import Deadline
from nodefence.observability.metrics import Metrics
from nodefence.policy import Policy
from nodefence.shell.power_step import DRY_RUN_MARGIN_SECONDS, before_action, bmc_timeout


class DryRunPower:
    """Reads, read-only, the BMC a dry run's power action would have asked."""

    def __init__(self, policy: Policy, inventory: Inventory | None, metrics: Metrics) -> None:
        self.policy = policy
        self.inventory = inventory
        self.metrics = metrics

    async def read(
        self, action: PowerAction, decision: Decision, facts: Facts, deadline: Deadline
    ) -> DryRunRead:
        """What ``action``'s BMC says, read-only: the step's own driver lookup and identity
        check, then a status read in place of the power action."""
        timeout = bmc_timeout(self.policy, decision, deadline, DRY_RUN_MARGIN_SECONDS)
        driver, detail = registry.power_driver(self.inventory, action.node, action.driver)
        if driver is None:
            return DryRunRead(no_driver=detail)
        try:
            _reported, bound = await before_action(driver, facts, timeout)
            if not bound.bound:
                self.metrics.power_action(action.driver, "status", "unknown")
                return DryRunRead(identity=bound.message)
            reading = await driver.status(timeout)
        finally:
            await driver.close()
        self.metrics.power_action(action.driver, "status", reading.state)
        return DryRunRead(reading, identity=bound.message)
