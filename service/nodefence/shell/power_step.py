"""The power step (:class:`PowerStep`): how nodefence learns whether a node's machine is off (S10)
once a decision asks for it, the one write nodefence makes outside the cluster.

Before any power action the target is asked which machine it controls (:func:`before_action`),
and the action goes out only if that is the node's machine: a wrong inventory line must not power
off a healthy machine. The fence record says the action is sent before it is sent, so a second
replica or a later delivery never sends it twice; only a state read back from the BMC becomes
evidence, and a BMC that cannot be reached, refuses the credentials or never reports the state
asked for is no proof. With the proof the identity is read again (:func:`with_proof_read`; for
Redfish from the very GET that reported Off), so the Off is known to be this machine's. Whatever
the BMC answered is written into the fence record (``engine.power_reading``) before anything is
decided on it: the request's next turn reads it back with the rest of its facts, and a replica
that dies after the taint leaves the proof behind.

Every power action is tied to the claim that decided it: right before the driver sends it (after
the reads that can stall for as long as a BMC takes), the record is read again and the action
goes out only while that claim is still the node's entry. A claim rolled back meanwhile (an
exclusion, a stale claim, an admin's edit) may have been taken afresh by another replica that
powered the machine on again; the late action would take it down.

The identity check, the BMC's time and the margins are shared with the read-only reads of the
same BMC: in dry-run (``shell.dry_run_power``) and when only waits hold a decision back
(``shell.early_power``).
"""

from __future__ import annotations

import dataclasses
from datetime import datetime

from nodefence.actions.executor import ActionResult, Outcome
from nodefence.actions.fence_record_writer import FenceRecordWriter
from nodefence.engine import power_reading
from nodefence.engine.evidence import PowerEvidence
from nodefence.engine.identity import Judgement, Reported, judge
from nodefence.engine.model import Decision, Facts, PowerAction
from nodefence.engine.record import Phase, RecordedReading
from nodefence.fencing import registry
from nodefence.fencing.inventory import Inventory
from nodefence.fencing.model import PowerDriver, SendCheck
from nodefence.kube.client import Deadline
from nodefence.policy import Policy
from nodefence.shell.report import Reporter

# Time kept back from the request's deadline for the writes after the BMC answered.
POWER_MARGIN_SECONDS = 2.0
# An identity read is one small GET or exchange; it must leave most of the step's time to the
# power action and its read-back.
IDENTITY_TIMEOUT_SECONDS = 10.0
# A dry run only reads, and writes nothing after: a smaller margin.
DRY_RUN_MARGIN_SECONDS = 1.0


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
    ) -> tuple[ActionResult, bool]:
        """The result, and whether the answer is now in the fence record, where the request
        reads it back and decides on it (False: nothing was asked, or the answer could
        not be written, so nothing may be decided on it)."""
        kind = f"power-{action.operation}"
        timeout = bmc_timeout(self.policy, decision, deadline, POWER_MARGIN_SECONDS)
        driver, detail = registry.power_driver(self.inventory, action.node, action.driver)
        if driver is None:
            self.reporter.power_unanswered(action)
            evidence = PowerEvidence("unknown", f"{action.driver} BMC", detail)
            failed = ActionResult(kind, action.node, Outcome.FAILED, detail)
            return await self._keep(action, token, deadline, failed, evidence, facts=facts)
        try:
            # S10: nothing is sent to a machine not shown to be this node's.
            reported, bound = await before_action(driver, facts, timeout)
            if not bound.bound:
                self.reporter.power_unanswered(action)
                failed, evidence = refused(action, facts, reported, bound)
                return await self._keep(action, token, deadline, failed, evidence, facts=facts)
            if action.send:
                marked = await self.records.power_sent(
                    action.node,
                    action.node_uid,
                    action.claimed_by or (token if action.operation != "on" else ""),
                    action.operation,
                    deadline,
                    expected=action.entry,
                )
                if marked.outcome is not Outcome.DONE:
                    return dataclasses.replace(marked, action=kind), False
            # The identity read spent part of the budget: the action gets what is left.
            timeout = min(timeout, max(0.5, deadline.remaining - POWER_MARGIN_SECONDS))
            still_held = self._token(action, token, deadline)
            if action.operation == "on":
                reading = await driver.power_on(timeout, before_send=still_held)
            elif action.operation == "off" and action.send:
                reading = await driver.power_off(timeout, before_send=still_held)
            else:
                reading = await driver.status(timeout)
            left = max(0.5, deadline.remaining - POWER_MARGIN_SECONDS)
            identity = await with_proof_read(driver, reading, facts, left)
        finally:
            await driver.close()
        self.reporter.power_reading(action, reading)
        evidence = evidence_of(action, reading, identity)
        # The reply says what went out: a reset that was sent stays said even when the
        # answer after it is unknown or cannot be recorded.
        sent = f"power-{action.operation} sent, then " if reading.reset_sent else ""
        said = f"{sent}{reading.source} reports {reading.raw_state or reading.state}"
        done = Outcome.DONE if reading.state != "unknown" else Outcome.FAILED
        detail = f"{said}: {reading.detail}" if reading.detail else said
        if reading.withheld:
            detail = f"no power-{action.operation} sent to {reading.source}: {reading.withheld}"
        # Marked as sent, but the driver sent nothing: unmarked, so the claim goes.
        unsent = action.send and action.operation == "off" and not reading.reset_sent
        result = ActionResult(kind, action.node, done, detail)
        return await self._keep(
            action,
            token,
            deadline,
            result,
            evidence,
            facts=facts,
            unsent=unsent and reading.state == "unknown",
        )

    def _token(self, action: PowerAction, token: str, deadline: Deadline) -> SendCheck:
        """The check the driver awaits right before each send: the claim the decision read
        (its token and time), or the one this request wrote, must still be the entry's."""
        read = action.entry
        claimed_by = read.claimed_by if read is not None else action.claimed_by or token
        claimed_at = read.claimed_at if read is not None else None

        async def still_held() -> str:
            return await self.records.claim_lost(
                action.node, action.node_uid, claimed_by, claimed_at, deadline
            )

        return still_held

    @staticmethod
    def _proving(action: PowerAction) -> bool:
        """Whether this step proves the fence: a fenced node's machine read again (a reboot
        that did not come back) proves nothing new, and the fence's proof stays as it was."""
        claimed = action.entry is None or action.entry.phase is Phase.CLAIMED
        return action.operation != "on" and claimed

    @staticmethod
    def _claim(action: PowerAction, token: str) -> str:
        """The claim the reading is written for: the one the decision read, or the one this
        request wrote; a fenced node's entry holds no claim any more (empty: not checked)."""
        fenced = action.entry is not None and action.entry.phase is not Phase.CLAIMED
        return "" if fenced else action.claimed_by or token

    async def _keep(
        self,
        action: PowerAction,
        token: str,
        deadline: Deadline,
        result: ActionResult,
        evidence: PowerEvidence,
        *,
        facts: Facts,
        unsent: bool = False,
    ) -> tuple[ActionResult, bool]:
        """Write the answer into the fence record (and the proof, when it is one, into the
        entry), so the request decides on the record: the reading, not a variable, is what the
        next turn reads."""
        proving = self._proving(action)

        def make(now: datetime) -> tuple[RecordedReading, str]:
            timed = power_reading.timed(evidence, now)
            proof = power_reading.proof_to_record(facts, timed) if proving else ""
            answer = power_reading.stored(
                timed,
                node=action.node,
                uid=action.node_uid,
                by=token,
                operation=action.operation,
                at=now,
            )
            return answer, proof

        written = await self.records.reading(
            action.node,
            action.node_uid,
            self._claim(action, token),
            make,
            deadline,
            unsent=unsent,
        )
        if written.outcome is not Outcome.DONE:
            # A skipped write (the claim is no longer this decision's) must not hide a reset
            # that already went out: the detail keeps what was sent and read.
            detail = f"{result.detail}; not recorded: {written.detail}" if result.detail else ""
            return dataclasses.replace(
                written, action=result.action, detail=detail or written.detail
            ), False
        proof = power_reading.proof_to_record(facts, evidence) if proving else ""
        if proof and result.outcome is Outcome.DONE:
            result = dataclasses.replace(result, detail=f"{result.detail}; proof recorded: {proof}")
        return result, True


