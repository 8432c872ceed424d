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

from datetime import datetime

from nodefence.engine import (
    audit,
    dry_run,
    escalation,
    fence_path,
    guards,
    machine,
    mirror,
    orphans,
    readiness,
    reboot,
    volumes,
)
from nodefence.engine.alerts import match_rule, node_from_labels, selector_matches
from nodefence.engine.approval_ask import with_question
from nodefence.engine.authorship import taint_authorship
from nodefence.engine.draft import Draft, claim_fresh
from nodefence.engine.exclusion import exclusion
from nodefence.engine.guard_kinds import (
    ALERT,
    ALERT_RESOLVED,
    EXCLUSION,
    FENCE_IN_PROGRESS,
    FENCE_RECORD,
    NO_ALERT,
    NODE_FOUND,
    NODE_IDENTITY,
    NODE_LABEL,
    OWNERSHIP,
    PAUSED,
    PURGE,
    REBOOT,
    RULE,
    SILENCE,
    VERDICT,
)
from nodefence.engine.model import (
    API_SERVER_CLOCK,
    Action,
    AlertEvent,
    AlertStatus,
    Approval,
    ConfirmAction,
    Decision,
    Facts,
    NodeFacts,
    ObserveReadyAction,
    ProofContradictedAction,
    ReleaseAction,
    UnfenceAction,
    Verdict,
)
from nodefence.engine.purge import select_purge
from nodefence.engine.record import FenceEntry, Phase
from nodefence.engine.wording import instant
from nodefence.policy import Policy, Rule

RECONCILE_STATUS = "reconcile"


def _exact(node: NodeFacts, entry: FenceEntry) -> bool:
    """S4: nodefence owns only the very taint it wrote, as the API server recorded the write
    (``engine.authorship``); the same key, value and effect written by someone else is theirs."""
    return taint_authorship(node, entry).ours


def _foreign(draft: Draft, node: NodeFacts, entry: FenceEntry) -> Decision:
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


def _paused(draft: Draft, facts: Facts) -> Decision | None:
    if draft.policy.paused:
        draft.add(PAUSED, False, "nodefence is paused by the policy; nothing is done")
        return draft.finish(Verdict.SKIP)
    if facts.cluster.paused_reason:
        draft.add(PAUSED, False, f"nodefence is paused: {facts.cluster.paused_reason}")
        return draft.finish(Verdict.SKIP)
    return None


def _common_preamble(
    draft: Draft, facts: Facts, node_name: str
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
    draft: Draft, node: NodeFacts | None, entry: FenceEntry | None, why: str
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


def _let_go(draft: Draft, entry: FenceEntry, why: str) -> Decision:
    """Free the entry's budget slot without touching the node: housekeeping after which the
    caller reads and decides again. A claim whose taint never came is not remembered as a
    release (nothing was released that the flap guard should count)."""
    draft.add(OWNERSHIP, True, f"nodefence lets go of its fence of {entry.node}: {why}")
    claimed = entry.phase is Phase.CLAIMED
    claim = entry.claimed_by if claimed else ""
    return draft.finish(
        Verdict.NOOP, (ReleaseAction(entry.node, entry.uid, why, claim, remember=not claimed),)
    )


def _governing_rule(policy: Policy, entry: FenceEntry, fallback: Rule | None, draft: Draft) -> Rule:
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
    draft = Draft(policy, now, event.alertname, event.fingerprint, event.status.value, facts.clock)
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
        decided = machine.noted(_resolved(draft, event, facts, node, entry), facts, policy)
    else:
        decided = _firing(draft, event, facts, node, entry, approval=approval, own_claim=own_claim)
        decided = with_question(machine.noted(decided, facts, policy), facts, asking_at)
    # S8: a dry run that would ask the node's BMC says what a read-only look at it found.
    return dry_run.noted(decided, facts)


def decide_reconcile(facts: Facts, policy: Policy, now: datetime, node_name: str) -> Decision:
    """Finish what lost or failed deliveries left on a node the fence record holds."""
    draft = Draft(policy, now, "", "", RECONCILE_STATUS, facts.clock)
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


def _not_ours(draft: Draft, node: NodeFacts) -> None:
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


def _fenced_since(draft: Draft, entry: FenceEntry) -> None:
    when = entry.fenced_at or entry.claimed_at
    draft.add(OWNERSHIP, True, f"nodefence fenced this node at {instant(when)}")


def _half_written(
    draft: Draft, node: NodeFacts, entry: FenceEntry, why_not_finish: str, *, asked: bool = False
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
    if claim_fresh(draft, entry) or asked:
        waits = "; its power-off was sent and a person is asked in Slack" if asked else ""
        draft.add(
            FENCE_IN_PROGRESS,
            False,
            f"a fence of node {node.name} is in progress ({claimed}{waits}); not started twice",
        )
        return draft.finish(Verdict.NOOP)
    return _let_go(draft, entry, f"half-written fence rolled back ({claimed}; {why_not_finish})")


def _held_taint(draft: Draft, node: NodeFacts, entry: FenceEntry) -> Decision | None:
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
    draft: Draft,
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
    screen = fence_path.Screen(draft, event, facts, node, rule, approval, pending, own_claim)
    return fence_path.fence(screen)


def _purge_leftovers(
    draft: Draft,
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
    draft: Draft, facts: Facts, node: NodeFacts, entry: FenceEntry, rule: Rule
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
        shared = machine.binding_reason(node, facts)
        if shared is not None and not shared.passed:
            # A target the inventory gives two nodes may be the other node's machine: neither
            # its power state nor a power-on there is this node's.
            draft.extend(shared)
            draft.add(REBOOT, False, reboot.SHARED_TARGET)
            return draft.finish(Verdict.NOOP, confirm, confirmed_down=True)
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
    draft: Draft, event: AlertEvent, facts: Facts, node: NodeFacts, entry: FenceEntry | None
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
    draft: Draft, facts: Facts, node: NodeFacts, entry: FenceEntry, rule: Rule
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
