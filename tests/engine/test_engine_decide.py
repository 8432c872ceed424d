"""One test per guard and verdict: each fails if that guard or branch is removed."""

from __future__ import annotations

from dataclasses import replace

import pytest
from engine_factories import (
    NODE,
    NOW,
    UID,
    ago,
    cluster,
    event,
    facts,
    fenced_ledger,
    fenced_node,
    node,
    our_taint,
    pod,
    policy,
)

from nodefence.engine import ledger
from nodefence.engine.decide import decide, decide_reconcile
from nodefence.engine.model import (
    EXCLUDE_LABEL,
    OUT_OF_SERVICE_KEY,
    AlertStatus,
    Approval,
    ApprovalDecision,
    Decision,
    FenceAction,
    LeaseFacts,
    Ledger,
    PodFacts,
    PurgePodAction,
    Taint,
    UnfenceAction,
    Verdict,
)
from nodefence.policy import Policy

CP = {"node-role.kubernetes.io/control-plane": ""}


def blocked(decision: Decision) -> list[str]:
    return [r.guard for r in decision.reasons if not r.passed]


def message(decision: Decision, guard: str) -> str:
    return " | ".join(r.message for r in decision.reasons if r.guard == guard)


# --- the baseline: everything allows a fence -------------------------------------------------


def test_dead_node_is_fenced_with_ledger_and_precondition() -> None:
    d = decide(event(), facts(pods=(pod("db-0"),)), policy(), NOW)
    assert d.verdict == Verdict.FENCE
    assert blocked(d) == []
    fence = d.actions[0]
    assert isinstance(fence, FenceAction)
    assert (fence.node, fence.node_uid, fence.resource_version, fence.effect) == (
        NODE,
        UID,
        "41",
        "NoExecute",
    )
    assert fence.annotations[ledger.FENCED_BY] == "nodefence"
    assert fence.annotations[ledger.NODE_UID] == UID
    assert fence.annotations[ledger.BOOT_ID] == "boot-1"
    assert fence.annotations[ledger.ALERT_FINGERPRINT] == "fp-1"
    assert fence.annotations[ledger.FENCED_AT] == "2026-11-30T08:20:00Z"
    assert fence.annotations[ledger.RULE] == "default"
    assert d.actions[1:] == (PurgePodAction("default", "db-0", "uid-default-db-0", NODE),)
    assert (d.alertname, d.fingerprint, d.status, d.rule) == (
        "KubeNodeNotReady",
        "fp-1",
        "firing",
        "default",
    )
    assert "Ready has been Unknown for 20m0s (since 2026-11-30T08:00:00Z)" in message(
        d, "not-ready-duration"
    )


def test_taint_effect_comes_from_rule() -> None:
    d = decide(event(), facts(), policy(rule={"taint_effect": "NoSchedule"}), NOW)
    assert isinstance(d.actions[0], FenceAction)
    assert d.actions[0].effect == "NoSchedule"


# --- skips --------------------------------------------------------------------------------


def test_unhandled_alert_is_skipped() -> None:
    d = decide(event(alertname="Watchdog"), facts(), policy(), NOW)
    assert d.verdict == Verdict.SKIP
    assert blocked(d) == ["alert"]


def test_alert_without_node_label_is_skipped() -> None:
    d = decide(event(node_name=None, labels={}), facts(), policy(), NOW)
    assert (d.verdict, blocked(d)) == (Verdict.SKIP, ["node-label"])


def test_node_name_taken_from_instance_label_without_port() -> None:
    p = policy(alerts={"node_labels": ["instance"]})
    d = decide(event(node_name=None, labels={"instance": f"{NODE}:9100"}), facts(), p, NOW)
    assert d.verdict == Verdict.FENCE
    assert d.node == NODE


def test_missing_node_is_skipped() -> None:
    f = replace(facts(), node=None)
    d = decide(event(), f, policy(), NOW)
    assert (d.verdict, blocked(d)) == (Verdict.SKIP, ["node-found"])


