"""The BMC step: the one write nodefence makes outside the cluster.

The fence record says the action is sent before it is sent, so a second replica or a later
delivery never sends it twice; only a state read back from the BMC becomes evidence, and a BMC
that cannot be reached, refuses the credentials or never reports the state asked for is no proof.
"""

from __future__ import annotations

import dataclasses

from nodefence.actions import power_binding
from nodefence.actions.executor import ActionResult, Outcome
from nodefence.actions.fence_record_writer import FenceRecordWriter
from nodefence.engine.model import Decision, Facts, PowerAction, PowerEvidence
from nodefence.engine.record import Phase
from nodefence.fencing.inventory import Inventory
from nodefence.fencing.registry import power_driver
from nodefence.kube.client import Deadline
from nodefence.policy import Policy
from nodefence.shell.report import Reporter

# Time kept back from the request's deadline for the writes after the BMC answered.
POWER_MARGIN_SECONDS = 2.0


class PowerStep:
    def __init__(
        self,
        policy: Policy,
        inventory: Inventory | None,
        records: FenceRecordWriter,
        reporter: Reporter,
    ) -> None:
        self.policy = policy
        self.inventory = inventory
        self.records = records
        self.reporter = reporter

    async def run(
        self,
        action: PowerAction,
        decision: Decision,
        token: str,
        deadline: Deadline,
        *,
        facts: Facts,
    ) -> tuple[ActionResult, PowerEvidence | None]:
        """The result, and the BMC's answer as evidence (None when the record refused to say
        the action is sent, so nothing was asked)."""
        kind = f"power-{action.operation}"
        rule = self.policy.rule_named(decision.rule)
        fencing = rule.fencing if rule is not None else None
        budget = max(0.5, deadline.remaining - POWER_MARGIN_SECONDS)
        timeout = min(fencing.timeout_seconds, budget) if fencing is not None else budget
        driver, detail = power_driver(self.inventory, action.node, action.driver)
        if driver is None:
            self.reporter.power_unanswered(action)
            evidence = PowerEvidence("unknown", f"{action.driver} BMC", detail)
            return ActionResult(kind, action.node, Outcome.FAILED, detail), evidence
        try:
            # S10: nothing is sent to a machine not shown to be this node's.
            reported, bound = await power_binding.before_action(driver, facts, timeout)
            if not bound.bound:
                self.reporter.power_unanswered(action)
                return power_binding.refused(action, facts, reported, bound)
            if action.send:
                claim = action.claimed_by or (token if action.operation != "on" else "")
                marked = await self.records.power_sent(
                    action.node,
                    action.node_uid,
                    claim,
                    action.operation,
                    deadline,
                    expected=action.entry,
                )
                if marked.outcome is not Outcome.DONE:
                    return dataclasses.replace(marked, action=kind), None
            # The identity read spent part of the budget: the action gets what is left.
            timeout = min(timeout, max(0.5, deadline.remaining - POWER_MARGIN_SECONDS))
            if action.operation == "on":
                reading = await driver.power_on(timeout)
            elif action.operation == "off" and action.send:
                reading = await driver.power_off(timeout)
            else:
                reading = await driver.status(timeout)
            left = max(0.5, deadline.remaining - POWER_MARGIN_SECONDS)
            identity = await power_binding.with_proof_read(driver, reading, facts, left)
        finally:
            await driver.close()
        self.reporter.power_reading(action, reading)
        unsent = action.send and action.operation == "off" and not reading.reset_sent
        if unsent and reading.state == "unknown":
            # Marked as sent, but the driver sent nothing: unmarked, so the claim goes.
            await self.records.power_not_sent(
                action.node, action.node_uid, action.claimed_by or token, deadline
            )
        evidence = power_binding.evidence_of(action, reading, identity)
        said = f"{reading.source} reports {reading.raw_state or reading.state}"
        done = Outcome.DONE if reading.state != "unknown" else Outcome.FAILED
        detail = f"{said}: {reading.detail}" if reading.detail else said
        proof = power_binding.proof_to_record(facts, evidence)
        # A fenced node's machine read again (a reboot that did not come back) proves nothing
        # new: the fence's proof stays as it was.
        proving = action.entry is None or action.entry.phase is Phase.CLAIMED
        if action.operation != "on" and proof and proving:
            # Written before the taint: a crash after it cannot lose the proof.
            written = await self.records.proof(
                action.node,
                action.node_uid,
                action.claimed_by or token,
                lambda now: power_binding.proof_to_record(
                    facts, power_binding.timed(evidence, now)
                ),
                deadline,
            )
            if written.outcome is not Outcome.DONE:
                return dataclasses.replace(written, action=kind), None
            detail = f"{detail}; proof recorded: {proof}"
        return ActionResult(kind, action.node, done, detail), evidence
