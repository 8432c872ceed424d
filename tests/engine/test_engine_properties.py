"""Property tests: the safety invariants hold for any facts, alert, policy and kubelet clock.

``NOW`` is the API server's clock. Everything a node's own credentials can write is generated
freely: its annotations (forged ``nodefence.io/*`` mirror keys included), its Ready condition's
timestamps and its Lease's ``renewTime`` (a kubelet clock minutes off either way). The fence
record and the API server's managedFields stamp on the Lease are the only authority.
"""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from datetime import timedelta

import pytest
from engine_factories import LOCAL_CLOCK, NODE, NOW, ago, our_taint
from engine_strategies import (
    FALLBACK_WHY,
    PROFILE,
    Case,
    all_decisions,
    cases,
    exclusion_values,
    forged_annotations,
    mostly,
    own,
    own_entry,
    rule_of,
    shifted,
    skews,
)
from hypothesis import given
from hypothesis import strategies as st

from nodefence.engine import fallback
from nodefence.engine import record as fence_record
from nodefence.engine.alerts import match_rule, selector_matches
from nodefence.engine.authorship import taint_authorship
from nodefence.engine.decide import decide
from nodefence.engine.model import (
    API_SERVER_CLOCK,
    EXCLUDE_LABEL,
    OUT_OF_SERVICE_KEY,
    OUT_OF_SERVICE_VALUE,
    PREFIX,
    AlertEvent,
    AlertStatus,
    ApprovalDecision,
    ClaimAction,
    ConfirmAction,
    Decision,
    Facts,
    FenceAction,
    LeaseFacts,
    NodeFacts,
    ObserveReadyAction,
    PurgePodAction,
    ReleaseAction,
    Taint,
    UnfenceAction,
    Verdict,
)
from nodefence.engine.record import FenceEntry, FenceRecord, Phase
from nodefence.policy import Policy, Rule

TOKEN = "replica-b/feedface0000"


def exact(taint: Taint | None, held: FenceEntry) -> bool:
    return taint is not None and (taint.value, taint.effect) == (OUT_OF_SERVICE_VALUE, held.effect)


def governing_rule(policy: Policy, decision: Decision, facts: Facts, held: FenceEntry) -> Rule:
    """The rule a held node is handled by: the one named in its entry, else the one matching
    (the alert and node, or the node alone for reconcile), else the built-in defaults."""
    named = policy.rule_named(held.rule)
    if named is not None:
        return named
    node = facts.node
    assert node is not None
    if decision.status == "reconcile":
        return next((r for r in policy.rules if selector_matches(r, node)), Rule())
    why = FALLBACK_WHY if decision.alertname == fallback.ALERTNAME else ""
    event = AlertEvent(decision.alertname, AlertStatus(decision.status), NODE, "", fallback=why)
    return match_rule(policy, event, node) or Rule()


def server_silence(facts: Facts) -> timedelta | None:
    lease = facts.lease
    if lease is None or lease.server_renewed is None:
        return None
    return NOW - lease.server_renewed


def holders(record: FenceRecord) -> set[str]:
    """Every node name that holds a budget slot: readable entries and unreadable keys."""
    unreadable = {k.removeprefix(fence_record.FENCE_PREFIX) for k in record.unreadable}
    return {e.node for e in record.entries} | unreadable


def has(decision: Decision, *kinds: type) -> bool:
    return any(isinstance(a, kinds) for a in decision.actions)


# --- S1, S2, S3 (and the guards beside them) ----------------------------------------------------