@pytest.mark.parametrize("where", ["labels", "annotations"])
def test_excluded_node_is_skipped(where: str) -> None:
    n = node(**{where: {EXCLUDE_LABEL: "true"}})  # type: ignore[arg-type]
    d = decide(event(), facts(n), policy(), NOW)
    assert (d.verdict, blocked(d)) == (Verdict.SKIP, ["exclusion"])


def test_paused_policy_skips() -> None:
    d = decide(event(), facts(), policy(paused=True), NOW)
    assert (d.verdict, blocked(d)) == (Verdict.SKIP, ["paused"])


def test_no_matching_rule_skips() -> None:
    p = policy(rule={"match": {"node_selector": "tier=storage"}})
    d = decide(event(), facts(), p, NOW)
    assert (d.verdict, blocked(d)) == (Verdict.SKIP, ["rule"])


def test_first_matching_rule_applies() -> None:
    p = policy(
        rules=[
            {
                "name": "storage",
                "match": {"node_selector": "tier in (storage)"},
                "taint_effect": "NoSchedule",
            },
            {"name": "critical", "match": {"alert_labels": {"severity": "critical"}}},
            {"name": "rest", "min_not_ready_seconds": 5000},
        ]
    )
    crit = event(labels={"node": NODE, "severity": "critical"})
    assert decide(crit, facts(node(labels={"tier": "storage"})), p, NOW).rule == "storage"
    assert decide(crit, facts(), p, NOW).rule == "critical"
    rest = decide(event(), facts(), p, NOW)
    assert (rest.rule, rest.verdict) == ("rest", Verdict.NOOP)


# --- S1 and the NotReady duration ---------------------------------------------------------------


def test_s1_ready_node_is_never_fenced() -> None:
    d = decide(event(), facts(node(ready="True")), policy(), NOW)
    assert d.verdict == Verdict.NOOP
    assert "ready" in blocked(d)


@pytest.mark.parametrize("status", ["False", "Unknown", None])
def test_false_unknown_and_missing_ready_count_as_not_ready(status: str | None) -> None:
    d = decide(event(), facts(node(ready=status)), policy(), NOW)
    assert next(r for r in d.reasons if r.guard == "ready").passed
    if status is None:
        # Without a condition the duration is unknown, which blocks on its own.
        assert blocked(d) == ["not-ready-duration"]
    else:
        assert d.verdict == Verdict.FENCE


def test_not_ready_too_briefly_blocks() -> None:
    d = decide(event(), facts(node(since=120)), policy(), NOW)
    assert (d.verdict, blocked(d)) == (Verdict.NOOP, ["not-ready-duration"])
    assert "2m0s" in message(d, "not-ready-duration")
    assert "less than the 5m0s required" in message(d, "not-ready-duration")


def test_missing_transition_time_blocks() -> None:
    n = node()
    assert n.ready is not None
    n = replace(n, ready=replace(n.ready, last_transition=None))
    d = decide(event(), facts(n), policy(), NOW)
    assert blocked(d) == ["not-ready-duration"]


# --- S2 ---------------------------------------------------------------------------------------


def test_s2_recently_renewed_lease_blocks() -> None:
    d = decide(event(), facts(lease_age=30), policy(), NOW)
    assert (d.verdict, blocked(d)) == (Verdict.NOOP, ["lease"])
    assert "within the 2m0s staleness window" in message(d, "lease")


def test_s2_lease_renewed_in_future_blocks() -> None:
    d = decide(event(), facts(lease_age=-30), policy(), NOW)
    assert blocked(d) == ["lease"]


def test_missing_lease_blocks_by_default_and_can_be_allowed() -> None:
    assert blocked(decide(event(), facts(lease_age=None), policy(), NOW)) == ["lease"]
    allowed = policy(rule={"fence_without_lease": True})
    assert decide(event(), facts(lease_age=None), allowed, NOW).verdict == Verdict.FENCE


def test_lease_without_renew_time_counts_as_missing() -> None:
    f = replace(facts(), lease=LeaseFacts(renew_time=None))
    assert blocked(decide(event(), f, policy(), NOW)) == ["lease"]


# --- S3, storm, control plane ------------------------------------------------------------------


