"""The decision: a pure function of the alert, the live facts, the policy and the time.

Nothing here reads a clock, the network or randomness; the caller passes ``now``, which is the
API server's clock (the ``Date`` of the replies that carried the facts; ``facts.clock`` says so).
That is what lets the safety invariants be checked by generating facts, and what makes a
decision record reproducible from its inputs.

Ownership and budget come from the fence record (``facts.record``), never from anything a node
can write. A fence is three writes, in this order: claim (the record entry, which spends the
budget slot), taint, confirm. An entry whose taint never came is rolled back once its claim is
older than ``claim_timeout_seconds``; a taint without an entry is someone else's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from nodefence.engine import (
    approval_request,
    audit,
    escalation,
    guards,
    machine,
    mirror,
    orphans,
    readiness,
    reboot,
    recovery,
    volumes,
)
from nodefence.engine.alerts import match_rule, node_from_labels, selector_matches
from nodefence.engine.approval_ask import with_question
from nodefence.engine.authorship import taint_authorship
from nodefence.engine.drivers import Proof
from nodefence.engine.exclusion import exclusion
from nodefence.engine.guard_kinds import (
    ALERT,
    ALERT_RESOLVED,
    APPROVAL,
    DRY_RUN,
    EXCLUSION,
    FENCE_IN_PROGRESS,
    FENCE_RECORD,
    FLAP,
    MACHINE_IDENTITY,
    NO_ALERT,
    NODE_FOUND,
    NODE_IDENTITY,
    NODE_LABEL,
    OWNERSHIP,
    PAUSED,
    POWER_OFF,
    PURGE,
    REBOOT,
    RULE,
    SILENCE,
    VERDICT,
    overruled,
)
from nodefence.engine.model import (
    API_SERVER_CLOCK,
    Action,
    AlertEvent,
    AlertStatus,
    Approval,
    ApprovalDecision,
    ClaimAction,
    ConfirmAction,
    Decision,
    Facts,
    FenceAction,
    NodeFacts,
    ObserveReadyAction,
    PowerAction,
    ProofContradictedAction,
    Reason,
    ReleaseAction,
    UnfenceAction,
    Verdict,
)
from nodefence.engine.purge import select_purge
from nodefence.engine.record import FenceEntry, Phase
from nodefence.engine.wording import duration, instant
from nodefence.policy import Policy, Rule

RECONCILE_STATUS = "reconcile"


@dataclass
class _Draft:
    """The decision being assembled: reasons accumulate in the order the guards ran."""

    policy: Policy
    now: datetime
    alertname: str
    fingerprint: str
    status: str
    clock: str = API_SERVER_CLOCK
    node: str | None = None
    rule: str | None = None
    reasons: list[Reason] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.policy.dry_run:
            self.add(
                DRY_RUN,
                True,
                "dry run: nothing will be written to the cluster; actions are what would be done",
            )

    def add(self, guard: str, passed: bool, message: str) -> None:
        self.reasons.append(Reason(guard, passed, message))

    def extend(self, *reasons: Reason | None) -> None:
        self.reasons.extend(r for r in reasons if r is not None)

    def finish(
        self, verdict: Verdict, actions: tuple[Action, ...] = (), *, confirmed_down: bool = False
    ) -> Decision:
        return Decision(
            verdict=verdict,
            node=self.node,
            reasons=tuple(self.reasons),
            actions=actions,
            dry_run=self.policy.dry_run,
            alertname=self.alertname,
            fingerprint=self.fingerprint,
            status=self.status,
            rule=self.rule,
            now=self.now,
            node_confirmed_down=confirmed_down,
        )


def _exact(node: NodeFacts, entry: FenceEntry) -> bool:
    """S4: nodefence owns only the very taint it wrote, as the API server recorded the write
    (``engine.authorship``); the same key, value and effect written by someone else is theirs."""
    return taint_authorship(node, entry).ours


def _foreign(draft: _Draft, node: NodeFacts, entry: FenceEntry) -> Decision:
    """A taint appeared while the entry was only claimed and nodefence did not write it: the
    claim is let go and the taint is left to whoever applied it (never confirmed, purged under
    or removed)."""
    why = taint_authorship(node, entry).why
    sent = (
        f"; a power-off was sent at {instant(entry.power_off_sent_at)} and the machine was "
        "never read back as Off"
        if entry.power_off_sent_at is not None
        else ""
    )
    return _let_go(
        draft, entry, f"someone else's out-of-service taint is on the node ({why}){sent}"
    )


def _paused(draft: _Draft, facts: Facts) -> Decision | None:
    if draft.policy.paused:
        draft.add(PAUSED, False, "nodefence is paused by the policy; nothing is done")
        return draft.finish(Verdict.SKIP)
    if facts.cluster.paused_reason:
        draft.add(PAUSED, False, f"nodefence is paused: {facts.cluster.paused_reason}")
        return draft.finish(Verdict.SKIP)
    return None


def _common_preamble(
    draft: _Draft, facts: Facts, node_name: str
) -> tuple[NodeFacts, FenceEntry | None] | Decision:
    """Checks shared by every entry point: pause, node existence, exclusion, node identity."""
    paused = _paused(draft, facts)
    if paused is not None:
        stopped = _stop_claim(draft, facts.node, facts.record.entry(node_name), "paused")
        return stopped or paused
    node = facts.node
    entry = facts.record.entry(node_name)
    if node is None:
        draft.add(NODE_FOUND, False, f"node {node_name} does not exist in the cluster")
        if entry is not None:
            return _let_go(draft, entry, "the node no longer exists")
        return draft.finish(Verdict.SKIP)
    if node.name != node_name:
        draft.add(NODE_FOUND, False, f"facts describe node {node.name}, not {node_name}")
        return draft.finish(Verdict.SKIP)
    draft.node = node.name
    if entry is not None and entry.uid != node.uid:
        draft.add(
            NODE_IDENTITY,
            True,
            f"the fence record's entry was written for node UID {entry.uid}, but this node is "
            f"UID {node.uid} (re-created under the same name); the old entry is let go",
        )
        return _let_go(draft, entry, "the node was re-created under the same name")
    excluded = exclusion(node)
    if excluded is not None:
        draft.add(EXCLUSION, False, excluded)
        stopped = _stop_claim(draft, node, entry, f"node {node.name} was excluded")
        return stopped or draft.finish(Verdict.SKIP)
    return node, entry


def _stop_claim(
    draft: _Draft, node: NodeFacts | None, entry: FenceEntry | None, why: str
) -> Decision | None:
    """Exclusion or pause in the middle of a fence: what nodefence started is rolled back (the
    claim released, its budget slot freed) and the release says what was done to the machine.
    A claim whose taint nodefence already wrote is a fence, not a start: it stays."""
    if entry is None or entry.phase is not Phase.CLAIMED:
        return None
    if node is None or node.uid != entry.uid or _exact(node, entry):
        return None
    if entry.power_off_sent_at is None:
        machine_state = "no power action had been sent; the machine was not touched"
    elif entry.proof:
        machine_state = (
            f"a power-off was sent at {instant(entry.power_off_sent_at)} and the machine was "
            f"read back Off ({entry.proof}); it stays off until someone powers it on"
        )
    else:
        machine_state = (
            f"a power-off was sent at {instant(entry.power_off_sent_at)} and the machine was "
            "never read back as Off: it may be running or off; check it"
        )
    return _let_go(draft, entry, f"the fence in progress was stopped ({why}); {machine_state}")


def _let_go(draft: _Draft, entry: FenceEntry, why: str) -> Decision:
    """Free the entry's budget slot without touching the node: housekeeping after which the
    caller reads and decides again. A claim whose taint never came is not remembered as a
    release (nothing was released that the flap guard should count)."""
    draft.add(OWNERSHIP, True, f"nodefence lets go of its fence of {entry.node}: {why}")
    claimed = entry.phase is Phase.CLAIMED
    claim = entry.claimed_by if claimed else ""
    return draft.finish(
        Verdict.NOOP, (ReleaseAction(entry.node, entry.uid, why, claim, remember=not claimed),)
    )


def _governing_rule(
    policy: Policy, entry: FenceEntry, fallback: Rule | None, draft: _Draft
) -> Rule:
    """The rule that fenced the node also governs its release, so a later alert with other
    labels cannot loosen the conditions; defaults apply if that rule left the policy."""
    named = policy.rule_named(entry.rule)
    if named is not None:
        draft.add(RULE, True, f"rule {named.name!r} fenced this node and governs its release")
        chosen = named
    elif fallback is not None:
        draft.add(RULE, True, f"rule {fallback.name!r} matches")
        chosen = fallback
    else:
        draft.add(RULE, True, "no rule matches any more; the built-in defaults apply")
        chosen = Rule(name="built-in defaults")
    draft.rule = chosen.name
    return chosen


def decide(
    event: AlertEvent,
    facts: Facts,
    policy: Policy,
    now: datetime,
    *,
    approval: Approval | None = None,
    own_claim: str = "",
    asking_at: datetime | None = None,
) -> Decision:
    """``own_claim`` names the claim the calling request wrote itself, if any: that one it may
    roll back at once when the guards no longer pass. ``asking_at`` is the approval requester's
    clock (``engine.approval_ask``); with it, a decision that waits for a person nobody asked
    yet holds the question to ask. None: there is no approval channel, so nobody is asked."""
    draft = _Draft(policy, now, event.alertname, event.fingerprint, event.status.value, facts.clock)
    if event.fallback:
        # First, so the log line and the Event say at once that no alert brought this.
        draft.add(NO_ALERT, True, event.fallback)
        if event.silenced:
            # A person silenced the alert this event stands for: held as the alert would be.
            draft.node = event.node
            draft.add(SILENCE, False, event.silenced)
            return draft.finish(Verdict.SKIP)
    elif event.alertname not in policy.alerts.names:
        draft.add(
            ALERT,
            False,
            f"alert {event.alertname} is not handled (handled: {', '.join(policy.alerts.names)})",
        )
        return draft.finish(Verdict.SKIP)
    node_name = event.node or node_from_labels(event.labels, policy.alerts.node_labels)
    if not node_name:
        draft.add(
            NODE_LABEL,
            False,
            f"the alert has none of the node labels {', '.join(policy.alerts.node_labels)}",
        )
        return draft.finish(Verdict.SKIP)
    draft.node = node_name
    prepared = _common_preamble(draft, facts, node_name)
    if isinstance(prepared, Decision):
        return prepared
    node, entry = prepared
    if event.status == AlertStatus.RESOLVED:
        return machine.noted(_resolved(draft, event, facts, node, entry), facts, policy)
    decided = _firing(draft, event, facts, node, entry, approval=approval, own_claim=own_claim)
    return with_question(machine.noted(decided, facts, policy), facts, asking_at)


def decide_reconcile(facts: Facts, policy: Policy, now: datetime, node_name: str) -> Decision:
    """Finish what lost or failed deliveries left on a node the fence record holds."""
    draft = _Draft(policy, now, "", "", RECONCILE_STATUS, facts.clock)
    draft.node = node_name
    held = facts.record.entry(node_name)
    if held is not None:
        draft.alertname = held.alertname
        draft.fingerprint = held.fingerprint
    prepared = _common_preamble(draft, facts, node_name)
    if isinstance(prepared, Decision):
        return prepared
    node, entry = prepared
    if entry is None and orphans.is_orphan(node, facts):
        orphan = orphans.judge(node, facts)
        draft.add(FENCE_RECORD, orphan.adopted, orphan.message)
        if orphan.claim is None:
            _not_ours(draft, node)
            return draft.finish(Verdict.NOOP)
        return draft.finish(Verdict.NOOP, (orphan.claim,))
    if entry is None:
        _not_ours(draft, node)
        return draft.finish(Verdict.NOOP)
    fallback = next((r for r in policy.rules if selector_matches(r, node)), None)
    rule = _governing_rule(policy, entry, fallback, draft)
    asked = escalation.awaits_person(entry, node, facts, draft.now) and not (
        readiness.node_is_ready(node)
    )
    half = _half_written(draft, node, entry, "no firing alert asks for it any more", asked=asked)
    if half is not None:
        return half
    held_taint = _held_taint(draft, node, entry)
    if held_taint is not None:
        return held_taint
    _fenced_since(draft, entry)
    if readiness.node_is_ready(node):
        return machine.noted(_unfence(draft, facts, node, entry, rule), facts, policy)
    return machine.noted(_purge_leftovers(draft, facts, node, entry, rule), facts, policy)


def _not_ours(draft: _Draft, node: NodeFacts) -> None:
    taint = node.out_of_service_taint
    if taint is not None:
        draft.add(
            OWNERSHIP,
            False,
            f"the out-of-service taint ({taint.value}:{taint.effect}) on node {node.name} is not "
            "in nodefence's fence record; it is never removed by nodefence",
        )
    # With no taint at all there is nothing to refuse (a duplicate resolve after an unfence
    # lands here): a quiet no-op, not a refusal Event on the node.
    draft.add(OWNERSHIP, taint is None, "nodefence has not fenced this node; nothing to undo")


def _fenced_since(draft: _Draft, entry: FenceEntry) -> None:
    when = entry.fenced_at or entry.claimed_at
    draft.add(OWNERSHIP, True, f"nodefence fenced this node at {instant(when)}")


def _claim_fresh(draft: _Draft, entry: FenceEntry) -> bool:
    """A claim's age is known only on the API server's clock: on any other it is never judged
    stale, since rolling back a claim another replica is still completing frees its slot."""
    if draft.clock != API_SERVER_CLOCK:
        return True
    timeout = draft.policy.cluster.claim_timeout_seconds
    return draft.now - entry.claimed_at < timedelta(seconds=timeout)


def _half_written(
    draft: _Draft, node: NodeFacts, entry: FenceEntry, why_not_finish: str, *, asked: bool = False
) -> Decision | None:
    """A claimed entry whose taint is not (yet) on the node. While the claim is young another
    request is probably fencing right now; once it is older than the claim timeout (API server
    clock on both sides) the fence is rolled back, unless its power-off went out and a person
    is being ``asked`` about it (``engine.escalation``). None when the entry is not
    half-written."""
    if entry.phase is not Phase.CLAIMED or _exact(node, entry):
        return None
    if node.out_of_service_taint is not None:
        return _foreign(draft, node, entry)
    claimed = f"claimed by {entry.claimed_by or 'a replica'} at {instant(entry.claimed_at)}"
    if _claim_fresh(draft, entry) or asked:
        waits = "; its power-off was sent and a person is asked in Slack" if asked else ""
        draft.add(
            FENCE_IN_PROGRESS,
            False,
            f"a fence of node {node.name} is in progress ({claimed}{waits}); not started twice",
        )
        return draft.finish(Verdict.NOOP)
    return _let_go(draft, entry, f"half-written fence rolled back ({claimed}; {why_not_finish})")


def _held_taint(draft: _Draft, node: NodeFacts, entry: FenceEntry) -> Decision | None:
    """For an entry that should have its taint on the node: None when the taint is exactly
    nodefence's; otherwise nodefence lets go of the entry and leaves the node as it is."""
    taint = node.out_of_service_taint
    if taint is None:
        return _let_go(draft, entry, "its out-of-service taint was removed by someone else")
    if not _exact(node, entry):
        return _let_go(
            draft,
            entry,
            f"the out-of-service taint is now {taint.value or '(no value)'}:{taint.effect}, not "
            f"the one nodefence applied ({taint_authorship(node, entry).why}): someone took it "
            "over and it is left to them",
        )
    return None