@pytest.mark.invariant("S1", "S2", "S3")
@PROFILE
@given(cases)
def test_s1_s2_s3_no_fence_unless_every_guard_allows(case: Case) -> None:
    event, facts, policy, approval = case
    for decision in all_decisions(event, facts, policy, approval):
        if not has(decision, FenceAction):
            continue
        node, cluster, record = facts.node, facts.cluster, facts.record
        assert node is not None
        rule = rule_of(policy)
        assert facts.clock == API_SERVER_CLOCK
        assert decision.status == AlertStatus.FIRING.value
        assert decision.verdict == Verdict.FENCE
        assert not policy.paused
        # S1
        assert node.ready is not None
        assert node.ready.status != "True"
        # S2, on the API server's clock
        silence = server_silence(facts)
        if facts.lease is None:
            assert rule.fence_without_lease
        else:
            assert silence is not None
            assert silence >= timedelta(seconds=rule.lease_staleness_seconds)
        # NotReady long enough, and silent that long
        assert node.ready.last_transition is not None
        not_ready = NOW - node.ready.last_transition
        if silence is not None:
            not_ready = min(not_ready, silence)
        assert not_ready >= timedelta(seconds=rule.min_not_ready_seconds)
        # S4 on the way in: no taint yet
        assert node.out_of_service_taint is None
        # S3: budget and capacity
        assert len(holders(record) - {NODE}) < policy.cluster.max_fenced_nodes
        assert cluster.total_nodes > 0
        capacity = (
            cluster.ready_nodes if cluster.schedulable_ready is None else cluster.schedulable_ready
        )
        assert capacity / cluster.total_nodes >= policy.cluster.min_ready_fraction
        down = cluster.total_nodes - cluster.ready_nodes
        assert down / cluster.total_nodes <= policy.cluster.storm_not_ready_fraction
        if node.is_control_plane and policy.cluster.control_plane_quorum:
            assert not set(record.control_plane_holders) - {NODE}
            assert cluster.control_plane_ready * 2 > cluster.control_plane_total
        # Flap, or a person's approval in its place
        if rule.approval == "slack":
            assert approval is not None
            assert approval.decision == ApprovalDecision.APPROVE
            assert approval.node_uid == node.uid
        else:
            release = record.release(NODE, node.uid)
            assert release is None or NOW - release.at >= timedelta(
                seconds=rule.flap_window_seconds
            )


@pytest.mark.invariant("S3")
@PROFILE
@given(cases)
def test_s3_record_holders_after_a_claim_stay_within_the_budget(case: Case) -> None:
    """Applying the decision's claim to the very record it read never makes more holders than
    ``max_fenced_nodes``; completing a stale claim adds none."""
    event, facts, policy, approval = case
    decision = decide(event, facts, policy, NOW, approval=approval)
    if decision.verdict != Verdict.FENCE:
        return
    after = facts.record
    for action in decision.actions:
        if isinstance(action, ClaimAction):
            assert action.record_version == facts.record.resource_version
            after = fence_record.with_entry(after, action.entry)
    assert len(holders(after)) <= policy.cluster.max_fenced_nodes
    assert NODE in holders(after)


@pytest.mark.invariant("S3")
@PROFILE
@given(cases)
def test_s3_unreadable_entries_hold_their_slots(case: Case) -> None:
    """A record whose budget is spent by entries nobody can read: nothing is claimed or fenced."""
    event, facts, policy, approval = case
    lost = tuple(
        f"{fence_record.FENCE_PREFIX}lost-{i}" for i in range(policy.cluster.max_fenced_nodes)
    )
    full = replace(facts, record=replace(facts.record, unreadable=lost))
    for decision in all_decisions(event, full, policy, approval):
        assert not has(decision, ClaimAction, FenceAction)