def test_s3_budget_exhausted_blocks() -> None:
    f = facts(cluster_=cluster(fenced_by_us=("worker-2",)))
    d = decide(event(), f, policy(), NOW)
    assert (d.verdict, blocked(d)) == (Verdict.NOOP, ["fence-budget"])
    assert "worker-2" in message(d, "fence-budget")


def test_s3_budget_does_not_count_this_node() -> None:
    f = facts(cluster_=cluster(fenced_by_us=(NODE,)))
    assert decide(event(), f, policy(), NOW).verdict == Verdict.FENCE


def test_s3_ready_fraction_blocks() -> None:
    f = facts(cluster_=cluster(total_nodes=4, ready_nodes=2))
    d = decide(event(), f, policy(cluster={"storm_not_ready_fraction": 0.9}), NOW)
    assert blocked(d) == ["ready-fraction"]


def test_storm_blocks() -> None:
    f = facts(cluster_=cluster(total_nodes=10, ready_nodes=4))
    d = decide(event(), f, policy(cluster={"min_ready_fraction": 0.1}), NOW)
    assert blocked(d) == ["storm"]
    assert "6 of 10 nodes" in message(d, "storm")


def test_empty_cluster_counts_block() -> None:
    d = decide(event(), facts(cluster_=cluster(total_nodes=0, ready_nodes=0)), policy(), NOW)
    assert set(blocked(d)) == {"storm", "ready-fraction"}


def test_control_plane_quorum_needs_majority() -> None:
    n = node(labels=CP)
    ok = facts(n, cluster_=cluster(control_plane_total=3, control_plane_ready=2))
    assert decide(event(), ok, policy(), NOW).verdict == Verdict.FENCE
    lost = facts(n, cluster_=cluster(control_plane_total=3, control_plane_ready=1))
    assert blocked(decide(event(), lost, policy(), NOW)) == ["control-plane-quorum"]


def test_control_plane_never_two_fenced() -> None:
    c = cluster(
        control_plane_total=5,
        control_plane_ready=4,
        fenced_by_us=("cp-2",),
        fenced_control_plane=("cp-2",),
    )
    d = decide(
        event(), facts(node(labels=CP), cluster_=c), policy(cluster={"max_fenced_nodes": 3}), NOW
    )
    assert blocked(d) == ["control-plane-quorum"]


def test_control_plane_quorum_can_be_turned_off() -> None:
    f = facts(node(labels=CP), cluster_=cluster(control_plane_total=3, control_plane_ready=1))
    p = policy(cluster={"control_plane_quorum": False})
    assert decide(event(), f, p, NOW).verdict == Verdict.FENCE


def test_worker_node_ignores_control_plane_counts() -> None:
    f = facts(cluster_=cluster(control_plane_total=3, control_plane_ready=0))
    d = decide(event(), f, policy(), NOW)
    assert d.verdict == Verdict.FENCE
    assert "control-plane-quorum" not in [r.guard for r in d.reasons]


# --- flap, foreign taint, approval ---------------------------------------------------------------


def unfenced_ledger(seconds_ago: float, uid: str = UID) -> Ledger:
    notes = {
        ledger.NODE_UID: uid,
        **{k: v for k, v in ledger.unfence_annotations(ago(seconds_ago)).items() if v},
    }
    return ledger.parse_ledger(notes)


def test_flap_guard_blocks_recent_unfence() -> None:
    d = decide(event(), facts(node(ledger_=unfenced_ledger(600))), policy(), NOW)
    assert (d.verdict, blocked(d)) == (Verdict.NOOP, ["flap"])
    later = decide(event(), facts(node(ledger_=unfenced_ledger(4000))), policy(), NOW)
    assert later.verdict == Verdict.FENCE


def test_flap_guard_asks_for_approval_under_slack() -> None:
    p = policy(rule={"approval": "slack"})
    d = decide(event(), facts(node(ledger_=unfenced_ledger(600))), p, NOW)
    assert d.verdict == Verdict.AWAIT_APPROVAL
    assert "flapping" in message(d, "approval")


