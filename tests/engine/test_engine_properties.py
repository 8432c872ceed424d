"""Property tests: the safety invariants hold for any facts, alert, policy and kubelet clock.

``NOW`` is the API server's clock. Everything a node's own credentials can write is generated
freely: its annotations (forged ``nodefence.io/*`` mirror keys included), its Ready condition's
timestamps and its Lease's ``renewTime`` (a kubelet clock minutes off either way). The fence
record and the API server's managedFields stamp on the Lease are the only authority.
"""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from engine_factories import LOCAL_CLOCK, NODE, NOW, ago, our_taint
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodefence.engine import mirror
from nodefence.engine import record as fence_record
from nodefence.engine.alerts import match_rule, selector_matches
from nodefence.engine.authorship import taint_authorship
from nodefence.engine.decide import decide, decide_reconcile
from nodefence.engine.model import (
    API_SERVER_CLOCK,
    CONTROL_PLANE_LABELS,
    EXCLUDE_LABEL,
    OUT_OF_SERVICE_KEY,
    OUT_OF_SERVICE_VALUE,
    PREFIX,
    AlertEvent,
    AlertStatus,
    Approval,
    ApprovalDecision,
    ClaimAction,
    ClusterFacts,
    Condition,
    ConfirmAction,
    Decision,
    Facts,
    FenceAction,
    LeaseFacts,
    NodeFacts,
    ObserveReadyAction,
    PodFacts,
    PurgePodAction,
    ReleaseAction,
    Taint,
    UnfenceAction,
    Verdict,
)
from nodefence.engine.record import FenceEntry, FenceRecord, Phase, Release
from nodefence.policy import Policy, Rule, parse_policy

PROFILE = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
UIDS = ("uid-a", "uid-b")
OTHER_NODES = ("worker-2", "worker-3", "cp-2")
TOKEN = "replica-b/feedface0000"

seconds = st.integers(min_value=-120, max_value=8000)
# How far a kubelet's clock is off: ten minutes and more, either way.
skews = st.one_of(st.integers(-3600, 3600), st.sampled_from([-600, 600]))


def mostly(usual: Any, *rare: Any) -> st.SearchStrategy[Any]:
    """``usual`` nine times in ten: the generated facts then reach fences, purges and unfences
    often, instead of stopping at the first skip."""
    return st.sampled_from([usual] * (9 * max(1, len(rare))) + list(rare))


def shifted(moment: datetime | None, skew: int) -> datetime | None:
    return None if moment is None else moment - timedelta(seconds=skew)


# --- what a node can write -------------------------------------------------------------------