def bmc_timeout(policy: Policy, decision: Decision, deadline: Deadline, margin: float) -> float:
    """The BMC's time: the rule's ``timeout_seconds``, within what the request has left."""
    rule = policy.rule_named(decision.rule)
    budget = max(0.5, deadline.remaining - margin)
    return min(rule.fencing.timeout_seconds, budget) if rule and rule.fencing else budget


def _judge(facts: Facts, reported: Reported | None) -> Judgement:
    node = facts.node
    return judge(
        facts.machine,
        reported,
        node=node.name if node is not None else "",
        system_uuid=node.system_uuid if node is not None else "",
        provider_id=node.provider_id if node is not None else "",
        uuid_shared_with=facts.uuid_shared_with,
    )


async def before_action(
    driver: PowerDriver,
    facts: Facts,
    timeout: float,  # noqa: ASYNC109
) -> tuple[Reported | None, Judgement]:
    """Ask the target which machine it controls and judge it, before anything is sent. An
    ``unchecked`` entry or one two nodes share is judged without asking (there is nothing to
    read, or nothing a read could settle)."""
    machine = facts.machine
    if machine is None or machine.unchecked or machine.shared_with:
        return None, _judge(facts, None)
    reported = await driver.identity(min(timeout, IDENTITY_TIMEOUT_SECONDS))
    return reported, _judge(facts, reported)


def refused(
    action: PowerAction, facts: Facts, reported: Reported | None, verdict: Judgement
) -> tuple[ActionResult, PowerEvidence]:
    """No power action: the target is not shown to be this node's machine."""
    kind = f"power-{action.operation}"
    target = facts.machine.target if facts.machine is not None else f"{action.driver} BMC"
    detail = f"no power {action.operation} sent: {verdict.message}"
    evidence = PowerEvidence("unknown", target, detail, identity=reported)
    return ActionResult(kind, action.node, Outcome.FAILED, detail), evidence


async def with_proof_read(
    driver: PowerDriver,
    reading: PowerEvidence,
    facts: Facts,
    timeout: float,  # noqa: ASYNC109
) -> Reported | None:
    """The identity that goes with a reading of Off: read in the same answer when the driver
    can (a Redfish system carries its UUID beside its PowerState), otherwise asked right after.
    Nothing is read for an ``unchecked`` entry or for a reading that is no proof anyway."""
    machine = facts.machine
    if reading.state != "off" or machine is None or machine.unchecked:
        return None
    if reading.identity is not None:
        return reading.identity
    return await driver.identity(min(timeout, IDENTITY_TIMEOUT_SECONDS))


def evidence_of(
    action: PowerAction, reading: PowerEvidence, identity: Reported | None
) -> PowerEvidence:
    """A power-off counts as sent when this step sent it, or when an earlier step of the
    incident did (the record said so, and this one only read); a machine found already off
    was sent nothing, and its proof must not say nodefence powered it off."""
    earlier = action.operation == "off" and not action.send
    return dataclasses.replace(
        reading, action_sent=reading.reset_sent or earlier, identity=identity
    )