def test_foreign_taint_is_not_taken_over() -> None:
    admin = Taint(OUT_OF_SERVICE_KEY, "NoExecute", "nodeshutdown")
    d = decide(event(), facts(node(taints=(admin,))), policy(), NOW)
    assert (d.verdict, blocked(d)) == (Verdict.NOOP, ["foreign-taint"])
    assert d.actions == ()


def approval(
    decision: ApprovalDecision = ApprovalDecision.APPROVE, uid: str = UID, at: float = 60
) -> Approval:
    return Approval(user="alice", at=ago(at), decision=decision, node_uid=uid, fingerprint="fp-1")


def test_slack_approval_flow() -> None:
    p = policy(rule={"approval": "slack"})
    waiting = decide(event(), facts(), p, NOW)
    assert (waiting.verdict, waiting.actions) == (Verdict.AWAIT_APPROVAL, ())
    approved = decide(event(), facts(), p, NOW, approval=approval())
    assert approved.verdict == Verdict.FENCE
    assert isinstance(approved.actions[0], FenceAction)
    assert "alice" in approved.actions[0].annotations[ledger.APPROVAL]
    rejected = decide(event(), facts(), p, NOW, approval=approval(ApprovalDecision.REJECT))
    assert (rejected.verdict, rejected.actions) == (Verdict.NOOP, ())


def test_approval_for_another_uid_or_too_old_does_not_count() -> None:
    p = policy(rule={"approval": "slack"})
    other = decide(event(), facts(), p, NOW, approval=approval(uid="uid-old"))
    assert other.verdict == Verdict.AWAIT_APPROVAL
    stale = decide(event(), facts(), p, NOW, approval=approval(at=7200))
    assert stale.verdict == Verdict.AWAIT_APPROVAL


def test_approval_does_not_override_safety_guards() -> None:
    p = policy(rule={"approval": "slack"})
    d = decide(event(), facts(node(ready="True")), p, NOW, approval=approval())
    assert (d.verdict, d.actions) == (Verdict.NOOP, ())


# --- already fenced: purge and idempotency -----------------------------------------------------


def test_fenced_node_purges_leftovers_only() -> None:
    f = facts(fenced_node(), pods=(pod("db-0"),))
    d = decide(event(), f, policy(), NOW)
    assert d.verdict == Verdict.PURGE
    assert all(isinstance(a, PurgePodAction) for a in d.actions)


def test_fenced_node_without_leftovers_is_noop() -> None:
    d = decide(event(), facts(fenced_node(), pods=(pod("web", terminating=False),)), policy(), NOW)
    assert (d.verdict, d.actions) == (Verdict.NOOP, ())


def test_fenced_node_back_to_ready_is_not_purged() -> None:
    f = facts(fenced_node(ready="True"), pods=(pod("db-0"),))
    d = decide(event(), f, policy(), NOW)
    assert (d.verdict, d.actions) == (Verdict.NOOP, ())
    assert "ready" in blocked(d)


def test_fenced_node_with_fresh_lease_is_not_purged() -> None:
    f = facts(fenced_node(), lease_age=10, pods=(pod("db-0"),))
    d = decide(event(), f, policy(), NOW)
    assert (d.verdict, d.actions) == (Verdict.NOOP, ())


def test_fenced_ledger_but_taint_removed_is_judged_afresh() -> None:
    n = replace(fenced_node(), taints=())
    d = decide(event(), facts(n, cluster_=cluster(fenced_by_us=(NODE,))), policy(), NOW)
    assert d.verdict == Verdict.FENCE