@PROFILE
@given(cases)
def test_a_fence_is_claimed_first_or_completes_a_claim(case: Case) -> None:
    event, facts, policy, approval = case
    for decision in all_decisions(event, facts, policy, approval):
        fences = [i for i, a in enumerate(decision.actions) if isinstance(a, FenceAction)]
        if not fences:
            continue
        (at,) = fences
        node = facts.node
        assert node is not None
        fence = decision.actions[at]
        assert isinstance(fence, FenceAction)
        assert (fence.node, fence.node_uid, fence.resource_version) == (
            NODE,
            node.uid,
            node.resource_version,
        )
        confirm = decision.actions[at + 1]
        assert isinstance(confirm, ConfirmAction)
        assert (confirm.node, confirm.node_uid) == (NODE, node.uid)
        held = own(facts)
        if held is None:
            claim = decision.actions[0]
            assert at == 1
            assert isinstance(claim, ClaimAction)
            assert claim.record_version == facts.record.resource_version
            assert (claim.entry.node, claim.entry.uid, claim.entry.phase) == (
                NODE,
                node.uid,
                Phase.CLAIMED,
            )
            assert (claim.entry.claimed_at, claim.entry.effect) == (NOW, fence.effect)
            assert confirm.claimed_by == ""
        else:
            # Completing a claim whose taint never came: the same claim, no second one.
            assert at == 0
            assert held.phase is Phase.CLAIMED
            assert fence.effect == held.effect
            assert confirm.claimed_by == held.claimed_by
            assert not has(decision, ClaimAction)


def stopped(facts: Facts, policy: Policy) -> bool:
    """A fence in progress is stopped by a person, for a reason that needs no clock: the node
    excluded, or nodefence paused. Its claim is let go at once; S3 still holds, because the
    exclusion is a write to the Node that fails the in-flight taint's resourceVersion test, and
    a taint that still lands on a released claim finds no entry to confirm and is taken off."""
    return excluded(facts.node) or policy.paused or bool(facts.cluster.paused_reason)


def excluded(node: NodeFacts | None) -> bool:
    """The exclusion switch on the node's labels or annotations, with any value but an explicit
    false, no or 0: what a person may have meant as an exclusion is one."""
    if node is None:
        return False
    values = (node.labels.get(EXCLUDE_LABEL), node.annotations.get(EXCLUDE_LABEL))
    return any(v is not None and v.strip().lower() not in {"false", "no", "0"} for v in values)


def without_exclusion(node: NodeFacts) -> NodeFacts:
    labels = {k: v for k, v in node.labels.items() if k != EXCLUDE_LABEL}
    annotations = {k: v for k, v in node.annotations.items() if k != EXCLUDE_LABEL}
    return replace(node, labels=labels, annotations=annotations)


@PROFILE
@given(cases, exclusion_values, st.sampled_from(["labels", "annotations"]))
def test_an_exclusion_a_person_may_have_meant_is_never_ignored(
    case: Case, value: str, where: str
) -> None:
    """Any value of the exclusion switch but an explicit false, no or 0 keeps nodefence away:
    nothing claimed, fenced, purged or unfenced, and the decision says it is excluded and by
    which value. An explicit false, no or 0 is as if the switch were not there."""
    event, facts, policy, approval = case
    if facts.node is None:
        return
    bare = without_exclusion(facts.node)
    switched = replace(bare, **{where: {**getattr(bare, where), EXCLUDE_LABEL: value}})
    with_switch = replace(facts, node=switched)
    decisions = all_decisions(event, with_switch, policy, approval)
    if not excluded(switched):
        for first, second in zip(
            decisions,
            all_decisions(event, replace(facts, node=bare), policy, approval),
            strict=True,
        ):
            assert (first.verdict, first.actions, first.reasons) == (
                second.verdict,
                second.actions,
                second.reasons,
            )
        return
    for decision in decisions:
        assert not has(decision, ClaimAction, FenceAction, PurgePodAction, UnfenceAction)
        assert not has(decision, ObserveReadyAction)
        exclusions = [r for r in decision.reasons if r.guard == "exclusion"]
        if exclusions:
            (reason,) = exclusions
            assert not reason.passed
            assert EXCLUDE_LABEL in reason.message
        else:
            # Stopped before the node itself was judged (paused, another node, no alert).
            assert decision.verdict in (Verdict.SKIP, Verdict.NOOP)