def _firing(
    draft: _Draft,
    event: AlertEvent,
    facts: Facts,
    node: NodeFacts,
    entry: FenceEntry | None,
    *,
    approval: Approval | None,
    own_claim: str,
) -> Decision:
    policy = draft.policy
    rule = match_rule(policy, event, node)
    if rule is None:
        draft.add(RULE, False, f"no policy rule matches alert {event.alertname} on this node")
        return draft.finish(Verdict.SKIP)
    draft.rule = rule.name
    draft.add(RULE, True, f"rule {rule.name!r} matches")

    pending: FenceEntry | None = None
    if entry is not None:
        governing = policy.rule_named(entry.rule)
        if governing is not None and governing is not rule:
            draft.add(RULE, True, f"rule {governing.name!r} fenced this node and governs it")
            draft.rule = governing.name
        if entry.phase is Phase.CLAIMED and not _exact(node, entry):
            if node.out_of_service_taint is not None:
                return _foreign(draft, node, entry)
            draft.add(
                FENCE_IN_PROGRESS,
                True,
                f"a fence was claimed at {instant(entry.claimed_at)} by "
                f"{entry.claimed_by or 'a replica'} and its taint is not on yet; it is judged "
                "afresh and completed if every guard passes",
            )
            pending = entry
        else:
            held = _held_taint(draft, node, entry)
            if held is not None:
                return held
            _fenced_since(draft, entry)
            return _purge_leftovers(
                draft, facts, node, entry, governing or rule, own_claim=own_claim
            )
    return _fresh(
        draft, event, facts, node, rule, approval=approval, pending=pending, own_claim=own_claim
    )


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
    draft: _Draft, node: NodeFacts, rule: Rule, pending: FenceEntry | None
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


