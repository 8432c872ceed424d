"""Hypothesis strategies for the engine's property tests: facts, alerts, policies and approvals.

``NOW`` is the API server's clock. Everything a node's own credentials can write is generated
freely: its annotations (forged ``nodefence.io/*`` mirror keys included), its Ready condition's
timestamps and its Lease's ``renewTime`` (a kubelet clock minutes off either way). The fence
record and the API server's managedFields stamp on the Lease are the only authority. Shared
here so that each property test module imports them from one place, not from another test.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from engine_factories import LOCAL_CLOCK, NODE, NOW, ago, our_taint
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from nodefence.engine import fallback, mirror
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
    ClusterFacts,
    Condition,
    Decision,
    Facts,
    LeaseFacts,
    NodeFacts,
    PodFacts,
    Taint,
)
from nodefence.engine.record import FenceEntry, FenceRecord, Phase, Release
from nodefence.policy import Policy, Rule, parse_policy


def examples(full: int) -> int:
    """``full`` examples under ``make test``; under ``make test-unit`` the share its Hypothesis
    profile (``unit``, tests/conftest.py) takes of Hypothesis' default 100."""
    return max(1, full * settings.default.max_examples // 100)


PROFILE = settings(
    max_examples=examples(150),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
UIDS = ("uid-a", "uid-b")
OTHER_NODES = ("worker-2", "worker-3", "cp-2")

seconds = st.integers(min_value=-120, max_value=8000)
# Strategies are built once, here, and drawn from in the composites below: one built inside a
# draw is built and validated again on every example, which cost the unit tier most of its time.
moments = seconds.map(ago)
maybe_moments = st.one_of(moments, moments, st.none())
booleans = st.booleans()
# How far a kubelet's clock is off: ten minutes and more, either way.
skews = st.one_of(st.integers(-3600, 3600), st.sampled_from([-600, 600]))


def mostly(usual: Any, *rare: Any) -> st.SearchStrategy[Any]:
    """``usual`` nine times in ten: the generated facts then reach fences, purges and unfences
    often, instead of stopping at the first skip."""
    return st.sampled_from([usual] * (9 * max(1, len(rare))) + list(rare))


def shifted(moment: datetime | None, skew: int) -> datetime | None:
    return None if moment is None else moment - timedelta(seconds=skew)


# --- what a node can write -------------------------------------------------------------------

# Where approval requests and rejections used to be kept on the node: a node can still write them,
# and they must mean nothing now that the fence record holds them (S12).
FORMER_APPROVAL_KEYS = tuple(
    PREFIX + key
    for key in (
        "approval-node-uid",
        "approval-fingerprint",
        "approval-not-ready-since",
        "approval-requested-at",
        "approval-expires-at",
        "approval-message",
    )
)

mirror_keys = st.one_of(
    st.sampled_from([*mirror.ALL_KEYS, *FORMER_APPROVAL_KEYS, EXCLUDE_LABEL]),
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

# What people write as the exclusion switch: the spellings that exclude, those that do not, and
# values nodefence does not understand (taken as an exclusion).
exclusion_values = st.one_of(
    st.sampled_from(["true", "True", "yes", "YES", "1", "false", "no", "No", "0", " 0 ", ""]),
    st.sampled_from(["maybe", "on", "off", "y", "n", "ja", "tru"]),
    st.text(max_size=8),
)

taints = st.builds(
    Taint,
    key=st.just(OUT_OF_SERVICE_KEY),
    effect=st.sampled_from(["NoExecute", "NoSchedule"]),
    value=mostly(OUT_OF_SERVICE_VALUE, "maintenance", ""),
)


ready_statuses = st.sampled_from(["True", "False", "Unknown", None])
tiers = mostly("compute", "storage")
rarely = mostly(False, True)
uids = st.sampled_from(UIDS)
resource_versions = st.integers(1, 99)
maybe_forged_annotations = st.one_of(st.just({}), forged_annotations)
boot_ids = st.sampled_from(["boot-1", "boot-2", ""])


@st.composite
def nodes(draw: st.DrawFn) -> NodeFacts:
    status = draw(ready_statuses)
    transition = draw(maybe_moments)
    condition = None if status is None else Condition("Ready", status, transition)
    labels: dict[str, str] = {"tier": draw(tiers)}
    if draw(booleans):
        labels[CONTROL_PLANE_LABELS[0]] = ""
    if draw(rarely):
        labels[EXCLUDE_LABEL] = draw(exclusion_values)
    return NodeFacts(
        name=NODE,
        uid=draw(uids),
        resource_version=str(draw(resource_versions)),
        labels=labels,
        annotations=draw(maybe_forged_annotations),
        taints=(draw(taints),) if draw(booleans) else (),
        ready=condition,
        boot_id=draw(boot_ids),
        unschedulable=draw(rarely),
    )


@st.composite
def leases(draw: st.DrawFn) -> LeaseFacts | None:
    """A Lease the API server last saw renewed at ``server_renewed``; its ``renewTime`` from a
    kubelet clock that may be far off."""
    if draw(rarely):
        return None
    server = draw(maybe_moments)
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


entry_uids = {uid: mostly(uid, *UIDS) for uid in UIDS}
phases = st.sampled_from(list(Phase))
effects = mostly("NoExecute", "NoSchedule")
rule_names = mostly("default", "gone")
moments_or_none = st.one_of(st.none(), moments)
other_names = st.lists(st.sampled_from(OTHER_NODES), max_size=2, unique=True)
releases = st.lists(st.builds(Release, st.just(NODE), uids, moments), max_size=1)
unreadables = st.sampled_from([(), (), ("fence.worker-4",)])
record_versions = st.integers(1, 9)


@st.composite
def records(draw: st.DrawFn, node: NodeFacts | None) -> FenceRecord:
    entries: list[FenceEntry] = []
    if draw(booleans):
        transition = node.ready.last_transition if node and node.ready else None
        entries.append(
            own_entry(
                draw(entry_uids[node.uid if node else "uid-a"]),
                phase=draw(phases),
                claimed_at=ago(draw(seconds)),
                effect=draw(effects),
                rule=draw(rule_names),
                boot_id=draw(boot_ids),
                seen=draw(moments_or_none),
                transition=draw(st.sampled_from([transition, None, ago(50)])),
            )
        )
    others = draw(other_names)
    entries.extend(other_entry(name) for name in others)
    released = draw(releases)
    unreadable = draw(unreadables)
    return FenceRecord(tuple(entries), tuple(released), unreadable, str(draw(record_versions)))


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


totals = mostly(10, 0, 2, 5)
not_ready_counts = mostly(1, 0, 2, 3, 6)
# Every count a draw below may bound another by: the strategies for 0..n, built once.
up_to = [st.integers(0, n) for n in range(11)]
maybe_up_to = [st.one_of(st.none(), up_to[n]) for n in range(11)]
ready_sinces = st.lists(moments, max_size=3)


@st.composite
def clusters(draw: st.DrawFn) -> ClusterFacts:
    total = draw(totals)
    ready = max(0, total - draw(not_ready_counts))
    cp_total = draw(up_to[5])
    return ClusterFacts(
        total_nodes=total,
        ready_nodes=ready,
        control_plane_total=cp_total,
        control_plane_ready=draw(up_to[cp_total]),
        schedulable_ready=draw(maybe_up_to[ready]),
        ready_since=tuple(draw(ready_sinces)),
    )


usually = mostly(True, False)
node_facts, lease_facts, cluster_facts = nodes(), leases(), clusters()
pod_lists = st.lists(pods, max_size=4)
clocks = mostly(API_SERVER_CLOCK, LOCAL_CLOCK)


@st.composite
def all_facts(draw: st.DrawFn) -> Facts:
    node = draw(node_facts) if draw(usually) else None
    return Facts(
        node=node,
        lease=draw(lease_facts),
        pods=tuple(draw(pod_lists)),
        cluster=draw(cluster_facts),
        record=draw(records(node)),
        clock=draw(clocks),
    )


approval_modes = mostly("none", "slack")
selectors = mostly("", "tier=compute", "!tier")
finalizer_lists = st.lists(st.sampled_from(["f/a", "f/b"]), unique=True)
budgets = {False: st.integers(0, 3), True: st.integers(1, 3)}
ready_fractions = {
    room: st.sampled_from([0.0, 0.3, 0.51, 0.8, 0.95][: 4 if room else 5]) for room in (False, True)
}
storm_fractions = st.sampled_from([0.1, 0.3, 0.5, 0.9, 1.0])
storm_cooldowns = st.sampled_from([0, 600])
claim_timeouts = st.sampled_from([30, 300, 900])


@st.composite
def policies(draw: st.DrawFn, *, room: bool = False) -> Policy:
    """``room``: a budget and capacity thresholds that leave room for a fence, so that whether
    one happens turns on the facts."""
    rule: dict[str, Any] = {
        "name": "default",
        "min_not_ready_seconds": draw(st.integers(0, 3000)),
        "lease_staleness_seconds": draw(st.integers(1, 3000)),
        "healthy_delay_seconds": draw(st.integers(0, 3000)),
        "require_new_boot_id": draw(booleans),
        "fence_without_lease": draw(booleans),
        "taint_effect": draw(effects),
        "approval": draw(approval_modes),
        "flap_window_seconds": draw(st.integers(0, 5000)),
        "fencing": {"driver": "none"},
        "purge": {
            "terminating": draw(usually),
            "non_terminating": draw(booleans),
            "strip_finalizers": draw(finalizer_lists),
        },
        "match": {"node_selector": draw(selectors)},
    }
    data = {
        "dry_run": draw(booleans),
        "paused": draw(rarely),
        "rules": [rule],
        "cluster": {
            "max_fenced_nodes": draw(budgets[room]),
            "min_ready_fraction": draw(ready_fractions[room]),
            "control_plane_quorum": draw(usually),
            "storm_not_ready_fraction": draw(storm_fractions),
            "storm_cooldown_seconds": draw(storm_cooldowns),
            "claim_timeout_seconds": draw(claim_timeouts),
        },
    }
    return parse_policy(data, "<generated>")


FALLBACK_WHY = (
    "no alert arrived: Alertmanager holds no alert for it, firing, silenced or inhibited; the "
    "node has been NotReady since 2026-11-30T08:00:00Z, so it is judged as if its alert had fired"
)


def fallback_event(fingerprint: str, since: datetime | None = None) -> AlertEvent:
    """What the reconcile pass, the node watch or a wake-up judges a NotReady node on when no
    alert arrived (``since``: when it turned NotReady, which the wait for an alert counts from;
    None: not known, no wait)."""
    return AlertEvent(
        fallback.ALERTNAME,
        AlertStatus.FIRING,
        NODE,
        fingerprint,
        starts_at=since,
        fallback=FALLBACK_WHY,
    )


events = st.one_of(
    st.builds(
        AlertEvent,
        alertname=mostly("KubeNodeNotReady", "KubeNodeUnreachable", "Watchdog"),
        status=st.sampled_from(list(AlertStatus)),
        node=mostly(NODE, None),
        fingerprint=st.sampled_from(["fp-0", "fp-1"]),
        labels=mostly({"node": NODE}, {}),
    ),
    st.builds(
        fallback_event,
        st.sampled_from(["fp-0", "fp-1"]),
        st.one_of(st.none(), seconds.map(ago)),
    ),
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


broken_dimensions = st.sets(st.sampled_from(DIMENSIONS), max_size=3)
down_statuses = st.sampled_from(["Unknown", "False"])
record_kinds = st.sampled_from(["none", "claim", "claim", "fenced", "recreated"])
spent_slots = st.lists(st.sampled_from([*OTHER_NODES, "?"]), min_size=1, unique=True)


@st.composite
def near_cases(draw: st.DrawFn) -> Case:
    """Facts placed just either side of the policy's thresholds: a state where every guard
    allows the action (fence for a firing alert, unfence for a resolved one), with a few
    dimensions disturbed. The kubelet's clock is always off by a generated skew, which must
    never matter. Uniformly random facts almost never reach an action."""
    policy = draw(policies(room=True))
    rule = rule_of(policy)
    firing = draw(booleans)
    broken = draw(broken_dimensions)
    near = st.integers(-30, 900)
    skew = draw(skews)

    def after(threshold: int) -> datetime:
        return ago(threshold + draw(near))

    uid = "uid-a"
    down = draw(down_statuses)
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
    if "control-plane" in broken or draw(booleans):
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
        kind = draw(record_kinds)
        entries = {
            "none": [],
            # A claim whose taint never came (completed or rolled back), or whose taint is on.
            "claim": [replace(fenced, phase=Phase.CLAIMED, claimed_at=claimed)],
            "fenced": [fenced],
            "recreated": [replace(fenced, uid="uid-b")],
        }[kind]
        if firing and kind != "none" and draw(booleans):
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
        spent = draw(spent_slots)
        entries.extend(other_entry(name) for name in spent if name != "?")
        # "?": a slot held by an entry nobody can read.
        unreadable = ("fence.worker-4",) if "?" in spent else ()
    if "control-plane" in broken:
        entries.append(other_entry("cp-2"))
    flap = rule.flap_window_seconds
    last = ago(draw(st.integers(0, flap)) if "flap" in broken else flap + draw(near) + 31)
    released = (Release(NODE, uid, last, "unfenced"),) if draw(booleans) else ()
    record = FenceRecord(tuple(entries), released, unreadable, "5")

    pod_list = tuple(draw(pod_lists))
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
    if firing and draw(st.integers(0, 3)) == 0:
        # No alert arrived: the same facts, judged by the fallback, on every guard.
        event = fallback_event("fp-0")
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