def test_purge_selection() -> None:
    pods = (
        pod("sts", finalizers=("example.com/keep", "kubernetes.io/pvc-protection")),
        pod("deploy", owner_kind="ReplicaSet"),
        pod("bare", owner_kind=None),
        pod("custom", owner_kind="Cluster"),
        pod("running", terminating=False),
        pod("system", namespace="kube-system"),
        pod("elsewhere", node_name="worker-2"),
    )
    rule = {
        "purge": {
            "exclude_namespaces": ["kube-system"],
            "strip_finalizers": ["kubernetes.io/pvc-protection"],
        }
    }
    d = decide(event(), facts(pods=pods), policy(rule=rule), NOW)
    purged = {a.name: a for a in d.actions if isinstance(a, PurgePodAction)}
    assert set(purged) == {"sts", "deploy", "bare"}
    assert purged["sts"].strip_finalizers == ("kubernetes.io/pvc-protection",)
    everything = {
        "purge": {
            "non_terminating": True,
            "owner_kinds": ["Cluster", "StatefulSet"],
            "namespaces": ["default"],
            "only_with_pvc": True,
        }
    }
    with_pvc = (*pods, pod("pvc", has_pvc=True), pod("pvc-run", has_pvc=True, terminating=False))
    d = decide(event(), facts(pods=with_pvc), policy(rule=everything), NOW)
    assert {a.name for a in d.actions if isinstance(a, PurgePodAction)} == {"pvc", "pvc-run"}


# --- S9 ------------------------------------------------------------------------------------------


def test_s9_recreated_node_ignores_old_ledger() -> None:
    n = fenced_node(uid="uid-new")
    d = decide(event(), facts(n, pods=(pod("db-0"),)), policy(), NOW)
    assert "re-created" in message(d, "node-identity")
    # The taint from the old ledger is not ours, so nothing is taken over or purged.
    assert (d.verdict, d.actions) == (Verdict.NOOP, ())
    assert "foreign-taint" in blocked(d)


def test_s9_old_unfence_does_not_trigger_flap_guard() -> None:
    d = decide(event(), facts(node(ledger_=unfenced_ledger(60, uid="uid-old"))), policy(), NOW)
    assert d.verdict == Verdict.FENCE


def test_ledger_read_from_annotations_when_not_parsed() -> None:
    notes = ledger.fence_annotations(node(), event(), ago(3600), "NoExecute", rule="default")
    n = node(ready="True", since=900, taints=(our_taint(),), annotations=notes)
    assert n.ledger == Ledger()
    d = decide(event(AlertStatus.RESOLVED), facts(n, lease_age=5), policy(), NOW)
    assert d.verdict == Verdict.UNFENCE


# --- resolved alert: unfence and its guards -------------------------------------------------------


def healthy_fenced(
    p: Policy | None = None, lease_age: float | None = 5, pods: tuple[PodFacts, ...] = ()
) -> Decision:
    f = facts(fenced_node(ready="True", since=900), lease_age=lease_age, pods=pods)
    return decide(event(AlertStatus.RESOLVED), f, p or policy(), NOW)


def test_unfence_when_healthy() -> None:
    d = healthy_fenced()
    assert d.verdict == Verdict.UNFENCE
    (action,) = d.actions
    assert isinstance(action, UnfenceAction)
    assert (action.node, action.node_uid, action.resource_version) == (NODE, UID, "41")
    assert action.annotations == {ledger.UNFENCED_AT: "2026-11-30T08:20:00Z"}
    assert ledger.FENCED_BY in action.remove_annotations
    assert ledger.NODE_UID not in action.remove_annotations


def test_s4_foreign_taint_is_never_removed() -> None:
    admin = Taint(OUT_OF_SERVICE_KEY, "NoExecute", "nodeshutdown")
    d = decide(
        event(AlertStatus.RESOLVED),
        facts(node(ready="True", taints=(admin,)), lease_age=5),
        policy(),
        NOW,
    )
    assert (d.verdict, d.actions) == (Verdict.NOOP, ())
    assert "never removed" in message(d, "ownership")


def test_s5_healthy_delay() -> None:
    n = fenced_node(ready="True", since=60)
    d = decide(event(AlertStatus.RESOLVED), facts(n, lease_age=5), policy(), NOW)
    assert (d.verdict, blocked(d)) == (Verdict.DEFERRED, ["healthy-delay", "verdict"])
    not_ready = decide(
        event(AlertStatus.RESOLVED), facts(fenced_node(), lease_age=5), policy(), NOW
    )
    assert not_ready.verdict == Verdict.DEFERRED


def test_s5_boot_id_required() -> None:
    p = policy(rule={"require_new_boot_id": True})
    same = healthy_fenced(p=p)
    assert (same.verdict, "boot-id" in blocked(same)) == (Verdict.DEFERRED, True)
    n = replace(fenced_node(ready="True", since=900), boot_id="boot-2")
    rebooted = decide(event(AlertStatus.RESOLVED), facts(n, lease_age=5), p, NOW)
    assert rebooted.verdict == Verdict.UNFENCE