def _fresh(
    draft: _Draft,
    event: AlertEvent,
    facts: Facts,
    node: NodeFacts,
    rule: Rule,
    *,
    approval: Approval | None,
    pending: FenceEntry | None,
    own_claim: str,
) -> Decision:
    """Every guard, then the proof, then the fence. ``pending`` is a claimed entry whose taint
    is not on yet: completing it is as safe as a new fence (the same guards, the same proof, the
    node write's precondition), so any replica may; rolling it back is left to the request that
    made it (``own_claim``) or to anyone once it is older than the claim timeout. While a
    power-off it sent is not yet read back as Off, the claim is kept, so the action is never
    sent again for this incident."""
    policy = draft.policy
    draft.extend(guards.trusted_clock(facts.clock))
    draft.extend(guards.no_foreign_taint(node, ours=False))
    s1 = guards.ready_is_not_true(node)
    draft.extend(s1)
    if s1.passed:
        draft.extend(guards.not_ready_long_enough(node, facts.lease, rule, draft.now))
    draft.extend(
        guards.lease_is_stale(node, facts.lease, rule, draft.now),
        guards.no_storm(facts.cluster, policy.cluster),
        guards.storm_cooled_down(facts.cluster, policy.cluster, draft.now),
        guards.within_fence_budget(
            node, facts.record, policy.cluster, facts.cluster.out_of_service
        ),
        guards.ready_fraction_kept(node, facts.cluster, policy.cluster),
        guards.control_plane_quorum(node, facts.cluster, facts.record, policy.cluster),
    )
    fencing = rule.fencing
    ask_bmc = fencing is not None and fencing.powers and facts.power is None
    # Without any fencing, a person's approval is the proof S10 accepts instead.
    by_approval = fencing is None and rule.approval == "slack"
    power = None if ask_bmc else guards.powered_off(node, facts.lease, facts.power, rule)
    if power is not None and not (by_approval and not power.passed):
        draft.extend(power)
    if fencing is not None and fencing.powers:
        # S10: the proof must come from this node's machine; judged before the BMC is asked
        # (a target two nodes share) and on what it reported with the proof.
        draft.extend(
            machine.binding_reason(node, facts)
            if facts.power is None
            else machine.bound_to_node(node, facts, facts.power)
        )
    flap = guards.not_flapping(facts.record.release(node.name, node.uid), rule, draft.now)
    draft.extend(flap)
    if escalation.enabled(rule) and rule.approval != "slack":
        # A person's "no" to an escalation holds for the incident, before any power step.
        requested = facts.record.approval(node.name)
        said_no = escalation.rejection(node, draft.fingerprint, approval, requested)
        if said_no is not None:
            draft.add(APPROVAL, False, said_no)
    failed = escalation.failure(rule, node, facts)
    blocking_now = {r.guard for r in draft.reasons if not r.passed and r.guard != FLAP}
    if failed is not None and not all(overruled(guard) for guard in blocking_now):
        failed = None
    refused: Decision | None = None
    if failed is not None:
        # S10 escalated: this request's power step failed; only a person's approval stands in.
        draft.extend(escalation.escalated(failed))
        asked = escalation.asked(rule, node, failed)
        refused = _approval(draft, rule, node, approval, flap, facts=facts, asked=asked)
        if refused is None and approval is not None:
            requested = facts.record.approval(node.name)
            other = escalation.unanswered(requested, node, draft.fingerprint, failed, approval)
            if other is not None:
                draft.add(APPROVAL, False, other)
                refused = draft.finish(Verdict.AWAIT_APPROVAL)
            else:
                draft.reasons[:] = escalation.overruled(draft.reasons, failed, approval)
        if refused is not None and refused.verdict is Verdict.AWAIT_APPROVAL:
            refused = dataclasses.replace(refused, asks_about=failed.subject)
    elif any(not r.passed for r in draft.reasons if r.guard != FLAP):
        refused = draft.finish(Verdict.NOOP)
    elif rule.approval == "slack":
        refused = _approval(draft, rule, node, approval, flap, facts=facts)
    elif not flap.passed:
        refused = draft.finish(Verdict.NOOP)
    if refused is not None:
        if pending is None:
            return refused
        blocking = {r.guard for r in refused.reasons if not r.passed}
        # A machine not read back as Off yet says nothing of whose it is either: while only the
        # proof is missing, the claim is kept so the power-off is never sent twice.
        powering = pending.power_off_sent_at is not None and POWER_OFF in blocking
        # An escalation waiting for its answer is still only the proof missing.
        waiting = {APPROVAL} if refused.verdict is Verdict.AWAIT_APPROVAL else set()
        powering = powering and blocking <= {POWER_OFF, MACHINE_IDENTITY, *waiting}
        # An escalation whose power-off went out keeps its claim while a person is asked, however
        # long they take: the answer must never send the power-off again.
        answering = escalation.awaits_person(pending, node, facts, draft.now)
        fresh = _claim_fresh(draft, pending) or (powering and failed is not None) or answering
        if fresh and (powering or pending.claimed_by != own_claim):
            return refused
        why = f"the claimed fence was rolled back: {refused.summary}"
        rollback = ReleaseAction(node.name, node.uid, why, pending.claimed_by, remember=False)
        return dataclasses.replace(refused, actions=(rollback,))

    approved = approval if rule.approval == "slack" or failed is not None else None
    proof = _proof_text(facts, rule, approved)
    if failed is not None and approval is not None:
        proof = escalation.proof_text(failed, approval)
    if by_approval and power is not None and not power.passed:
        draft.add(POWER_OFF, True, proof)
    effect = rule.taint_effect
    claim = pending or FenceEntry(
        node=node.name,
        uid=node.uid,
        phase=Phase.CLAIMED,
        claimed_at=draft.now,
        rule=rule.name,
        alertname=event.alertname,
        fingerprint=event.fingerprint,
        boot_id=node.boot_id,
        effect=effect,
        control_plane=node.is_control_plane,
        approval=mirror.approval_text(approved) if approved is not None else "",
        # What the incident's recovery is measured from and waits for (``engine.recovery``).
        silent_since=recovery.last_sign_of_life(node, facts.lease),
        held=recovery.held_pods(node.name, facts.pods),
    )
    if ask_bmc:
        step = _power_step(draft, node, rule, pending)
        claiming: tuple[Action, ...] = ()
        if pending is None:
            claiming = (ClaimAction(claim, facts.record.resource_version),)
        draft.add(VERDICT, True, f"fencing node {node.name}: proof first")
        return draft.finish(Verdict.FENCE, (*claiming, step), confirmed_down=True)
    approved_by = mirror.approval_text(approved) if approved is not None else ""
    claim = dataclasses.replace(claim, proof=proof, approval=approved_by or claim.approval)
    fence = FenceAction(
        node.name,
        node.uid,
        node.resource_version,
        claim.effect,
        mirror.fence_annotations(claim),
        time_added=draft.now,
    )
    purges, purge_reason = select_purge(node, facts.pods, rule.purge)
    draft.extend(purge_reason)
    unproven = (guards.NO_PROOF, escalation.NO_PROOF)
    draft.add(
        VERDICT,
        True,
        f"all guards passed: fencing node {node.name} with the out-of-service taint "
        # A proof text that says "no proof" is not introduced as a proof.
        f"({claim.effect}); " + (proof if proof.startswith(unproven) else f"proof: {proof}"),
    )
    if pending is None:
        steps: tuple[Action, ...] = (
            ClaimAction(claim, facts.record.resource_version),
            fence,
            ConfirmAction(node.name, node.uid, proof=proof, approval=approved_by),
        )
    else:
        confirm = ConfirmAction(
            node.name, node.uid, pending.claimed_by, proof=proof, approval=approved_by
        )
        steps = (fence, confirm)
    fenced = draft.finish(Verdict.FENCE, (*steps, *purges), confirmed_down=True)
    return volumes.decided(fenced, facts, cleanup_allowed=rule.volume_attachment_cleanup)