@pytest.mark.invariant("S3")
@PROFILE
@given(cases, st.integers(0, 1000), mostly(None, "taint"), mostly(API_SERVER_CLOCK, LOCAL_CLOCK))
def test_s3_a_claim_is_never_doubled_nor_rolled_back_while_it_may_be_in_progress(
    case: Case, age: int, taint: str | None, clock: str
) -> None:
    """Another replica claimed this node ``age`` seconds ago. No decision claims a second slot
    for it; a fence completes that very claim; and it is rolled back only once it is older than
    the claim timeout on the API server's clock, or for reasons that need no clock (its node is
    gone or re-created, someone else's taint is on it)."""
    event, facts, policy, approval = case
    node = facts.node
    uid = node.uid if node is not None else "uid-a"
    claim = own_entry(uid, phase=Phase.CLAIMED, claimed_at=ago(age), effect="NoExecute")
    if node is not None:
        node = replace(node, taints=(our_taint("NoSchedule"),) if taint else ())
    claimed = replace(
        facts, node=node, clock=clock, record=fence_record.with_entry(facts.record, claim)
    )
    may_be_in_progress = clock != API_SERVER_CLOCK or age < policy.cluster.claim_timeout_seconds
    for decision in all_decisions(event, claimed, policy, approval):
        assert not has(decision, ClaimAction)
        for action in decision.actions:
            if isinstance(action, ConfirmAction):
                assert action.claimed_by == claim.claimed_by
            if isinstance(action, ReleaseAction) and may_be_in_progress:
                assert node is None or taint is not None or stopped(claimed, policy)


# --- S4, S5, S12: unfence ----------------------------------------------------------------------


@pytest.mark.invariant("S4", "S5")
@PROFILE
@given(cases)
def test_s4_s5_unfence_only_own_exact_taint_after_healthy_delay(case: Case) -> None:
    event, facts, policy, approval = case
    for decision in all_decisions(event, facts, policy, approval):
        unfences = [a for a in decision.actions if isinstance(a, UnfenceAction)]
        if not unfences:
            continue
        node = facts.node
        assert node is not None
        held = own(facts)
        # S4 / S9 / S12: the record, not the node, says nodefence fenced this very node object,
        # and the taint on it is exactly the one nodefence wrote.
        assert held is not None
        assert exact(node.out_of_service_taint, held)
        (unfence,) = unfences
        assert (unfence.node_uid, unfence.effect) == (node.uid, held.effect)
        release = decision.actions[-1]
        assert isinstance(release, ReleaseAction)
        assert (release.node, release.node_uid) == (NODE, node.uid)
        assert facts.clock == API_SERVER_CLOCK
        assert decision.status != AlertStatus.FIRING.value
        # S5, on the API server's clock
        rule = governing_rule(policy, decision, facts, held)
        delay = timedelta(seconds=rule.healthy_delay_seconds)
        assert node.ready is not None
        assert node.ready.status == "True"
        assert held.ready_seen_at is not None
        assert held.ready_transition == node.ready.last_transition
        assert NOW - held.ready_seen_at >= delay
        if node.ready.last_transition is not None:
            assert NOW - node.ready.last_transition >= delay
        silence = server_silence(facts)
        assert silence is not None
        assert silence <= timedelta(seconds=rule.lease_staleness_seconds)
        if rule.require_new_boot_id:
            assert node.boot_id
            assert node.boot_id != held.boot_id
        assert not any(p.terminating and p.node_name == NODE for p in facts.pods)


def strip_mirror(node: NodeFacts) -> NodeFacts:
    kept = {k: v for k, v in node.annotations.items() if not k.startswith(PREFIX)}
    return replace(node, annotations=kept)


