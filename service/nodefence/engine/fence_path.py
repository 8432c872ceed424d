"""The fence path: the decision for a firing alert on a node nodefence has not fenced (or has
only claimed), as named passes over one screen, in the order they run: liveness (S1, S2, S11),
cluster limits (S3), proof (S10), escalation (a person in the proof's place), refusal or
roll-back, and the plan of writes.

Each pass reads the ``Screen`` and adds its reasons to the draft; a guard is one function of
``engine.guards`` and one entry in the pass that calls it (``LIVENESS``, ``CLUSTER_LIMITS``), its
row in ``engine.guard_kinds`` saying the rest. ``pending`` is a claimed entry whose taint is not
on yet: completing it is as safe as a new fence (the same guards, the same proof, the node
write's precondition), so any replica may; rolling it back is left to the request that made it
(``own_claim``) or to anyone once it is older than the claim timeout. While a power-off it sent
is not yet read back as Off, the claim is kept, so the action is never sent again for this
incident.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from nodefence.engine import (
    approval_request,
    escalation,
    guards,
    machine,
    mirror,
    power_waits,
    recovery,
)
from nodefence.engine import volumes as volume_plan
from nodefence.engine.draft import Draft, claim_fresh
from nodefence.engine.drivers import Proof
from nodefence.engine.guard_kinds import APPROVAL, FLAP, MACHINE_IDENTITY, POWER_OFF, VERDICT
from nodefence.engine.guard_kinds import overruled as overruled_by_approval
from nodefence.engine.model import (
    Action,
    AlertEvent,
    Approval,
    ApprovalDecision,
    ClaimAction,
    ConfirmAction,
    Decision,
    Facts,
    FenceAction,
    NodeFacts,
    PowerAction,
    Reason,
    ReleaseAction,
    Verdict,
)
from nodefence.engine.purge import select_purge
from nodefence.engine.record import FenceEntry, Phase
from nodefence.engine.wording import duration, instant
from nodefence.policy import Policy, Rule


@dataclass(frozen=True)
class Screen:
    """What every pass reads: the alert, the facts, the node, its rule, a person's answer being
    acted on, and the claim this fence would complete; the draft collects what they say."""

    draft: Draft
    event: AlertEvent
    facts: Facts
    node: NodeFacts
    rule: Rule
    approval: Approval | None
    pending: FenceEntry | None
    own_claim: str

    @property
    def policy(self) -> Policy:
        return self.draft.policy


Check = Callable[[Screen], Reason | None]


def _not_ready_long_enough(s: Screen) -> Reason | None:
    """Only for a node that is not Ready: a Ready one is refused by S1 already."""
    if not guards.ready_is_not_true(s.node).passed:
        return None
    return guards.not_ready_long_enough(s.node, s.facts.lease, s.rule, s.draft.now, s.facts)


def _alert_waited(s: Screen) -> Reason | None:
    """Only for a node that is not Ready, judged without an alert."""
    if not guards.ready_is_not_true(s.node).passed:
        return None
    return guards.alert_waited(
        s.event, s.node, s.facts, rule=s.rule, cluster=s.policy.cluster, now=s.draft.now
    )


# S11, S4, S1, S2: the node is dead on the API server's clock, and its taint would be ours;
# and this replica does not run on it.
LIVENESS: tuple[Check, ...] = (
    lambda s: guards.trusted_clock(s.facts.clock),
    lambda s: guards.not_own_node(s.node, s.facts.own_node),
    lambda s: guards.no_foreign_taint(s.node, ours=False),
    lambda s: guards.ready_is_not_true(s.node),
    _not_ready_long_enough,
    _alert_waited,
    lambda s: guards.lease_is_stale(s.node, s.facts.lease, s.rule, s.draft.now),
)
# S3: the cluster can spare the node.
CLUSTER_LIMITS: tuple[Check, ...] = (
    lambda s: guards.no_storm(s.facts.cluster, s.policy.cluster),
    lambda s: guards.storm_cooled_down(s.facts.cluster, s.policy.cluster, s.draft.now),
    lambda s: guards.within_fence_budget(
        s.node, s.facts.record, s.policy.cluster, s.facts.cluster.out_of_service
    ),
    lambda s: guards.ready_fraction_kept(s.node, s.facts.cluster, s.policy.cluster),
    lambda s: guards.control_plane_quorum(
        s.node, s.facts.cluster, s.facts.record, s.policy.cluster
    ),
)


def fence(s: Screen) -> Decision:
    """Every guard, then the proof, then the fence."""
    liveness(s)
    cluster_limits(s)
    proven = proof(s)
    failed, refused = escalate(s)
    if refused is not None:
        return with_reading_wanted(s, refusal_or_rollback(s, refused, failed))
    return plan(s, proven, failed)


def with_reading_wanted(s: Screen, refused: Decision) -> Decision:
    """A refusal a reading of Off could lift, with no power action or roll-back in it, says so
    (``Decision.needs_power_reading``: the shell reads the machine when only such waits hold it
    back; a refusal on cached facts is made again live)."""
    blocking = [r for r in refused.reasons if not r.passed]
    if refused.actions or not power_waits.may_end(s.rule, s.facts, blocking):
        return refused
    return dataclasses.replace(refused, power_may_end_wait=True)


def liveness(s: Screen) -> None:
    s.draft.extend(*(check(s) for check in LIVENESS))


def cluster_limits(s: Screen) -> None:
    s.draft.extend(*(check(s) for check in CLUSTER_LIMITS))


@dataclass(frozen=True)
class Proven:
    """What the proof pass found: ``ask_bmc``, the proof is the power step's, still to come;
    ``by_approval``, a rule without fencing whose person's approval stands in for it;
    ``power``, the proof's reason (None while the BMC is still to be asked)."""

    ask_bmc: bool
    by_approval: bool
    power: Reason | None