def _approval(
    draft: _Draft,
    rule: Rule,
    node: NodeFacts,
    approval: Approval | None,
    flap: Reason,
    *,
    facts: Facts,
    asked: str = "",
) -> Decision | None:
    """None when a valid approval lets the fence proceed; otherwise the waiting or refused
    decision. A person's approval also overrides the flap guard: that is what it is asked for.
    A rejection counts only as the fence record holds it (S12: the node's annotations could
    say anything)."""
    asked = (asked or f"rule {rule.name!r} requires approval in Slack") + (
        "" if flap.passed else " (the node may be flapping)"
    )
    requested = facts.record.approval(node.name)
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
    if approval.node_uid != node.uid:
        draft.add(
            APPROVAL,
            False,
            f"{asked}; the answer from {approval.user} was for node UID {approval.node_uid}, "
            f"not this node (UID {node.uid})",
        )
        return draft.finish(Verdict.AWAIT_APPROVAL)
    age = draft.now - approval.at
    if age > timedelta(seconds=rule.approval_timeout_seconds) or age < timedelta(0):
        draft.add(
            APPROVAL,
            False,
            f"{asked}; the answer from {approval.user} at {instant(approval.at)} is not within "
            f"the last {duration(rule.approval_timeout_seconds)}",
        )
        return draft.finish(Verdict.AWAIT_APPROVAL)
    if approval.decision == ApprovalDecision.REJECT:
        draft.add(
            APPROVAL, False, f"fencing was rejected by {approval.user} at {instant(approval.at)}"
        )
        return draft.finish(Verdict.NOOP)
    draft.add(APPROVAL, True, f"approved by {approval.user} at {instant(approval.at)}")
    return None