mirror_keys = st.one_of(
    st.sampled_from(
        [*mirror.ALL_KEYS, mirror.APPROVAL_NODE_UID, mirror.APPROVAL_FINGERPRINT, EXCLUDE_LABEL]
    ),
    st.text("abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=12).map(PREFIX.__add__),
)
mirror_values = st.one_of(
    st.sampled_from(
        [
            mirror.FENCED_BY_VALUE,
            *UIDS,
            "boot-1",
            "NoExecute",
            "NoSchedule",
            "default",
            "fp-0",
            "2026-11-30T08:00:00Z",
            "rejected by mallory at 2026-11-30T08:00:00Z",
            "approved by mallory at 2026-11-30T08:00:00Z",
            "true",
            "off",
            "",
        ]
    ),
    st.text(max_size=12),
)
forged_annotations = st.dictionaries(mirror_keys, mirror_values, max_size=8)

taints = st.builds(
    Taint,
    key=st.just(OUT_OF_SERVICE_KEY),
    effect=st.sampled_from(["NoExecute", "NoSchedule"]),
    value=mostly(OUT_OF_SERVICE_VALUE, "maintenance", ""),
)


@st.composite
def nodes(draw: st.DrawFn) -> NodeFacts:
    status = draw(st.sampled_from(["True", "False", "Unknown", None]))
    transition = draw(st.one_of(seconds.map(ago), seconds.map(ago), st.none()))
    condition = None if status is None else Condition("Ready", status, transition)
    labels: dict[str, str] = {"tier": draw(mostly("compute", "storage"))}
    if draw(st.booleans()):
        labels[CONTROL_PLANE_LABELS[0]] = ""
    if draw(mostly(False, True)):
        labels[EXCLUDE_LABEL] = "true"
    return NodeFacts(
        name=NODE,
        uid=draw(st.sampled_from(UIDS)),
        resource_version=str(draw(st.integers(1, 99))),
        labels=labels,
        annotations=draw(st.one_of(st.just({}), forged_annotations)),
        taints=(draw(taints),) if draw(st.booleans()) else (),
        ready=condition,
        boot_id=draw(st.sampled_from(["boot-1", "boot-2", ""])),
        unschedulable=draw(mostly(False, True)),
    )


@st.composite
def leases(draw: st.DrawFn) -> LeaseFacts | None:
    """A Lease the API server last saw renewed at ``server_renewed``; its ``renewTime`` from a
    kubelet clock that may be far off."""
    if draw(mostly(False, True)):
        return None
    server = draw(st.one_of(seconds.map(ago), seconds.map(ago), st.none()))
    kubelet = shifted(server or ago(draw(seconds)), draw(skews))
    return LeaseFacts(renew_time=kubelet, holder=NODE, server_renewed=server)


# --- the fence record --------------------------------------------------------------------------


def own_entry(
    uid: str,
    *,
    phase: Phase,
    claimed_at: datetime,
    effect: str = "NoExecute",
    rule: str = "default",
    boot_id: str = "boot-1",
    seen: datetime | None = None,
    transition: datetime | None = None,
) -> FenceEntry:
    return FenceEntry(
        node=NODE,
        uid=uid,
        phase=phase,
        claimed_at=claimed_at,
        rule=rule,
        alertname="KubeNodeNotReady",
        fingerprint="fp-0",
        boot_id=boot_id,
        effect=effect,
        claimed_by="replica-a/0000deadbeef",
        fenced_at=claimed_at if phase is Phase.FENCED else None,
        ready_seen_at=seen,
        ready_transition=transition,
    )


def other_entry(name: str) -> FenceEntry:
    return replace(
        own_entry(f"uid-{name}", phase=Phase.FENCED, claimed_at=ago(4000)),
        node=name,
        control_plane=name.startswith("cp-"),
    )


@st.composite
def records(draw: st.DrawFn, node: NodeFacts | None) -> FenceRecord:
    entries: list[FenceEntry] = []
    if draw(st.booleans()):
        transition = node.ready.last_transition if node and node.ready else None
        entries.append(
            own_entry(
                draw(mostly(node.uid if node else "uid-a", *UIDS)),
                phase=draw(st.sampled_from(list(Phase))),
                claimed_at=ago(draw(seconds)),
                effect=draw(mostly("NoExecute", "NoSchedule")),
                rule=draw(mostly("default", "gone")),
                boot_id=draw(st.sampled_from(["boot-1", "boot-2", ""])),
                seen=draw(st.one_of(st.none(), seconds.map(ago))),
                transition=draw(st.sampled_from([transition, None, ago(50)])),
            )
        )
    others = draw(st.lists(st.sampled_from(OTHER_NODES), max_size=2, unique=True))
    entries.extend(other_entry(name) for name in others)
    released = draw(
        st.lists(
            st.builds(Release, st.just(NODE), st.sampled_from(UIDS), seconds.map(ago)),
            max_size=1,
        )
    )
    unreadable = draw(st.sampled_from([(), (), ("fence.worker-4",)]))
    return FenceRecord(tuple(entries), tuple(released), unreadable, str(draw(st.integers(1, 9))))


pods = st.builds(
    PodFacts,
    namespace=st.sampled_from(["default", "openstack", "kube-system"]),
    name=st.sampled_from(["a", "b", "c", "d"]),
    uid=st.sampled_from(["p1", "p2", "p3"]),
    node_name=st.sampled_from([NODE, "worker-2"]),
    deletion_timestamp=st.one_of(st.none(), seconds.map(ago)),
    finalizers=st.lists(st.sampled_from(["f/a", "f/b"]), max_size=2, unique=True).map(tuple),
    owner_kind=st.sampled_from(["StatefulSet", "ReplicaSet", "DaemonSet", "Deployment", None]),
    has_pvc=st.booleans(),
)


@st.composite
def clusters(draw: st.DrawFn) -> ClusterFacts:
    total = draw(mostly(10, 0, 2, 5))
    ready = max(0, total - draw(mostly(1, 0, 2, 3, 6)))
    cp_total = draw(st.integers(0, 5))
    return ClusterFacts(
        total_nodes=total,
        ready_nodes=ready,
        control_plane_total=cp_total,
        control_plane_ready=draw(st.integers(0, cp_total)),
        schedulable_ready=draw(st.one_of(st.none(), st.integers(0, ready))),
        ready_since=tuple(draw(st.lists(seconds.map(ago), max_size=3))),
    )


@st.composite
def all_facts(draw: st.DrawFn) -> Facts:
    node = draw(nodes()) if draw(mostly(True, False)) else None
    return Facts(
        node=node,
        lease=draw(leases()),
        pods=tuple(draw(st.lists(pods, max_size=4))),
        cluster=draw(clusters()),
        record=draw(records(node)),
        clock=draw(mostly(API_SERVER_CLOCK, LOCAL_CLOCK)),
    )


@st.composite
def policies(draw: st.DrawFn, *, room: bool = False) -> Policy:
    """``room``: a budget and capacity thresholds that leave room for a fence, so that whether
    one happens turns on the facts."""
    rule: dict[str, Any] = {
        "name": "default",
        "min_not_ready_seconds": draw(st.integers(0, 3000)),
        "lease_staleness_seconds": draw(st.integers(1, 3000)),
        "healthy_delay_seconds": draw(st.integers(0, 3000)),
        "require_new_boot_id": draw(st.booleans()),
        "fence_without_lease": draw(st.booleans()),
        "taint_effect": draw(mostly("NoExecute", "NoSchedule")),
        "approval": draw(mostly("none", "slack")),
        "flap_window_seconds": draw(st.integers(0, 5000)),
        "fencing": {"driver": "none"},
        "purge": {
            "terminating": draw(mostly(True, False)),
            "non_terminating": draw(st.booleans()),
            "strip_finalizers": draw(st.lists(st.sampled_from(["f/a", "f/b"]), unique=True)),
        },
        "match": {"node_selector": draw(mostly("", "tier=compute", "!tier"))},
    }
    data = {
        "dry_run": draw(st.booleans()),
        "paused": draw(mostly(False, True)),
        "rules": [rule],
        "cluster": {
            "max_fenced_nodes": draw(st.integers(1 if room else 0, 3)),
            "min_ready_fraction": draw(
                st.sampled_from([0.0, 0.3, 0.51, 0.8, 0.95][: 4 if room else 5])
            ),
            "control_plane_quorum": draw(mostly(True, False)),
            "storm_not_ready_fraction": draw(st.sampled_from([0.1, 0.3, 0.5, 0.9, 1.0])),
            "storm_cooldown_seconds": draw(st.sampled_from([0, 600])),
            "claim_timeout_seconds": draw(st.sampled_from([30, 300, 900])),
        },
    }
    return parse_policy(data, "<generated>")


events = st.builds(
    AlertEvent,
    alertname=mostly("KubeNodeNotReady", "KubeNodeUnreachable", "Watchdog"),
    status=st.sampled_from(list(AlertStatus)),
    node=mostly(NODE, None),
    fingerprint=st.sampled_from(["fp-0", "fp-1"]),
    labels=mostly({"node": NODE}, {}),
)

approvals = st.one_of(
    st.none(),
    st.builds(
        Approval,
        user=st.just("alice"),
        at=seconds.map(ago),
        decision=st.sampled_from(list(ApprovalDecision)),
        node_uid=st.sampled_from(UIDS),
    ),
)


Case = tuple[AlertEvent, Facts, Policy, Approval | None]
DIMENSIONS = (
    "ready",
    "transition",
    "silence",
    "lease",
    "budget",
    "capacity",
    "control-plane",
    "record",
    "taint",
    "boot",
    "pods",
    "approval",
    "clock",
    "seen",
    "flap",
    "annotations",
)


def rule_of(policy: Policy) -> Rule:
    return policy.rules[0]


@st.composite
def near_cases(draw: st.DrawFn) -> Case:
    """Facts placed just either side of the policy's thresholds: a state where every guard
    allows the action (fence for a firing alert, unfence for a resolved one), with a few
    dimensions disturbed. The kubelet's clock is always off by a generated skew, which must
    never matter. Uniformly random facts almost never reach an action."""
    policy = draw(policies(room=True))
    rule = rule_of(policy)
    firing = draw(st.booleans())
    broken = draw(st.sets(st.sampled_from(DIMENSIONS), max_size=3))
    near = st.integers(-30, 900)
    skew = draw(skews)

    def after(threshold: int) -> datetime:
        return ago(threshold + draw(near))

    uid = "uid-a"
    down = draw(st.sampled_from(["Unknown", "False"]))
    status = ("True" if firing else down) if "ready" in broken else (down if firing else "True")
    window = rule.lease_staleness_seconds
    fresh = ago(draw(st.integers(-60, window - 1)))
    if firing:
        transition = None if "transition" in broken else after(rule.min_not_ready_seconds)
        silent = after(max(window, rule.min_not_ready_seconds))
        if "silence" in broken:
            # Silent past the staleness window, but maybe not for the NotReady duration.
            silent = ago(window + draw(st.integers(0, max(0, rule.min_not_ready_seconds - window))))
        server = draw(st.sampled_from([None, fresh])) if "lease" in broken else silent
    else:
        transition = (
            ago(draw(st.integers(-60, rule.healthy_delay_seconds)))
            if "transition" in broken
            else after(rule.healthy_delay_seconds)
        )
        server = after(window + 1) if "lease" in broken else fresh
    lease = LeaseFacts(renew_time=shifted(server, skew), holder=NODE, server_renewed=server)
    labels = {"tier": "compute"}
    if "control-plane" in broken or draw(st.booleans()):
        labels[CONTROL_PLANE_LABELS[0]] = ""

    seen, seen_transition = after(rule.healthy_delay_seconds), transition
    if "seen" in broken:
        seen, seen_transition = draw(
            st.sampled_from(
                [(None, None), (ago(rule.healthy_delay_seconds - 1), transition), (seen, ago(7))]
            )
        )
    fenced = own_entry(
        uid,
        phase=Phase.FENCED,
        claimed_at=ago(5000),
        effect=rule.taint_effect,
        seen=seen,
        transition=seen_transition,
    )
    entries: list[FenceEntry] = [] if firing else [fenced]
    taint: Taint | None = None if firing else our_taint(rule.taint_effect)
    if "record" in broken:
        claimed = ago(draw(st.integers(0, 2 * policy.cluster.claim_timeout_seconds)))
        kind = draw(st.sampled_from(["none", "claim", "claim", "fenced", "recreated"]))
        entries = {
            "none": [],
            # A claim whose taint never came (completed or rolled back), or whose taint is on.
            "claim": [replace(fenced, phase=Phase.CLAIMED, claimed_at=claimed)],
            "fenced": [fenced],
            "recreated": [replace(fenced, uid="uid-b")],
        }[kind]
        if firing and kind != "none" and draw(st.booleans()):
            # Already fenced: the repeated alert may only purge what is left.
            taint = our_taint(rule.taint_effect)
    if "taint" in broken:
        # None, someone else's, or nodefence's taint taken over (kubectl taint --overwrite).
        other = "NoSchedule" if rule.taint_effect == "NoExecute" else "NoExecute"
        taint = draw(
            st.sampled_from(
                [
                    None,
                    Taint(OUT_OF_SERVICE_KEY, rule.taint_effect, "maintenance"),
                    Taint(OUT_OF_SERVICE_KEY, rule.taint_effect, ""),
                    Taint(OUT_OF_SERVICE_KEY, other, OUT_OF_SERVICE_VALUE),
                ]
            )
        )
    node = NodeFacts(
        name=NODE,
        uid=uid,
        resource_version="7",
        labels=labels,
        annotations=draw(forged_annotations) if "annotations" in broken else {},
        taints=(taint,) if taint is not None else (),
        ready=Condition("Ready", status, transition),
        boot_id="boot-1" if "boot" in broken else "boot-2",
    )
    unreadable: tuple[str, ...] = ()
    if "budget" in broken:
        spent = draw(st.lists(st.sampled_from([*OTHER_NODES, "?"]), min_size=1, unique=True))
        entries.extend(other_entry(name) for name in spent if name != "?")
        # "?": a slot held by an entry nobody can read.
        unreadable = ("fence.worker-4",) if "?" in spent else ()
    if "control-plane" in broken:
        entries.append(other_entry("cp-2"))
    flap = rule.flap_window_seconds
    last = ago(draw(st.integers(0, flap)) if "flap" in broken else flap + draw(near) + 31)
    released = (Release(NODE, uid, last, "unfenced"),) if draw(st.booleans()) else ()
    record = FenceRecord(tuple(entries), released, unreadable, "5")

    pod_list = tuple(draw(st.lists(pods, max_size=4)))
    if "pods" not in broken and not firing:
        pod_list = tuple(p for p in pod_list if not p.terminating)
    total = 10
    ready_nodes = total - draw(st.integers(0, 8 if "capacity" in broken else 1))
    cluster = ClusterFacts(
        total_nodes=total,
        ready_nodes=ready_nodes,
        control_plane_total=3,
        control_plane_ready=draw(st.integers(0, 1)) if "control-plane" in broken else 3,
        schedulable_ready=draw(st.integers(0, ready_nodes)) if "capacity" in broken else None,
    )
    event = AlertEvent(
        alertname="KubeNodeNotReady",
        status=AlertStatus.FIRING if firing else AlertStatus.RESOLVED,
        node=NODE,
        fingerprint="fp-0",
    )
    approval = None
    if rule.approval == "slack":
        approval = Approval("alice", ago(60), ApprovalDecision.APPROVE, uid, "fp-0")
        approval = draw(approvals) if "approval" in broken else approval
    clock = LOCAL_CLOCK if "clock" in broken else API_SERVER_CLOCK
    facts = Facts(node, lease, pod_list, cluster, record=record, clock=clock)
    return event, facts, policy, approval


random_cases = st.tuples(events, all_facts(), policies(), approvals)
# Two in three near the thresholds, where the actions are.
cases = st.one_of(near_cases(), near_cases(), random_cases)


def all_decisions(
    event: AlertEvent, facts: Facts, policy: Policy, approval: Approval | None
) -> list[Decision]:
    return [
        decide(event, facts, policy, NOW, approval=approval),
        decide_reconcile(facts, policy, NOW, NODE),
    ]


def own(facts: Facts) -> FenceEntry | None:
    """The record's entry for this very node object."""
    node = facts.node
    held = facts.record.entry(NODE)
    return held if node is not None and held is not None and held.uid == node.uid else None


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
    event = AlertEvent(decision.alertname, AlertStatus(decision.status), NODE, "")
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
    node = facts.node
    excluded = node is not None and "true" in (
        node.labels.get(EXCLUDE_LABEL, "").lower(),
        node.annotations.get(EXCLUDE_LABEL, "").lower(),
    )
    return excluded or policy.paused or bool(facts.cluster.paused_reason)


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
            assert forged_decision.actions == ()
            assert forged_decision.verdict in {Verdict.SKIP, Verdict.NOOP}


# --- S6 ------------------------------------------------------------------------------------------


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
        known = {(p.namespace, p.name, p.uid): p for p in facts.pods}
        for action in purges:
            pod = known[(action.namespace, action.name, action.uid)]
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