def proof(s: Screen) -> Proven:
    """S10: positive proof that the machine is off, from this node's machine."""
    fencing = s.rule.fencing
    ask_bmc = fencing is not None and fencing.powers and s.facts.power is None
    # Without any fencing, a person's approval is the proof S10 accepts instead.
    by_approval = fencing is None and s.rule.approval == "slack"
    power = None if ask_bmc else guards.powered_off(s.node, s.facts.lease, s.facts.power, s.rule)
    if power is not None and not (by_approval and not power.passed):
        s.draft.extend(power)
    if fencing is not None and fencing.powers:
        # The proof must come from this node's machine; judged before the BMC is asked (a
        # target two nodes share) and on what it reported with the proof.
        s.draft.extend(
            machine.binding_reason(s.node, s.facts)
            if s.facts.power is None
            else machine.bound_to_node(s.node, s.facts, s.facts.power)
        )
    return Proven(ask_bmc, by_approval, power)


def escalate(s: Screen) -> tuple[escalation.Failure | None, Decision | None]:
    """The failed power step a person may stand in for, and the refusal (or wait for a person)
    when anything still holds the fence back; (failure, None) lets it go ahead."""
    draft, node, rule = s.draft, s.node, s.rule
    flap = guards.not_flapping(s.facts.record.release(node.name, node.uid), rule, draft.now)
    draft.extend(flap)
    if escalation.enabled(rule) and rule.approval != "slack":
        # A person's "no" to an escalation holds for the incident, before any power step.
        requested = s.facts.record.approval(node.name)
        said_no = escalation.rejection(node, draft.fingerprint, s.approval, requested)
        if said_no is not None:
            draft.add(APPROVAL, False, said_no)
    failed = escalation.failure(rule, node, s.facts)
    blocking_now = {r.guard for r in draft.reasons if not r.passed and r.guard != FLAP}
    if failed is not None and all(overruled_by_approval(guard) for guard in blocking_now):
        # S10 escalated: this request's power step failed; only a person's approval stands in.
        return failed, _escalated(s, failed, flap)
    if any(not r.passed for r in draft.reasons if r.guard != FLAP):
        return None, draft.finish(Verdict.NOOP)
    if rule.approval == "slack":
        return None, approval_given(s, flap)
    if not flap.passed:
        return None, draft.finish(Verdict.NOOP)
    return None, None


def _escalated(s: Screen, failed: escalation.Failure, flap: Reason) -> Decision | None:
    draft = s.draft
    draft.extend(escalation.escalated(failed))
    asked = escalation.asked(s.rule, s.node, failed)
    refused = approval_given(s, flap, asked=asked)
    if refused is None and s.approval is not None:
        requested = s.facts.record.approval(s.node.name)
        other = escalation.unanswered(requested, s.node, draft.fingerprint, failed, s.approval)
        if other is not None:
            draft.add(APPROVAL, False, other)
            refused = draft.finish(Verdict.AWAIT_APPROVAL)
        else:
            draft.reasons[:] = escalation.overruled(draft.reasons, failed, s.approval)
    if refused is not None and refused.verdict is Verdict.AWAIT_APPROVAL:
        refused = dataclasses.replace(refused, asks_about=failed.subject)
    return refused


