"""The decision: a pure function of the alert, the live facts, the policy and the time.

Nothing here reads a clock, the network or randomness; the caller passes ``now``. That is what
lets the safety invariants be checked by generating facts, and what makes a decision record
reproducible from its inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from nodefence.engine import guards, ledger
from nodefence.engine.alerts import match_rule, node_from_labels, selector_matches
from nodefence.engine.model import (
    EXCLUDE_LABEL,
    Action,
    AlertEvent,
    AlertStatus,
    Approval,
    ApprovalDecision,
    Decision,
    Facts,
    FenceAction,
    Ledger,
    NodeFacts,
    Reason,
    UnfenceAction,
    Verdict,
)
from nodefence.engine.purge import select_purge
from nodefence.engine.wording import duration, instant
from nodefence.policy import Policy, Rule

RECONCILE_STATUS = "reconcile"


@dataclass
class _Record:
    """The decision being assembled: reasons accumulate in the order the guards ran."""

    policy: Policy
    now: datetime
    alertname: str
    fingerprint: str
    status: str
    node: str | None = None
    rule: str | None = None
    reasons: list[Reason] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.policy.dry_run:
            self.add(
                "dry-run",
                True,
                "dry run: nothing will be written to the cluster; actions are what would be done",
            )

    def add(self, guard: str, passed: bool, message: str) -> None:
        self.reasons.append(Reason(guard, passed, message))

    def extend(self, *reasons: Reason | None) -> None:
        self.reasons.extend(r for r in reasons if r is not None)

    def finish(self, verdict: Verdict, actions: tuple[Action, ...] = ()) -> Decision:
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
        )


def _excluded(node: NodeFacts) -> bool:
    return (
        node.labels.get(EXCLUDE_LABEL, "").lower() == "true"
        or node.annotations.get(EXCLUDE_LABEL, "").lower() == "true"
    )


def _own_ledger(node: NodeFacts, record: _Record) -> Ledger:
    """The ledger if it was written for this very node object, else an empty one (S9).

    The adapter normally parses the annotations into ``node.ledger``; when it left the default,
    the annotations themselves are read, so a ledger is never overlooked.
    """
    raw = node.ledger if node.ledger != Ledger() else ledger.parse_ledger(node.annotations)
    if raw == Ledger():
        return raw
    if raw.node_uid != node.uid:
        written_for = raw.node_uid or "an unrecorded UID"
        record.add(
            "node-identity",
            True,
            f"the nodefence annotations were written for node UID {written_for}, but this node "
            f"is UID {node.uid} (re-created under the same name); the old record is ignored",
        )
        return Ledger()
    return raw


def _common_preamble(
    record: _Record, facts: Facts, node_name: str | None
) -> tuple[NodeFacts, Ledger] | Decision:
    """Checks shared by every entry point: pause, node existence, exclusion, node identity."""
    if record.policy.paused:
        record.add("paused", False, "nodefence is paused by the policy; nothing is done")
        return record.finish(Verdict.SKIP)
    if facts.cluster.paused_reason:
        record.add("paused", False, f"nodefence is paused: {facts.cluster.paused_reason}")
        return record.finish(Verdict.SKIP)
    node = facts.node
    if node is None:
        record.add("node-found", False, f"node {node_name} does not exist in the cluster")
        return record.finish(Verdict.SKIP)
    if node_name is not None and node.name != node_name:
        record.add("node-found", False, f"facts describe node {node.name}, not {node_name}")
        return record.finish(Verdict.SKIP)
    record.node = node.name
    if _excluded(node):
        record.add("exclusion", False, f"node {node.name} is excluded ({EXCLUDE_LABEL}=true)")
        return record.finish(Verdict.SKIP)
    return node, _own_ledger(node, record)


def _ledger_rule(policy: Policy, own: Ledger, fallback: Rule | None, record: _Record) -> Rule:
    """The rule that fenced the node also governs its release, so a later alert with other
    labels cannot loosen the conditions; defaults apply if that rule left the policy."""
    named = policy.rule_named(own.rule)
    if named is not None:
        record.add("rule", True, f"rule {named.name!r} fenced this node and governs its release")
        chosen = named
    elif fallback is not None:
        record.add("rule", True, f"rule {fallback.name!r} matches")
        chosen = fallback
    else:
        record.add("rule", True, "no rule matches any more; the built-in defaults apply")
        chosen = Rule(name="built-in defaults")
    record.rule = chosen.name
    return chosen


def decide(
    event: AlertEvent,
    facts: Facts,
    policy: Policy,
    now: datetime,
    *,
    approval: Approval | None = None,
) -> Decision:
    record = _Record(policy, now, event.alertname, event.fingerprint, event.status.value)
    if event.alertname not in policy.alerts.names:
        record.add(
            "alert",
            False,
            f"alert {event.alertname} is not handled (handled: {', '.join(policy.alerts.names)})",
        )
        return record.finish(Verdict.SKIP)
    node_name = event.node or node_from_labels(event.labels, policy.alerts.node_labels)
    if not node_name:
        record.add(
            "node-label",
            False,
            f"the alert has none of the node labels {', '.join(policy.alerts.node_labels)}",
        )
        return record.finish(Verdict.SKIP)
    record.node = node_name
    prepared = _common_preamble(record, facts, node_name)
    if isinstance(prepared, Decision):
        return prepared
    node, own = prepared
    if event.status == AlertStatus.RESOLVED:
        return _resolved(record, event, facts, node, own)
    return _firing(record, event, facts, node, own, approval=approval)


def decide_reconcile(facts: Facts, policy: Policy, now: datetime) -> Decision:
    """Finish what lost or failed deliveries left on a node carrying nodefence's ledger."""
    record = _Record(policy, now, "", "", RECONCILE_STATUS)
    prepared = _common_preamble(record, facts, None)
    if isinstance(prepared, Decision):
        return prepared
    node, own = prepared
    record.alertname = own.alertname or ""
    record.fingerprint = own.alert_fingerprint or ""
    if not own.fenced:
        _not_ours(record, node)
        return record.finish(Verdict.NOOP)
    fallback = next((r for r in policy.rules if selector_matches(r, node)), None)
    rule = _ledger_rule(policy, own, fallback, record)
    _fenced_since(record, own)
    if guards.is_ready(node):
        return _unfence(record, facts, node, own, rule)
    if node.out_of_service_taint is None:
        record.add(
            "taint",
            False,
            "the out-of-service taint was removed by someone else while the node is NotReady; "
            "nodefence does not purge without its taint (a firing alert re-evaluates the node)",
        )
        return record.finish(Verdict.NOOP)
    return _purge_leftovers(record, facts, node, rule)