def test_unfence_needs_fresh_lease() -> None:
    assert blocked(healthy_fenced(lease_age=600)) == ["lease-fresh", "verdict"]
    assert blocked(healthy_fenced(lease_age=None)) == ["lease-fresh", "verdict"]


def test_unfence_waits_for_terminating_pods() -> None:
    d = healthy_fenced(pods=(pod("db-0"),))
    assert blocked(d) == ["terminating-pods", "verdict"]


def test_resolved_for_unfenced_node_is_noop() -> None:
    d = decide(event(AlertStatus.RESOLVED), facts(node(ready="True")), policy(), NOW)
    assert (d.verdict, d.actions) == (Verdict.NOOP, ())
    assert "nothing to undo" in message(d, "ownership")


def test_release_follows_the_rule_that_fenced() -> None:
    p = policy(
        rules=[
            {
                "name": "strict",
                "match": {"alert_labels": {"severity": "critical"}},
                "healthy_delay_seconds": 3600,
            },
            {"name": "default"},
        ]
    )
    n = replace(fenced_node(ready="True", since=900, rule="strict"))
    d = decide(event(AlertStatus.RESOLVED), facts(n, lease_age=5), p, NOW)
    assert (d.rule, d.verdict) == ("strict", Verdict.DEFERRED)


# --- reconcile -------------------------------------------------------------------------------


def test_reconcile_unfences_recovered_node() -> None:
    d = decide_reconcile(facts(fenced_node(ready="True", since=900), lease_age=5), policy(), NOW)
    assert d.verdict == Verdict.UNFENCE
    assert (d.status, d.fingerprint, d.alertname) == ("reconcile", "fp-1", "KubeNodeNotReady")


def test_reconcile_purges_leftovers_and_defers() -> None:
    d = decide_reconcile(facts(fenced_node(), pods=(pod("db-0"),)), policy(), NOW)
    assert d.verdict == Verdict.PURGE
    idle = decide_reconcile(facts(fenced_node()), policy(), NOW)
    assert idle.verdict == Verdict.NOOP
    early = decide_reconcile(facts(fenced_node(ready="True", since=30), lease_age=5), policy(), NOW)
    assert early.verdict == Verdict.DEFERRED


def test_reconcile_leaves_foreign_and_recreated_nodes() -> None:
    admin = node(ready="True", taints=(our_taint(),))
    assert decide_reconcile(facts(admin, lease_age=5), policy(), NOW).actions == ()
    recreated = fenced_node(ready="True", since=900, uid="uid-new")
    d = decide_reconcile(facts(recreated, lease_age=5), policy(), NOW)
    assert (d.verdict, d.actions) == (Verdict.NOOP, ())


def test_reconcile_does_not_purge_without_taint() -> None:
    n = replace(fenced_node(), taints=())
    d = decide_reconcile(facts(n, pods=(pod("db-0"),)), policy(), NOW)
    assert (d.verdict, d.actions) == (Verdict.NOOP, ())


# --- dry run -------------------------------------------------------------------------------------


def test_dry_run_keeps_verdict_and_actions_and_says_so() -> None:
    d = decide(event(), facts(), policy(dry_run=True), NOW)
    assert (d.verdict, d.dry_run) == (Verdict.FENCE, True)
    assert isinstance(d.actions[0], FenceAction)
    assert "nothing will be written" in message(d, "dry-run")


def test_ledger_parser_ignores_garbage() -> None:
    parsed = ledger.parse_ledger(
        {
            ledger.FENCED_BY: "nodefence",
            ledger.FENCED_AT: "yesterday",
            ledger.UNFENCED_AT: "2026-01-01T00:00:00",
        }
    )
    assert parsed.fenced
    assert (parsed.fenced_at, parsed.unfenced_at) == (None, None)
    assert ledger.parse_ledger(None) == Ledger()
    assert fenced_ledger().fenced_at == ago(3600)