@pytest.mark.invariant("S12")
@PROFILE
@given(cases, forged_annotations)
def test_s12_forged_annotations_never_cause_an_action(case: Case, forged: dict[str, str]) -> None:
    """Whatever ``nodefence.io/*`` annotations a node writes, nodefence does what it would do
    without them, or less (an exclusion or a recorded rejection only stops it): never an unfence
    of a taint the record does not hold, never a claim, fence or purge that would not be."""
    event, facts, policy, approval = case
    if facts.node is None:
        return
    clean = replace(facts, node=strip_mirror(facts.node))
    dirty = replace(
        facts, node=replace(facts.node, annotations={**facts.node.annotations, **forged})
    )
    held = own(dirty)
    taint = facts.node.out_of_service_taint
    for forged_decision, baseline in zip(
        all_decisions(event, dirty, policy, approval),
        all_decisions(event, clean, policy, approval),
        strict=True,
    ):
        if has(forged_decision, UnfenceAction):
            assert held is not None
            assert exact(taint, held)
        if forged_decision.actions != baseline.actions:
            # Less, never more: nothing, or the claim of a fence in progress let go because the
            # node now carries an exclusion (a stop that needs no clock: ``stopped``).
            assert all(isinstance(a, ReleaseAction) for a in forged_decision.actions)
            assert forged_decision.actions == () or stopped(dirty, policy)
            assert forged_decision.verdict in {Verdict.SKIP, Verdict.NOOP}


# --- S6 ------------------------------------------------------------------------------------------


@pytest.mark.invariant("S6")
@PROFILE
@given(cases)
def test_s6_purge_only_pods_of_this_node_and_only_while_it_is_down(case: Case) -> None:
    event, facts, policy, approval = case
    for decision in all_decisions(event, facts, policy, approval):
        purges = [a for a in decision.actions if isinstance(a, PurgePodAction)]
        if not purges:
            continue
        node = facts.node
        assert node is not None
        held = own(facts)
        if has(decision, FenceAction):
            rule = rule_of(policy)
        else:
            assert held is not None
            assert exact(node.out_of_service_taint, held)
            rule = governing_rule(policy, decision, facts, held)
        for action in purges:
            # The generated list may hold the same pod identity on two nodes (a stale read):
            # the action must be for the one on this node.
            (pod,) = [
                p
                for p in facts.pods
                if (p.namespace, p.name, p.uid) == (action.namespace, action.name, action.uid)
                and p.node_name == node.name
            ][:1]
            assert pod.node_name == node.name == action.node
            assert set(action.strip_finalizers) <= set(pod.finalizers)
            assert set(action.strip_finalizers) <= set(rule.purge.strip_finalizers)
        assert decision.node_confirmed_down
        assert facts.clock == API_SERVER_CLOCK
        assert node.ready is None or node.ready.status != "True"
        silence = server_silence(facts)
        if facts.lease is None:
            assert rule.fence_without_lease
        else:
            assert silence is not None
            assert silence >= timedelta(seconds=rule.lease_staleness_seconds)


# --- S11 -------------------------------------------------------------------------------------


@pytest.mark.invariant("S11")
@PROFILE
@given(cases, skews, st.data())
def test_s11_no_fence_unless_silent_long_enough_on_the_server_clock(
    case: Case, skew: int, data: st.DataObject
) -> None:
    """The API server saw the Lease renewed within the staleness window, or less long ago than
    the NotReady duration: whatever the kubelet's clock says (its renewTime and Ready timestamps
    shifted by ten minutes or more), no slot is claimed, nothing is fenced or purged, and the
    node is not taken for down."""
    event, facts, policy, approval = case
    rule = rule_of(policy)
    quiet = max(rule.lease_staleness_seconds, rule.min_not_ready_seconds)
    server = ago(data.draw(st.integers(-60, quiet - 1)))
    lease = LeaseFacts(renew_time=shifted(server, skew), holder=NODE, server_renewed=server)
    node = facts.node
    if node is not None and node.ready is not None:
        ready = replace(
            node.ready,
            last_transition=shifted(node.ready.last_transition, skew),
            last_heartbeat=shifted(node.ready.last_heartbeat, skew),
        )
        node = replace(node, ready=ready)
    skewed = replace(facts, node=node, lease=lease)
    for decision in all_decisions(event, skewed, policy, approval):
        assert not has(decision, ClaimAction, FenceAction)
        if server > ago(rule.lease_staleness_seconds):
            assert not has(decision, PurgePodAction)
            assert not decision.node_confirmed_down