def _asked_when(
    requested: approval_request.ApprovalRequest | None, node: NodeFacts, draft: _Draft
) -> str:
    """When the fence record says this incident's question went out, for the waiting reason."""
    incident = approval_request.Incident.of(node, draft.fingerprint)
    if requested is None or not requested.posted or requested.incident != incident:
        return ""
    if requested.requested_at is None:
        return ""
    return f" (asked in Slack at {instant(requested.requested_at)})"


def _purge_leftovers(
    draft: _Draft,
    facts: Facts,
    node: NodeFacts,
    entry: FenceEntry,
    rule: Rule,
    *,
    own_claim: str = "",
) -> Decision:
    """Purging pods (and releasing volumes) is only safe while the node is still verifiably
    down, so S1 and S2 are checked again even though the node is already fenced."""
    done = _leftovers(draft, facts, node, entry, rule)
    # What becomes of the volumes is said where something was done, where the rule lets
    # nodefence delete them, and to the request that fenced the node (``own_claim``), which
    # reports it; a repeated alert for a node already handled has nothing new to say.
    own = bool(own_claim) and entry.claimed_by == own_claim
    cleanup = rule.volume_attachment_cleanup
    if done.verdict is Verdict.PURGE or cleanup or own:
        return volumes.decided(done, facts, cleanup_allowed=cleanup)
    return done