def _not_ours(record: _Record, node: NodeFacts) -> None:
    taint = node.out_of_service_taint
    if taint is not None:
        record.add(
            "ownership",
            False,
            f"the out-of-service taint ({taint.effect}) on node {node.name} was not applied by "
            "nodefence; it is never removed by nodefence",
        )
    # With no taint at all there is nothing to refuse (a duplicate resolve after an unfence
    # lands here): a quiet no-op, not a refusal Event on the node.
    record.add("ownership", taint is None, "nodefence has not fenced this node; nothing to undo")


def _fenced_since(record: _Record, own: Ledger) -> None:
    when = f" at {instant(own.fenced_at)}" if own.fenced_at else ""
    record.add("ownership", True, f"nodefence fenced this node{when}")


def _firing(
    record: _Record,
    event: AlertEvent,
    facts: Facts,
    node: NodeFacts,
    own: Ledger,
    *,
    approval: Approval | None,
) -> Decision:
    policy = record.policy
    rule = match_rule(policy, event, node)
    if rule is None:
        record.add("rule", False, f"no policy rule matches alert {event.alertname} on this node")
        return record.finish(Verdict.SKIP)
    record.rule = rule.name
    record.add("rule", True, f"rule {rule.name!r} matches")

    if own.fenced:
        if node.out_of_service_taint is not None:
            _fenced_since(record, own)
            governing = policy.rule_named(own.rule)
            if governing is not None and governing is not rule:
                record.add("rule", True, f"rule {governing.name!r} fenced this node and governs it")
                record.rule = governing.name
            return _purge_leftovers(record, facts, node, governing or rule)
        record.add(
            "ownership",
            True,
            "the ledger says nodefence fenced this node but its taint is gone (removed by "
            "someone else); the node is judged afresh",
        )

    ours = own.fenced and node.out_of_service_taint is not None
    record.extend(guards.no_foreign_taint(node, ours))
    s1 = guards.ready_is_not_true(node)
    record.extend(s1)
    if s1.passed:
        record.extend(guards.not_ready_long_enough(node, rule, record.now))
    record.extend(
        guards.lease_is_stale(node, facts.lease, rule, record.now),
        guards.no_storm(facts.cluster, policy.cluster),
        guards.storm_cooled_down(facts.cluster, policy.cluster, record.now),
        guards.within_fence_budget(node, facts.cluster, policy.cluster),
        guards.ready_fraction_kept(node, facts.cluster, policy.cluster),
        guards.control_plane_quorum(node, facts.cluster, policy.cluster),
        guards.powered_off(node, facts.power, rule),
    )
    flap = guards.not_flapping(own, rule, record.now)
    record.extend(flap)
    if any(not r.passed for r in record.reasons if r.guard != guards.FLAP):
        return record.finish(Verdict.NOOP)

    if rule.approval == "slack":
        answer = _approval(record, rule, node, approval, flap)
        if answer is not None:
            return answer
    elif not flap.passed:
        return record.finish(Verdict.NOOP)
    approved = approval if rule.approval == "slack" else None

    effect = rule.taint_effect
    notes = ledger.fence_annotations(
        node, event, record.now, effect, rule=rule.name, approval=approved
    )
    fence = FenceAction(node.name, node.uid, node.resource_version, effect, notes)
    purges, purge_reason = select_purge(node, facts.pods, rule.purge)
    record.extend(purge_reason)
    record.add(
        "verdict",
        True,
        f"all guards passed: fencing node {node.name} with the out-of-service taint ({effect})",
    )
    return record.finish(Verdict.FENCE, (fence, *purges))