@pytest.mark.invariant("S11")
@PROFILE
@given(cases, st.one_of(st.none(), skews))
def test_s11_the_kubelets_renew_time_never_changes_a_decision(case: Case, skew: int | None) -> None:
    """renewTime is the kubelet's clock: any other value of it (or none) leaves the verdict and
    the actions exactly as they were."""
    event, facts, policy, approval = case
    if facts.lease is None:
        return
    stamped = facts.lease.server_renewed or NOW
    renewed = None if skew is None else shifted(stamped, skew)
    other = replace(facts, lease=replace(facts.lease, renew_time=renewed))
    for first, second in zip(
        all_decisions(event, facts, policy, approval),
        all_decisions(event, other, policy, approval),
        strict=True,
    ):
        assert (first.verdict, first.actions) == (second.verdict, second.actions)


@pytest.mark.invariant("S11")
@PROFILE
@given(cases)
def test_s11_on_any_other_clock_nothing_is_fenced_unfenced_purged_or_rolled_back(
    case: Case,
) -> None:
    """Without the API server's clock, liveness cannot be judged, and neither can a claim's
    age: nothing is claimed, fenced, unfenced or purged, and no claim is rolled back."""
    event, facts, policy, approval = case
    local = replace(facts, clock=LOCAL_CLOCK)
    for decision in all_decisions(event, local, policy, approval):
        assert not has(decision, ClaimAction, FenceAction, UnfenceAction, PurgePodAction)
        assert not has(decision, ObserveReadyAction)
        for action in decision.actions:
            assert isinstance(action, ReleaseAction | ConfirmAction)
            if isinstance(action, ReleaseAction) and action.claimed_by:
                # A claim is let go only for reasons that need no clock: its node is gone or
                # re-created, someone else's taint is on it, or a person stopped the fence.
                held, node = facts.record.entry(NODE), facts.node
                assert held is not None
                assert (
                    stopped(facts, policy)
                    or node is None
                    or held.uid != node.uid
                    # Whose taint it is has its own properties (test_engine_races); here only
                    # that the reason is one that needs no clock.
                    or (
                        node.out_of_service_taint is not None
                        and not taint_authorship(node, held).ours
                    )
                )


# --- S8, S9, S7 --------------------------------------------------------------------------------


@pytest.mark.invariant("S8")
@PROFILE
@given(cases)
def test_s8_dry_run_flag_and_determinism(case: Case) -> None:
    event, facts, policy, approval = case
    first = all_decisions(event, facts, policy, approval)
    assert first == all_decisions(event, facts, policy, approval)
    for decision in first:
        assert decision.dry_run == policy.dry_run
        assert decision.reasons
        if policy.dry_run:
            assert any(r.guard == "dry-run" for r in decision.reasons)
    assert (first[0].alertname, first[0].fingerprint, first[0].status) == (
        event.alertname,
        event.fingerprint,
        event.status.value,
    )


@pytest.mark.invariant("S9")
@PROFILE
@given(cases)
def test_s9_a_recreated_node_inherits_nothing(case: Case) -> None:
    """The node object was re-created (a UID nothing in the record knows): the old entry is
    only let go, and otherwise the decision is the one for a record that never knew the name."""
    event, facts, policy, approval = case
    if facts.node is None:
        return
    recreated = replace(facts, node=replace(facts.node, uid="uid-new"))
    old = facts.record.entry(NODE)
    forgotten = replace(
        recreated,
        record=replace(
            facts.record,
            entries=tuple(e for e in facts.record.entries if e.node != NODE),
            released=tuple(r for r in facts.record.released if r.node != NODE),
        ),
    )
    for new, never in zip(
        all_decisions(event, recreated, policy, approval),
        all_decisions(event, forgotten, policy, approval),
        strict=True,
    ):
        assert not has(new, UnfenceAction, ObserveReadyAction)
        # Purges and confirms only as part of a fence of the new node object, never as the
        # continuation of the old one's.
        assert has(new, FenceAction) or not has(new, PurgePodAction, ConfirmAction)
        assert all(a.claimed_by == "" for a in new.actions if isinstance(a, ConfirmAction))
        if old is not None and new.actions:
            (release,) = new.actions
            assert isinstance(release, ReleaseAction)
            assert release.node_uid == old.uid
        if old is None:
            assert (new.verdict, new.actions) == (never.verdict, never.actions)