def _leftovers(
    draft: _Draft, facts: Facts, node: NodeFacts, entry: FenceEntry, rule: Rule
) -> Decision:
    confirm: tuple[Action, ...] = ()
    if entry.phase is Phase.CLAIMED:
        draft.add(
            OWNERSHIP,
            True,
            "the taint is on but the record entry was never confirmed; it is confirmed now",
        )
        taint = node.out_of_service_taint
        added = taint.time_added if taint is not None else None
        confirm = (ConfirmAction(node.name, node.uid, entry.claimed_by, taint_added=added),)
    purges, reason = select_purge(node, facts.pods, rule.purge)
    clock = guards.trusted_clock(facts.clock)
    s1 = guards.ready_is_not_true(node)
    s2 = guards.lease_is_stale(node, facts.lease, rule, draft.now)
    draft.extend(clock, s1, s2, reason)
    if not (clock.passed and s1.passed and s2.passed):
        draft.add(PURGE, False, "the node shows signs of life; its pods are not purged")
        return draft.finish(Verdict.NOOP, confirm)
    stays = reboot.left_behind(purges, facts.pods)
    fencing = rule.fencing
    reboots = fencing is not None and fencing.action == "reboot" and fencing.powers
    if reboots and fencing is not None and entry.phase is Phase.FENCED and stays == purges:
        step = reboot.next_step(
            node,
            entry,
            fencing,
            power=facts.power,
            now=draft.now,
            stays=stays,
            pods=facts.pods,
        )
        draft.add(REBOOT, step.passed, step.message)
        if step.action is not None:
            verdict = Verdict.PURGE if step.action.send else Verdict.NOOP
            return draft.finish(verdict, (*confirm, step.action), confirmed_down=True)
        return draft.finish(Verdict.NOOP, confirm, confirmed_down=True)
    if not purges:
        draft.add(VERDICT, True, "already fenced and nothing left to purge")
        return draft.finish(Verdict.NOOP, confirm, confirmed_down=True)
    return draft.finish(Verdict.PURGE, (*confirm, *purges), confirmed_down=True)