def refusal_or_rollback(
    s: Screen, refused: Decision, failed: escalation.Failure | None
) -> Decision:
    """A refused fence that had a claim: kept while its power-off awaits a read-back or a
    person, or while another request is completing it; otherwise rolled back."""
    pending = s.pending
    if pending is None:
        return refused
    node = s.node
    blocking = {r.guard for r in refused.reasons if not r.passed}
    # A machine not read back as Off yet says nothing of whose it is either: while only the
    # proof is missing, the claim is kept so the power-off is never sent twice.
    powering = pending.power_off_sent_at is not None and POWER_OFF in blocking
    # An escalation waiting for its answer is still only the proof missing.
    waiting = {APPROVAL} if refused.verdict is Verdict.AWAIT_APPROVAL else set()
    powering = powering and blocking <= {POWER_OFF, MACHINE_IDENTITY, *waiting}
    # An escalation whose power-off went out keeps its claim while a person is asked, however
    # long they take: the answer must never send the power-off again.
    answering = escalation.awaits_person(pending, node, s.facts, s.draft.now)
    fresh = claim_fresh(s.draft, pending) or (powering and failed is not None) or answering
    if fresh and (powering or pending.claimed_by != s.own_claim):
        return refused
    why = f"the claimed fence was rolled back: {refused.summary}"
    rollback = ReleaseAction(node.name, node.uid, why, pending.claimed_by, remember=False)
    return dataclasses.replace(refused, actions=(rollback,))


def plan(s: Screen, proven: Proven, failed: escalation.Failure | None) -> Decision:
    """Every guard passed: the claim and the power step first where the BMC is still to be
    asked; otherwise the claim, the taint, the confirmation, the purge and the volumes."""
    draft, node, rule = s.draft, s.node, s.rule
    approved = s.approval if rule.approval == "slack" or failed is not None else None
    said = _proof_text(s.facts, rule, approved)
    if failed is not None and s.approval is not None:
        said = escalation.proof_text(failed, s.approval)
    if proven.by_approval and proven.power is not None and not proven.power.passed:
        draft.add(POWER_OFF, True, said)
    claim = s.pending or _claim(s, approved)
    if proven.ask_bmc:
        step = _power_step(draft, node, rule, s.pending)
        claiming: tuple[Action, ...] = ()
        if s.pending is None:
            claiming = (ClaimAction(claim, s.facts.record.resource_version),)
        draft.add(VERDICT, True, f"fencing node {node.name}: proof first")
        return draft.finish(Verdict.FENCE, (*claiming, step), confirmed_down=True)
    approved_by = mirror.approval_text(approved) if approved is not None else ""
    claim = dataclasses.replace(claim, proof=said, approval=approved_by or claim.approval)
    purges, purge_reason = select_purge(node, s.facts.pods, rule.purge)
    draft.extend(purge_reason)
    unproven = (guards.NO_PROOF, escalation.NO_PROOF)
    draft.add(
        VERDICT,
        True,
        f"all guards passed: fencing node {node.name} with the out-of-service taint "
        # A proof text that says "no proof" is not introduced as a proof.
        f"({claim.effect}); " + (said if said.startswith(unproven) else f"proof: {said}"),
    )
    steps = _fence_steps(s, claim, said, approved_by)
    fenced = draft.finish(Verdict.FENCE, (*steps, *purges), confirmed_down=True)
    return volume_plan.decided(fenced, s.facts, cleanup_allowed=rule.volume_attachment_cleanup)


def _claim(s: Screen, approved: Approval | None) -> FenceEntry:
    """The fence record entry a new fence claims its budget slot with."""
    node = s.node
    return FenceEntry(
        node=node.name,
        uid=node.uid,
        phase=Phase.CLAIMED,
        claimed_at=s.draft.now,
        rule=s.rule.name,
        alertname=s.event.alertname,
        fingerprint=s.event.fingerprint,
        boot_id=node.boot_id,
        effect=s.rule.taint_effect,
        control_plane=node.is_control_plane,
        approval=mirror.approval_text(approved) if approved is not None else "",
        # What the incident's recovery is measured from and waits for (``engine.recovery``).
        silent_since=recovery.last_sign_of_life(node, s.facts.lease),
        held=recovery.held_pods(node.name, s.facts.pods),
    )


def _fence_steps(s: Screen, claim: FenceEntry, said: str, approved_by: str) -> tuple[Action, ...]:
    """Claim (unless this completes a pending claim), taint, confirm: in this order."""
    node = s.node
    fence_action = FenceAction(
        node.name,
        node.uid,
        node.resource_version,
        claim.effect,
        mirror.fence_annotations(claim),
        time_added=s.draft.now,
    )
    if s.pending is None:
        return (
            ClaimAction(claim, s.facts.record.resource_version),
            fence_action,
            ConfirmAction(node.name, node.uid, proof=said, approval=approved_by),
        )
    confirm = ConfirmAction(
        node.name, node.uid, s.pending.claimed_by, proof=said, approval=approved_by
    )
    return (fence_action, confirm)