def apply(facts: Facts, decision: Decision) -> Facts:
    """What the executor leaves behind, each write with its precondition: the record changed
    on the version read (claims) or for the entry decided on, the node on its resourceVersion."""
    node, pods, record = facts.node, facts.pods, facts.record
    assert node is not None
    for action in decision.actions:
        found = record.entry(NODE)
        target = getattr(action, "node_uid", None)
        held = found if found is not None and found.uid == target else None
        if isinstance(action, ClaimAction):
            if action.record_version != record.resource_version:
                break
            claim = replace(action.entry, claimed_by=TOKEN)
            record = fence_record.with_entry(record, claim)
        elif isinstance(action, FenceAction):
            if action.resource_version != node.resource_version:
                break
            taint = Taint(OUT_OF_SERVICE_KEY, action.effect, OUT_OF_SERVICE_VALUE)
            node = replace(node, taints=(*node.taints, taint))
        elif isinstance(action, ConfirmAction):
            if held is None or held.claimed_by != (action.claimed_by or TOKEN):
                break
            done = replace(held, phase=Phase.FENCED, fenced_at=NOW)
            record = fence_record.with_entry(record, done)
        elif isinstance(action, PurgePodAction):
            pods = tuple(p for p in pods if p.uid != action.uid)
        elif isinstance(action, UnfenceAction):
            if action.resource_version != node.resource_version:
                break
            ours = Taint(OUT_OF_SERVICE_KEY, action.effect, OUT_OF_SERVICE_VALUE)
            node = replace(node, taints=tuple(t for t in node.taints if t != ours))
        elif isinstance(action, ReleaseAction):
            if held is None or action.claimed_by not in ("", held.claimed_by):
                continue
            record = fence_record.without_entry(
                record, NODE, held.uid, at=NOW, why=action.why, remember=action.remember
            )
        elif isinstance(action, ObserveReadyAction) and held is not None:
            seen = replace(held, ready_seen_at=NOW, ready_transition=action.ready_transition)
            record = fence_record.with_entry(record, seen)
        if isinstance(action, FenceAction | UnfenceAction):
            node = replace(node, resource_version=node.resource_version + "1")
        if isinstance(action, ClaimAction | ConfirmAction | ReleaseAction | ObserveReadyAction):
            record = replace(record, resource_version=record.resource_version + "1")
    return dataclasses.replace(facts, node=node, pods=pods, record=record)


@pytest.mark.invariant("S7")
@PROFILE
@given(cases)
def test_s7_repeated_delivery_fences_or_unfences_at_most_once_and_settles(case: Case) -> None:
    """The same delivery again and again, each decision executed before the next: at most one
    fence and at most one unfence, and it settles on a decision with nothing left to do."""
    event, facts, policy, approval = case
    if facts.node is None:
        return
    fences = unfences = 0
    for _ in range(8):
        decision = decide(event, facts, policy, NOW, approval=approval)
        fences += has(decision, FenceAction)
        unfences += has(decision, UnfenceAction)
        if not decision.actions:
            break
        facts = apply(facts, decision)
    else:
        raise AssertionError(f"still acting after 8 deliveries: {decision.actions}")
    assert fences <= 1
    assert unfences <= 1
    assert fences + unfences <= 1