def _resolved(
    draft: _Draft, event: AlertEvent, facts: Facts, node: NodeFacts, entry: FenceEntry | None
) -> Decision:
    if entry is None:
        _not_ours(draft, node)
        return draft.finish(Verdict.NOOP)
    rule = _governing_rule(draft.policy, entry, match_rule(draft.policy, event, node), draft)
    half = _half_written(draft, node, entry, "the alert resolved")
    if half is not None:
        return half
    held = _held_taint(draft, node, entry)
    if held is not None:
        return held
    _fenced_since(draft, entry)
    draft.add(
        ALERT_RESOLVED,
        True,
        "the alert resolved; that alone is no proof of health, so the node itself is checked",
    )
    return _unfence(draft, facts, node, entry, rule)


def _unfence(
    draft: _Draft, facts: Facts, node: NodeFacts, entry: FenceEntry, rule: Rule
) -> Decision:
    audited = audit.contradiction(node, entry, rule)
    if audited is not None:
        # S10 after the fact: back with its fence-time boot ID, the machine was never off.
        # The boot ID needs no clock, so the taint is kept on any; the finding is written down
        # (on the API server's time) only where that clock is known (S11).
        reason, first = audited
        draft.extend(reason)
        hold = ProofContradictedAction(node.name, node.uid, node.boot_id)
        mark = first and draft.clock == API_SERVER_CLOCK
        return draft.finish(Verdict.NOOP, (hold,) if mark else ())
    checks = (
        guards.trusted_clock(facts.clock),
        guards.healthy_long_enough(node, entry, rule, draft.now),
        guards.lease_is_fresh(node, facts.lease, rule, draft.now),
        guards.new_boot_id(node, entry, rule),
        guards.no_terminating_pods(node, facts.pods),
        guards.no_attachments_from_before(node, entry, facts.attachments),
    )
    draft.extend(*checks)
    cond = node.ready
    first_sight = (
        cond is not None
        and readiness.is_ready(cond)
        and (entry.ready_seen_at is None or entry.ready_transition != cond.last_transition)
    )
    if first_sight and checks[0].passed and cond is not None:
        observe = ObserveReadyAction(node.name, node.uid, cond.last_transition, draft.now)
        draft.add(VERDICT, False, "unfence deferred; the healthy delay starts now")
        return draft.finish(Verdict.DEFERRED, (observe,))
    if not all(c.passed for c in checks):
        draft.add(VERDICT, False, "unfence deferred; a later reconcile pass checks again")
        return draft.finish(Verdict.DEFERRED)
    changes = mirror.unfence_annotations(instant(draft.now))
    action = UnfenceAction(
        node=node.name,
        node_uid=node.uid,
        resource_version=node.resource_version,
        effect=entry.effect,
        annotations={k: v for k, v in changes.items() if v is not None},
        remove_annotations=tuple(k for k, v in changes.items() if v is None),
    )
    release = ReleaseAction(node.name, node.uid, "unfenced: the node is healthy again")
    draft.add(VERDICT, True, f"node {node.name} is healthy again: removing nodefence's taint")
    return draft.finish(Verdict.UNFENCE, (action, release))
