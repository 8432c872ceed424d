"""Property tests: the safety invariants hold for any facts, alert, policy and time."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from engine_factories import NODE, NOW, ago, our_taint
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodefence.engine import ledger
from nodefence.engine.decide import decide, decide_reconcile
from nodefence.engine.labels import parse_selector
from nodefence.engine.model import (
    CONTROL_PLANE_LABELS,
    EXCLUDE_LABEL,
    AlertEvent,
    AlertStatus,
    Approval,
    ApprovalDecision,
    ClusterFacts,
    Condition,
    Decision,
    Facts,
    FenceAction,
    LeaseFacts,
    Ledger,
    NodeFacts,
    PodFacts,
    PurgePodAction,
    UnfenceAction,
    Verdict,
)
from nodefence.policy import Policy, Rule, parse_policy

PROFILE = settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
UIDS = ("uid-a", "uid-b")
OTHER_NODES = ("worker-2", "worker-3", "cp-2")

seconds = st.integers(min_value=-120, max_value=8000)


def mostly(usual: Any, *rare: Any) -> st.SearchStrategy[Any]:
    """``usual`` nine times in ten: the generated facts then reach fences, purges and unfences
    often, instead of stopping at the first skip."""
    return st.sampled_from([usual] * (9 * max(1, len(rare))) + list(rare))


@st.composite
def ledgers(draw: st.DrawFn, node_uid: str) -> dict[str, str]:
    """Annotations as an executor would have left them, or hand-edited leftovers."""
    kind = draw(st.sampled_from(["none", "fenced", "fenced", "unfenced", "garbage"]))
    uid = draw(mostly(node_uid, *(u for u in UIDS if u != node_uid)))
    if kind == "none":
        return {}
    if kind == "garbage":
        return {ledger.FENCED_BY: "x", ledger.FENCED_AT: "not a time", ledger.UNFENCED_AT: "?"}
    if kind == "unfenced":
        changes = ledger.unfence_annotations(ago(draw(seconds)))
        return {ledger.NODE_UID: uid, **{k: v for k, v in changes.items() if v is not None}}
    fake = NodeFacts(NODE, uid, "1", boot_id=draw(st.sampled_from(["boot-1", "boot-2", ""])))
    event = AlertEvent("KubeNodeNotReady", AlertStatus.FIRING, NODE, "fp-0")
    rule = draw(mostly("default", "gone"))
    return ledger.fence_annotations(fake, event, ago(draw(seconds)), "NoExecute", rule=rule)


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
    uid = draw(st.sampled_from(UIDS))
    annotations = draw(ledgers(uid))
    has_ledger = ledger.FENCED_BY in annotations
    # Our taint goes mostly with our ledger, an administrator's sometimes without one.
    tainted = draw(mostly(has_ledger, not has_ledger))
    return NodeFacts(
        name=NODE,
        uid=uid,
        resource_version=str(draw(st.integers(1, 99))),
        labels=labels,
        annotations=annotations,
        taints=(our_taint(),) if tainted else (),
        ready=condition,
        boot_id=draw(st.sampled_from(["boot-1", "boot-2", ""])),
        ledger=ledger.parse_ledger(annotations) if draw(st.booleans()) else Ledger(),
    )


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
    not_ready = draw(mostly(1, 0, 2, 3, 6))
    cp_total = draw(st.integers(0, 5))
    fenced = draw(st.lists(st.sampled_from((NODE, *OTHER_NODES)), max_size=2, unique=True))
    return ClusterFacts(
        total_nodes=total,
        ready_nodes=max(0, total - not_ready),
        control_plane_total=cp_total,
        control_plane_ready=draw(st.integers(0, cp_total)),
        fenced_by_us=tuple(fenced),
        fenced_control_plane=tuple(n for n in fenced if n == "cp-2" or draw(st.booleans())),
    )


@st.composite
def all_facts(draw: st.DrawFn) -> Facts:
    renew = draw(st.one_of(seconds.map(ago), seconds.map(ago), st.none()))
    return Facts(
        node=(draw(mostly(True, False)) and draw(nodes())) or None,
        lease=draw(st.sampled_from([LeaseFacts(renew_time=renew), LeaseFacts(renew), None])),
        pods=tuple(draw(st.lists(pods, max_size=4))),
        cluster=draw(clusters()),
    )


@st.composite
def policies(draw: st.DrawFn) -> Policy:
    rule: dict[str, Any] = {
        "name": "default",
        "min_not_ready_seconds": draw(st.integers(0, 3000)),
        "lease_staleness_seconds": draw(st.integers(1, 3000)),
        "healthy_delay_seconds": draw(st.integers(0, 3000)),
        "require_new_boot_id": draw(st.booleans()),
        "fence_without_lease": draw(st.booleans()),
        "approval": draw(mostly("none", "slack")),
        "flap_window_seconds": draw(st.integers(0, 5000)),
        "purge": {
            "terminating": draw(mostly(True, False)),
            "non_terminating": draw(st.booleans()),
            "strip_finalizers": draw(st.lists(st.sampled_from(["f/a", "f/b"]), unique=True)),
        },
    }
    rule["match"] = {"node_selector": draw(mostly("", "tier=compute", "!tier"))}
    data = {
        "dry_run": draw(st.booleans()),
        "paused": draw(mostly(False, True)),
        "rules": [rule],
        "cluster": {
            "max_fenced_nodes": draw(st.integers(0, 3)),
            "min_ready_fraction": draw(st.sampled_from([0.0, 0.3, 0.51, 0.8, 0.95])),
            "control_plane_quorum": draw(mostly(True, False)),
            "storm_not_ready_fraction": draw(st.sampled_from([0.1, 0.3, 0.5, 0.9, 1.0])),
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
    "lease",
    "budget",
    "capacity",
    "control-plane",
    "ledger",
    "taint",
    "boot",
    "pods",
    "approval",
)


@st.composite
def near_cases(draw: st.DrawFn) -> Case:
    """Facts placed just either side of the policy's thresholds: a state where every guard
    allows the action (fence for a firing alert, unfence for a resolved one), with a few
    dimensions disturbed. Uniformly random facts almost never reach an action."""
    policy = draw(policies())
    rule = rule_of(policy)
    firing = draw(st.booleans())
    broken = draw(st.sets(st.sampled_from(DIMENSIONS), max_size=3))
    near = st.integers(-30, 900)

    def after(threshold: int) -> datetime:
        return ago(threshold + draw(near))

    uid = "uid-a"
    if "ready" in broken:
        status = "True" if firing else draw(st.sampled_from(["Unknown", "False"]))
    else:
        status = draw(st.sampled_from(["Unknown", "False"])) if firing else "True"
    wait = rule.min_not_ready_seconds if firing else rule.healthy_delay_seconds
    transition = None if "transition" in broken else after(wait)
    if firing:
        renew = None if "lease" in broken else after(rule.lease_staleness_seconds)
    else:
        fresh = ago(draw(st.integers(-rule.lease_staleness_seconds, rule.lease_staleness_seconds)))
        renew = after(rule.lease_staleness_seconds) if "lease" in broken else fresh
    boot = "boot-1" if "boot" in broken else "boot-2"
    labels = {"tier": "compute"}
    if "control-plane" in broken or draw(st.booleans()):
        labels[CONTROL_PLANE_LABELS[0]] = ""
    fenced_notes = ledger.fence_annotations(
        NodeFacts(NODE, uid, "1", boot_id="boot-1"),
        AlertEvent("KubeNodeNotReady", AlertStatus.FIRING, NODE, "fp-0"),
        ago(4000),
        "NoExecute",
        rule="default",
    )
    ledger_uid = draw(st.sampled_from(UIDS)) if "ledger" in broken else uid
    if firing:
        notes = draw(ledgers(ledger_uid)) if "ledger" in broken else {}
    else:
        notes = {**fenced_notes, ledger.NODE_UID: ledger_uid}
    tainted = ("taint" in broken) == firing
    if firing and "ledger" in broken and draw(st.booleans()):
        # Already fenced: the repeated alert may only purge what is left.
        notes, tainted = {**fenced_notes, ledger.NODE_UID: ledger_uid}, True
    node = NodeFacts(
        name=NODE,
        uid=uid,
        resource_version="7",
        labels=labels,
        annotations=notes,
        taints=(our_taint(),) if tainted else (),
        ready=Condition("Ready", status, transition),
        boot_id=boot,
        ledger=ledger.parse_ledger(notes),
    )
    pod_list = tuple(draw(st.lists(pods, max_size=4)))
    if "pods" not in broken and not firing:
        pod_list = tuple(p for p in pod_list if not p.terminating)
    total = 10
    cluster = ClusterFacts(
        total_nodes=total,
        ready_nodes=total - draw(st.integers(0, 8 if "capacity" in broken else 1)),
        control_plane_total=3,
        control_plane_ready=draw(st.integers(0, 1)) if "control-plane" in broken else 3,
        fenced_by_us=tuple(
            draw(st.lists(st.sampled_from(OTHER_NODES), unique=True)) if "budget" in broken else ()
        ),
        fenced_control_plane=("cp-2",) if "control-plane" in broken else (),
    )
    event = AlertEvent(
        alertname="KubeNodeNotReady",
        status=AlertStatus.FIRING if firing else AlertStatus.RESOLVED,
        node=NODE,
        fingerprint="fp-0",
    )
    approval = None
    if rule.approval == "slack":
        approval = Approval(
            user="alice",
            at=ago(60),
            decision=ApprovalDecision.APPROVE,
            node_uid=uid,
            fingerprint="fp-0",
        )
        approval = draw(approvals) if "approval" in broken else approval
    facts = Facts(node, LeaseFacts(renew_time=renew), pod_list, cluster)
    return event, facts, policy, approval


random_cases = st.tuples(events, all_facts(), policies(), approvals)
cases = st.one_of(near_cases(), random_cases)


def all_decisions(
    event: AlertEvent, facts: Facts, policy: Policy, approval: Approval | None
) -> list[Decision]:
    return [
        decide(event, facts, policy, NOW, approval=approval),
        decide_reconcile(facts, policy, NOW),
    ]


def own_ledger(node: NodeFacts) -> Ledger:
    raw = node.ledger if node.ledger != Ledger() else ledger.parse_ledger(node.annotations)
    return raw if raw.node_uid == node.uid else Ledger()


def lease_age(facts: Facts) -> timedelta | None:
    if facts.lease is None or facts.lease.renew_time is None:
        return None
    return NOW - facts.lease.renew_time


def rule_of(policy: Policy) -> Rule:
    return policy.rules[0]


def governing_rule(policy: Policy, node: NodeFacts) -> Rule:
    """The rule a fenced node is handled by: the one named in its ledger, else the matching one,
    else the built-in defaults."""
    named = policy.rule_named(own_ledger(node).rule)
    if named is not None:
        return named
    first = rule_of(policy)
    return first if parse_selector(first.match.node_selector).matches(node.labels) else Rule()


@PROFILE
@given(cases)
def test_s1_s2_s3_no_fence_unless_every_guard_allows(
    case: Case,
) -> None:
    event, facts, policy, approval = case
    for decision in all_decisions(event, facts, policy, approval):
        if not any(isinstance(a, FenceAction) for a in decision.actions):
            continue
        node, cluster = facts.node, facts.cluster
        assert node is not None
        rule = rule_of(policy)
        # S1
        assert node.ready is None or node.ready.status != "True"
        # S2
        age = lease_age(facts)
        if age is None:
            assert rule.fence_without_lease
        else:
            assert age >= timedelta(seconds=rule.lease_staleness_seconds)
        # S3: budget and capacity
        assert len(set(cluster.fenced_by_us) - {node.name}) < policy.cluster.max_fenced_nodes
        assert cluster.total_nodes > 0
        assert cluster.ready_nodes / cluster.total_nodes >= policy.cluster.min_ready_fraction
        not_ready = cluster.total_nodes - cluster.ready_nodes
        assert not_ready / cluster.total_nodes <= policy.cluster.storm_not_ready_fraction
        # Control-plane quorum
        if node.is_control_plane and policy.cluster.control_plane_quorum:
            assert not set(cluster.fenced_control_plane) - {node.name}
            assert cluster.control_plane_ready * 2 > cluster.control_plane_total
        # Minimum NotReady duration and no foreign taint
        assert node.ready is not None
        assert node.ready.last_transition is not None
        assert NOW - node.ready.last_transition >= timedelta(seconds=rule.min_not_ready_seconds)
        assert node.out_of_service_taint is None or own_ledger(node).fenced
        assert not policy.paused
        assert decision.verdict == Verdict.FENCE


@PROFILE
@given(cases)
def test_s4_s5_unfence_only_own_taint_after_healthy_delay(
    case: Case,
) -> None:
    event, facts, policy, approval = case
    for decision in all_decisions(event, facts, policy, approval):
        unfences = [a for a in decision.actions if isinstance(a, UnfenceAction)]
        if not unfences:
            continue
        node = facts.node
        assert node is not None
        own = own_ledger(node)
        # S4 / S9: the ledger says nodefence fenced this very node object.
        assert own.fenced
        assert own.node_uid == node.uid
        assert unfences[0].node_uid == node.uid
        # S5
        rule = governing_rule(policy, node)
        assert node.ready is not None
        assert node.ready.status == "True"
        assert node.ready.last_transition is not None
        assert NOW - node.ready.last_transition >= timedelta(seconds=rule.healthy_delay_seconds)
        if rule.require_new_boot_id:
            assert node.boot_id
            assert node.boot_id != own.boot_id
        assert not any(p.terminating and p.node_name == node.name for p in facts.pods)
        # A firing alert never releases a node.
        assert decision.status != AlertStatus.FIRING.value


@PROFILE
@given(cases)
def test_s6_purge_only_pods_of_this_node_and_only_while_it_is_down(
    case: Case,
) -> None:
    event, facts, policy, approval = case
    for decision in all_decisions(event, facts, policy, approval):
        purges = [a for a in decision.actions if isinstance(a, PurgePodAction)]
        if not purges:
            continue
        node = facts.node
        assert node is not None
        rule = (
            rule_of(policy) if decision.verdict == Verdict.FENCE else governing_rule(policy, node)
        )
        known = {(p.namespace, p.name, p.uid): p for p in facts.pods}
        for action in purges:
            pod = known[(action.namespace, action.name, action.uid)]
            assert pod.node_name == node.name == action.node
            assert set(action.strip_finalizers) <= set(pod.finalizers)
            assert set(action.strip_finalizers) <= set(rule.purge.strip_finalizers)
        assert node.ready is None or node.ready.status != "True"
        age = lease_age(facts)
        if age is None:
            assert rule.fence_without_lease
        else:
            assert age >= timedelta(seconds=rule.lease_staleness_seconds)


@PROFILE
@given(cases)
def test_s8_dry_run_flag_and_determinism(
    case: Case,
) -> None:
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
@given(cases, st.sampled_from(["uid-new", "uid-other"]))
def test_s9_ledger_of_another_uid_is_inherited_by_nothing(case: Case, new_uid: str) -> None:
    event, facts, policy, approval = case
    if facts.node is None:
        return
    recreated = replace(facts, node=replace(facts.node, uid=new_uid))
    forgotten = replace(
        recreated,
        node=replace(
            recreated.node,  # type: ignore[arg-type]
            annotations={},
            ledger=Ledger(),
        ),
    )
    for old, fresh in zip(
        all_decisions(event, recreated, policy, approval),
        all_decisions(event, forgotten, policy, approval),
        strict=True,
    ):
        assert old.verdict not in {Verdict.UNFENCE, Verdict.PURGE}
        assert not any(isinstance(a, UnfenceAction) for a in old.actions)
        assert (old.verdict, old.actions) == (fresh.verdict, fresh.actions)


def apply(facts: Facts, decision: Decision) -> Facts:
    """What the executor leaves behind: the taint and ledger written, purged pods gone."""
    node = facts.node
    assert node is not None
    pods = facts.pods
    cluster = facts.cluster
    for action in decision.actions:
        if isinstance(action, FenceAction):
            notes = {**node.annotations, **action.annotations}
            node = replace(
                node,
                annotations=notes,
                ledger=ledger.parse_ledger(notes),
                taints=(*node.taints, our_taint(action.effect)),
                resource_version=node.resource_version + "1",
            )
            cluster = replace(cluster, fenced_by_us=(*cluster.fenced_by_us, node.name))
        elif isinstance(action, PurgePodAction):
            pods = tuple(
                p for p in pods if (p.namespace, p.name) != (action.namespace, action.name)
            )
        else:
            notes = {
                k: v for k, v in node.annotations.items() if k not in action.remove_annotations
            }
            notes.update(action.annotations)
            node = replace(
                node,
                annotations=notes,
                ledger=ledger.parse_ledger(notes),
                taints=tuple(t for t in node.taints if t != node.out_of_service_taint),
            )
    return replace(facts, node=node, pods=pods, cluster=cluster)


@PROFILE
@given(cases)
def test_s7_repeated_delivery_after_execution_does_nothing_more(
    case: Case,
) -> None:
    event, facts, policy, approval = case
    first = decide(event, facts, policy, NOW, approval=approval)
    if not first.actions:
        return
    after = apply(facts, first)
    again = decide(event, after, policy, NOW, approval=approval)
    assert not any(isinstance(a, FenceAction | UnfenceAction) for a in again.actions)
    if first.verdict == Verdict.FENCE:
        assert again.verdict in {Verdict.NOOP, Verdict.PURGE}
        # What the fence purged is gone; only what the already-fenced path newly selects stays.
        purged = {(a.namespace, a.name) for a in first.actions if isinstance(a, PurgePodAction)}
        assert not {(a.namespace, a.name) for a in again.actions} & purged  # type: ignore[union-attr]
    if first.verdict == Verdict.UNFENCE:
        assert (again.verdict, again.actions) == (Verdict.NOOP, ())