def _proof_text(facts: Facts, rule: Rule, approved: Approval | None) -> str:
    """What the fence record keeps as the reason the machine was taken to be off."""
    fencing = rule.fencing
    if fencing is None:
        who = mirror.approval_text(approved) if approved is not None else "nobody"
        return f"no proof: {who}, in place of a power-off proof (the rule has no fencing)"
    if fencing.proof is Proof.NONE:
        return f"{guards.NO_PROOF}: inference alone (fencing.driver none)"
    power = facts.power
    if power is None:
        return ""
    if fencing.proof is Proof.WRITTEN:
        written = f", written at {instant(power.at)}" if power.at is not None else ""
        return f"{power.source} said {power.detail}{written}"
    if fencing.powers and facts.node is not None:
        return machine.proof_text(power, machine.bound_to_node(facts.node, facts, power))
    when = f" at {instant(power.at)}" if power.at is not None else ""
    sent = "after nodefence powered it off, " if power.action_sent else ""
    return f"{power.source} reported Off ({sent}read back{when})"


def _power_step(
    draft: Draft, node: NodeFacts, rule: Rule, pending: FenceEntry | None
) -> PowerAction:
    fencing = rule.fencing
    assert fencing is not None
    operation = "status" if fencing.action == "verify" else "off"
    sent_before = pending is not None and pending.power_off_sent_at is not None
    send = operation == "off" and not sent_before
    verb = {
        "status": "read the machine's power state from its BMC",
        "off": "power the machine off through its BMC and read it back until it reports Off",
    }[operation]
    if sent_before and pending is not None and pending.power_off_sent_at is not None:
        verb = (
            f"read the machine's power state (power-off already sent at "
            f"{instant(pending.power_off_sent_at)}; never sent twice)"
        )
    draft.add(
        POWER_OFF,
        True,
        f"proof comes from the BMC ({fencing.driver}): every other guard passed, so nodefence "
        f"holds a budget slot and will {verb} before any taint, once the BMC has shown it "
        "controls this node's machine",
    )
    claim = pending.claimed_by if pending is not None else ""
    return PowerAction(node.name, node.uid, fencing.driver, operation, send, claim, entry=pending)


def approval_given(s: Screen, flap: Reason, *, asked: str = "") -> Decision | None:
    """None when a valid approval lets the fence proceed; otherwise the waiting or refused
    decision. A person's approval also overrides the flap guard: that is what it is asked for.
    A rejection counts only as the fence record holds it (S12: the node's annotations could
    say anything)."""
    draft, node, approval = s.draft, s.node, s.approval
    asked = (asked or f"rule {s.rule.name!r} requires approval in Slack") + (
        "" if flap.passed else " (the node may be flapping)"
    )
    requested = s.facts.record.approval(node.name)
    rejected = approval_request.rejection_of(requested, node, draft.fingerprint)
    if rejected is not None:
        # Whatever button is pressed next (a second approver, an old message): a rejection
        # holds for its incident; a new outage is asked again.
        later = f"; the answer from {approval.user} does not undo it" if approval else ""
        draft.add(APPROVAL, False, f"fencing was {rejected} for this incident{later}")
        return draft.finish(Verdict.NOOP)
    if approval is None:
        when = _asked_when(requested, node, draft)
        draft.add(APPROVAL, False, f"{asked}; none given yet{when}")
        return draft.finish(Verdict.AWAIT_APPROVAL)
    waits = _answer_does_not_stand(s, approval, asked)
    if waits is not None:
        draft.add(APPROVAL, False, waits)
        return draft.finish(Verdict.AWAIT_APPROVAL)
    if approval.decision == ApprovalDecision.REJECT:
        draft.add(
            APPROVAL, False, f"fencing was rejected by {approval.user} at {instant(approval.at)}"
        )
        return draft.finish(Verdict.NOOP)
    draft.add(APPROVAL, True, f"approved by {approval.user} at {instant(approval.at)}")
    return None


def _answer_does_not_stand(s: Screen, approval: Approval, asked: str) -> str | None:
    """Why an answer is not one for this node now (another node object, too old, or dated in
    the future), or None."""
    node = s.node
    if approval.node_uid != node.uid:
        return (
            f"{asked}; the answer from {approval.user} was for node UID {approval.node_uid}, "
            f"not this node (UID {node.uid})"
        )
    age = s.draft.now - approval.at
    if age > timedelta(seconds=s.rule.approval_timeout_seconds) or age < timedelta(0):
        return (
            f"{asked}; the answer from {approval.user} at {instant(approval.at)} is not within "
            f"the last {duration(s.rule.approval_timeout_seconds)}"
        )
    return None


def _asked_when(
    requested: approval_request.ApprovalRequest | None, node: NodeFacts, draft: Draft
) -> str:
    """When the fence record says this outage's question went out, for the waiting reason."""
    incident = approval_request.Incident.of(node, draft.fingerprint)
    if requested is None or not requested.posted or not requested.incident.same_outage(incident):
        return ""
    if requested.requested_at is None:
        return ""
    return f" (asked in Slack at {instant(requested.requested_at)})"