def _approval(
    record: _Record,
    rule: Rule,
    node: NodeFacts,
    approval: Approval | None,
    flap: Reason,
) -> Decision | None:
    """None when a valid approval lets the fence proceed; otherwise the waiting or refused
    decision. A person's approval also overrides the flap guard: that is what it is asked for."""
    asked = f"rule {rule.name!r} requires approval in Slack" + (
        "" if flap.passed else " (the node may be flapping)"
    )
    if approval is None:
        rejected = ledger.rejection(node, record.fingerprint)
        if rejected is not None:
            record.add("approval", False, f"fencing was {rejected} for this incident")
            return record.finish(Verdict.NOOP)
        record.add("approval", False, f"{asked}; none given yet")
        return record.finish(Verdict.AWAIT_APPROVAL)
    if approval.node_uid != node.uid:
        record.add(
            "approval",
            False,
            f"{asked}; the answer from {approval.user} was for node UID {approval.node_uid}, "
            f"not this node (UID {node.uid})",
        )
        return record.finish(Verdict.AWAIT_APPROVAL)
    age = record.now - approval.at
    if age > timedelta(seconds=rule.approval_timeout_seconds) or age < timedelta(0):
        record.add(
            "approval",
            False,
            f"{asked}; the answer from {approval.user} at {instant(approval.at)} is not within "
            f"the last {duration(rule.approval_timeout_seconds)}",
        )
        return record.finish(Verdict.AWAIT_APPROVAL)
    if approval.decision == ApprovalDecision.REJECT:
        record.add(
            "approval", False, f"fencing was rejected by {approval.user} at {instant(approval.at)}"
        )
        return record.finish(Verdict.NOOP)
    record.add("approval", True, f"approved by {approval.user} at {instant(approval.at)}")
    return None


def _purge_leftovers(record: _Record, facts: Facts, node: NodeFacts, rule: Rule) -> Decision:
    """Purging pods is only safe while the node is still verifiably down, so S1 and S2 are
    checked again even though the node is already fenced."""
    purges, reason = select_purge(node, facts.pods, rule.purge)
    if not purges:
        record.extend(reason)
        record.add("verdict", True, "already fenced and nothing left to purge")
        return record.finish(Verdict.NOOP)
    s1 = guards.ready_is_not_true(node)
    s2 = guards.lease_is_stale(node, facts.lease, rule, record.now)
    record.extend(s1, s2, reason)
    if not (s1.passed and s2.passed):
        record.add("purge", False, "the node shows signs of life; its pods are not purged")
        return record.finish(Verdict.NOOP)
    return record.finish(Verdict.PURGE, purges)


def _resolved(
    record: _Record, event: AlertEvent, facts: Facts, node: NodeFacts, own: Ledger
) -> Decision:
    if not own.fenced:
        _not_ours(record, node)
        return record.finish(Verdict.NOOP)
    rule = _ledger_rule(record.policy, own, match_rule(record.policy, event, node), record)
    _fenced_since(record, own)
    record.add(
        "alert-resolved",
        True,
        "the alert resolved; that alone is no proof of health, so the node itself is checked",
    )
    return _unfence(record, facts, node, own, rule)


def _unfence(record: _Record, facts: Facts, node: NodeFacts, own: Ledger, rule: Rule) -> Decision:
    checks = (
        guards.healthy_long_enough(node, rule, record.now),
        guards.lease_is_fresh(node, facts.lease, rule, record.now),
        guards.new_boot_id(node, own, rule),
        guards.no_terminating_pods(node, facts.pods),
    )
    record.extend(*checks)
    if not all(c.passed for c in checks):
        record.add("verdict", False, "unfence deferred; a later reconcile pass checks again")
        return record.finish(Verdict.DEFERRED)
    changes = ledger.unfence_annotations(record.now)
    action = UnfenceAction(
        node=node.name,
        node_uid=node.uid,
        resource_version=node.resource_version,
        annotations={k: v for k, v in changes.items() if v is not None},
        remove_annotations=tuple(k for k, v in changes.items() if v is None),
    )
    record.add("verdict", True, f"node {node.name} is healthy again: removing nodefence's taint")
    return record.finish(Verdict.UNFENCE, (action,))
