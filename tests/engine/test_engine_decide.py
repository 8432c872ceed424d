"""One test per guard and verdict: each fails if that guard or branch is removed."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from engine_factories import (
    CLAIM_TOKEN,
    NODE,
    NOW,
    RECORD_VERSION,
    UID,
    ago,
    cluster,
    entry,
    event,
    facts,
    fenced_node,
    lease,
    node,
    our_taint,
    pod,
    policy,
    record,
    recovered,
)

from nodefence.engine import mirror
from nodefence.engine import record as fence_record
from nodefence.engine.decide import decide, decide_reconcile
from nodefence.engine.model import (
    EXCLUDE_LABEL,
    OUT_OF_SERVICE_KEY,
    AlertStatus,
    Approval,
    ApprovalDecision,
    ClaimAction,
    ConfirmAction,
    Decision,
    Facts,
    FenceAction,
    LeaseFacts,
    ObserveReadyAction,
    PodFacts,
    PurgePodAction,
    ReleaseAction,
    Taint,
    UnfenceAction,
    Verdict,
)
from nodefence.engine.record import Phase, Release
from nodefence.policy import Policy

CP = {"node-role.kubernetes.io/control-plane": ""}
RESOLVED = AlertStatus.RESOLVED


def blocked(decision: Decision) -> list[str]:
    return [r.guard for r in decision.reasons if not r.passed]


def message(decision: Decision, guard: str) -> str:
    return " | ".join(r.message for r in decision.reasons if r.guard == guard)


def kinds(decision: Decision) -> list[type]:
    return [type(a) for a in decision.actions]


def confirms(decision: Decision) -> list[tuple[str, str, str]]:
    """Which claims the decision confirms: (node, node UID, claim; empty for its own)."""
    return [
        (a.node, a.node_uid, a.claimed_by) for a in decision.actions if isinstance(a, ConfirmAction)
    ]


# --- the baseline: everything allows a fence -------------------------------------------------


def test_dead_node_is_claimed_then_tainted_then_confirmed() -> None:
    """The budget slot is claimed on the record version the decision read, before the taint;
    the mirror annotations show the claim to people."""
    d = decide(event(), facts(pods=(pod("db-0"),)), policy(), NOW)
    assert d.verdict == Verdict.FENCE
    assert blocked(d) == []
    claim, fence, confirm, purge = d.actions
    assert isinstance(claim, ClaimAction)
    assert claim.record_version == RECORD_VERSION
    e = claim.entry
    assert (e.node, e.uid, e.phase, e.claimed_at, e.effect, e.boot_id) == (
        NODE,
        UID,
        Phase.CLAIMED,
        NOW,
        "NoExecute",
        "boot-1",
    )
    assert (e.rule, e.alertname, e.fingerprint, e.control_plane) == (
        "default",
        "KubeNodeNotReady",
        "fp-1",
        False,
    )
    assert "inference alone" in e.proof
    assert isinstance(fence, FenceAction)
    assert (fence.node, fence.node_uid, fence.resource_version, fence.effect) == (
        NODE,
        UID,
        "41",
        "NoExecute",
    )
    assert fence.annotations == mirror.fence_annotations(e)
    assert fence.annotations[mirror.FENCED_BY] == "nodefence"
    assert fence.annotations[mirror.FENCED_AT] == "2026-11-30T08:20:00Z"
    assert isinstance(confirm, ConfirmAction)
    assert confirms(d) == [(NODE, UID, "")]
    assert purge == PurgePodAction("default", "db-0", "uid-default-db-0", NODE)
    assert d.node_confirmed_down
    assert (d.alertname, d.fingerprint, d.status, d.rule) == (
        "KubeNodeNotReady",
        "fp-1",
        "firing",
        "default",
    )


def test_claim_on_a_record_that_does_not_exist_yet_creates_it() -> None:
    """No record yet: the claim carries no version, which the writer turns into a create (and
    a create fails if another replica created it first)."""
    d = decide(event(), facts(record_=record(version="")), policy(), NOW)
    claim = d.actions[0]
    assert isinstance(claim, ClaimAction)
    assert claim.record_version == ""


def test_taint_effect_comes_from_rule() -> None:
    d = decide(event(), facts(), policy(rule={"taint_effect": "NoSchedule"}), NOW)
    claim, fence = d.actions[:2]
    assert isinstance(claim, ClaimAction)
    assert isinstance(fence, FenceAction)
    assert claim.entry.effect == fence.effect == "NoSchedule"


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
    assert (d.verdict, blocked(d), d.actions) == (Verdict.SKIP, ["node-found"], ())


def test_vanished_node_entry_is_released() -> None:
    """A node deleted while fenced holds no budget slot for ever: its entry is let go, on the
    resolved path and in reconcile alike."""
    f = replace(facts(held=entry()), node=None)
    for d in (
        decide(event(RESOLVED), f, policy(), NOW),
        decide_reconcile(f, policy(), NOW, NODE),
    ):
        assert d.verdict == Verdict.NOOP
        (release,) = d.actions
        assert isinstance(release, ReleaseAction)
        assert (release.node, release.node_uid, release.remember) == (NODE, UID, True)
        assert "no longer exists" in release.why


@pytest.mark.parametrize("where", ["labels", "annotations"])
def test_excluded_node_is_skipped(where: str) -> None:
    n = node(**{where: {EXCLUDE_LABEL: "true"}})  # type: ignore[arg-type]
    d = decide(event(), facts(n), policy(), NOW)
    assert (d.verdict, blocked(d)) == (Verdict.SKIP, ["exclusion"])


@pytest.mark.parametrize("where", ["labels", "annotations"])
@pytest.mark.parametrize("value", ["true", "yes", "1", "True", "YES", " yes "])
def test_every_common_spelling_of_true_excludes(where: str, value: str) -> None:
    n = node(**{where: {EXCLUDE_LABEL: value}})  # type: ignore[arg-type]
    d = decide(event(), facts(n), policy(), NOW)
    assert (d.verdict, blocked(d)) == (Verdict.SKIP, ["exclusion"])
    (reason,) = [r for r in d.reasons if r.guard == "exclusion"]
    assert f"{EXCLUDE_LABEL}={value}" in reason.message


@pytest.mark.parametrize("where", ["labels", "annotations"])
@pytest.mark.parametrize("value", ["maybe", "on", "", "tru", "\x1b[2J"])
def test_an_exclusion_value_not_understood_excludes_and_says_so(where: str, value: str) -> None:
    """Excluding is the safe side of a misread switch: the node is left alone, and the reason
    says which value was not understood."""
    n = node(**{where: {EXCLUDE_LABEL: value}})  # type: ignore[arg-type]
    d = decide(event(), facts(n), policy(), NOW)
    assert (d.verdict, blocked(d)) == (Verdict.SKIP, ["exclusion"])
    (reason,) = [r for r in d.reasons if r.guard == "exclusion"]
    assert repr(value) in reason.message
    assert "taken as an exclusion" in reason.message
    assert "\x1b" not in reason.message


@pytest.mark.parametrize("where", ["labels", "annotations"])
@pytest.mark.parametrize("value", ["false", "no", "0", "False", "NO"])
def test_an_explicit_false_does_not_exclude(where: str, value: str) -> None:
    n = node(**{where: {EXCLUDE_LABEL: value}})  # type: ignore[arg-type]
    d = decide(event(), facts(n), policy(), NOW)
    assert "exclusion" not in blocked(d)
    assert d.verdict == decide(event(), facts(node()), policy(), NOW).verdict


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


@pytest.mark.invariant("S1")
def test_s1_ready_node_is_never_fenced() -> None:
    d = decide(event(), facts(node(ready="True")), policy(), NOW)
    assert (d.verdict, d.actions) == (Verdict.NOOP, ())
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
    d = decide(event(), facts(node(since=120), lease_age=600), policy(), NOW)
    assert (d.verdict, blocked(d)) == (Verdict.NOOP, ["not-ready-duration"])
    assert "Ready has been Unknown for 2m0s on the API server's clock" in message(
        d, "not-ready-duration"
    )
    assert "less than the 5m0s required" in message(d, "not-ready-duration")


def test_not_ready_duration_is_capped_by_the_lease_silence() -> None:
    """NotReady for 20 minutes by its lastTransitionTime, but the API server saw the Lease
    renewed 3 minutes ago: the node has been silent for 3 minutes only."""
    d = decide(event(), facts(node(since=1200), lease_age=180), policy(), NOW)
    assert (d.verdict, blocked(d)) == (Verdict.NOOP, ["not-ready-duration"])
    assert "for 3m0s" in message(d, "not-ready-duration")
    assert "last saw its Lease renewed at 2026-11-30T08:17:00Z" in message(d, "not-ready-duration")


def test_missing_transition_time_blocks() -> None:
    n = node()
    assert n.ready is not None
    n = replace(n, ready=replace(n.ready, last_transition=None))
    d = decide(event(), facts(n), policy(), NOW)
    assert blocked(d) == ["not-ready-duration"]


# --- S2 ---------------------------------------------------------------------------------------


@pytest.mark.invariant("S2")
def test_s2_recently_renewed_lease_blocks() -> None:
    d = decide(event(), facts(node(since=1200), lease_age=30), policy(), NOW)
    assert "lease" in blocked(d)
    assert (d.verdict, d.actions) == (Verdict.NOOP, ())
    assert "within the 50s staleness window" in message(d, "lease")


@pytest.mark.invariant("S2")
def test_s2_lease_renewed_in_future_blocks() -> None:
    d = decide(event(), facts(lease_age=-30), policy(), NOW)
    assert "lease" in blocked(d)
    assert d.actions == ()


def test_missing_lease_blocks_by_default_and_can_be_allowed() -> None:
    assert blocked(decide(event(), facts(lease_age=None), policy(), NOW)) == ["lease"]
    allowed = policy(rule={"fence_without_lease": True})
    assert decide(event(), facts(lease_age=None), allowed, NOW).verdict == Verdict.FENCE


def test_lease_without_server_stamp_blocks() -> None:
    """A renewTime alone is the kubelet's clock: with no managedFields time the renewal
    cannot be timed, so the kubelet's death is not confirmed."""
    f = facts(lease_=LeaseFacts(renew_time=ago(3600), server_renewed=None))
    d = decide(event(), f, policy(), NOW)
    assert (d.verdict, blocked(d), d.actions) == (Verdict.NOOP, ["lease"], ())
    assert "managedFields" in message(d, "lease")


# --- S11: the API server's clock -------------------------------------------------------------


@pytest.mark.invariant("S11")
def test_s11_kubelet_clock_ten_minutes_behind_is_still_alive() -> None:
    """renewTime 10 minutes old (the kubelet's clock runs behind) and a Ready transition it
    stamped 20 minutes ago, but the API server saw the Lease renewed 5 s ago: a live kubelet."""
    f = facts(node(since=1200), lease_=lease(5, kubelet_behind=600))
    assert f.lease is not None
    assert f.lease.renew_time == ago(605)
    d = decide(event(), f, policy(), NOW)
    assert (d.verdict, d.actions) == (Verdict.NOOP, ())
    assert set(blocked(d)) == {"lease", "not-ready-duration"}
    assert "renewTime, from the kubelet's own clock" in message(d, "lease")
    assert not d.node_confirmed_down


@pytest.mark.invariant("S11")
def test_s11_kubelet_clock_ahead_neither_saves_nor_dooms_a_node() -> None:
    """renewTime 10 minutes in the future: judged on the server stamp alone, a dead kubelet is
    fenced and a live one is not."""
    dead = decide(event(), facts(lease_=lease(900, kubelet_behind=-600)), policy(), NOW)
    assert dead.verdict == Verdict.FENCE
    alive = decide(event(), facts(lease_=lease(5, kubelet_behind=-600)), policy(), NOW)
    assert (alive.verdict, alive.actions) == (Verdict.NOOP, ())
    assert "lease" in blocked(alive)


@pytest.mark.invariant("S11")
@pytest.mark.parametrize("skew", [-600, 600])
def test_s11_nodefence_clock_off_by_ten_minutes_fences_nothing(skew: float) -> None:
    """Without the API server's Date, ``now`` is nodefence's own clock; ten minutes fast it
    would make a live Lease look stale, so with any clock but the server's nothing is fenced."""
    now = NOW + timedelta(seconds=skew)
    f = facts(lease_age=5, clock="nodefence's own clock")
    d = decide(event(), f, policy(), now)
    assert (d.verdict, d.actions) == (Verdict.NOOP, ())
    assert "clock" in blocked(d)
    assert "liveness cannot be judged" in message(d, "clock")


@pytest.mark.invariant("S11")
def test_s11_untrusted_clock_blocks_unfence_and_purge() -> None:
    untrusted = "nodefence's own clock"
    healthy = replace(recovered(), clock=untrusted)
    for d in (
        decide(event(RESOLVED), healthy, policy(), NOW),
        decide_reconcile(healthy, policy(), NOW, NODE),
    ):
        assert d.verdict == Verdict.DEFERRED
        assert not any(isinstance(a, UnfenceAction) for a in d.actions)
        assert "clock" in blocked(d)
    down = facts(fenced_node(), held=entry(), pods=(pod("db-0"),), clock=untrusted)
    d = decide(event(), down, policy(), NOW)
    assert (d.verdict, d.actions, d.node_confirmed_down) == (Verdict.NOOP, (), False)


@pytest.mark.invariant("S3", "S11")
def test_s11_untrusted_clock_never_rolls_back_another_replicas_claim() -> None:
    """On nodefence's own clock (ten minutes fast here) a claim another replica made a moment
    ago looks stale; rolling it back would free its budget slot while that replica is still
    fencing (S3), so the claim is left alone."""
    fast = NOW + timedelta(seconds=600)
    claim = entry(phase=Phase.CLAIMED, claimed=10)
    f = facts(held=claim, clock="nodefence's own clock")
    for d in (
        decide(event(), f, policy(), fast),
        decide(event(RESOLVED), f, policy(), fast),
        decide_reconcile(f, policy(), fast, NODE),
    ):
        assert not any(isinstance(a, ReleaseAction | FenceAction) for a in d.actions)


# --- S3, storm, control plane ------------------------------------------------------------------


@pytest.mark.invariant("S3")
def test_s3_budget_exhausted_blocks() -> None:
    f = facts(record_=record(entry(node_name="worker-2", uid="uid-worker-2")))
    d = decide(event(), f, policy(), NOW)
    assert (d.verdict, blocked(d), d.actions) == (Verdict.NOOP, ["fence-budget"], ())
    assert "worker-2" in message(d, "fence-budget")


@pytest.mark.invariant("S3")
def test_s3_unreadable_entries_count_against_the_budget() -> None:
    """An entry nobody can read is no proof that its slot is free."""
    f = facts(record_=record(unreadable=("fence.worker-2",)))
    d = decide(event(), f, policy(), NOW)
    assert (d.verdict, blocked(d), d.actions) == (Verdict.NOOP, ["fence-budget"], ())
    assert "worker-2" in message(d, "fence-budget")
    roomy = decide(event(), f, policy(cluster={"max_fenced_nodes": 2}), NOW)
    assert roomy.verdict == Verdict.FENCE


@pytest.mark.invariant("S3")
def test_s3_a_claim_in_progress_elsewhere_spends_a_slot() -> None:
    """A slot is spent from the moment it is claimed, before any taint exists."""
    in_progress = entry(node_name="worker-2", uid="uid-2", phase=Phase.CLAIMED, claimed=10)
    d = decide(event(), facts(record_=record(in_progress)), policy(), NOW)
    assert blocked(d) == ["fence-budget"]


@pytest.mark.invariant("S3")
def test_s3_ready_fraction_blocks() -> None:
    f = facts(cluster_=cluster(total_nodes=4, ready_nodes=2))
    d = decide(event(), f, policy(cluster={"storm_not_ready_fraction": 0.9}), NOW)
    assert blocked(d) == ["ready-fraction"]


@pytest.mark.invariant("S3")
def test_s3_ready_fraction_counts_only_schedulable_ready_nodes() -> None:
    """Three of four nodes are Ready, but two of them are cordoned or out of service: only one
    could take the fenced node's workloads."""
    f = facts(cluster_=cluster(total_nodes=4, ready_nodes=3, schedulable_ready=1))
    d = decide(event(), f, policy(), NOW)
    assert (d.verdict, blocked(d)) == (Verdict.NOOP, ["ready-fraction"])
    assert "only 1 of 4 nodes" in message(d, "ready-fraction")
    counted = facts(cluster_=cluster(total_nodes=4, ready_nodes=3, schedulable_ready=3))
    assert decide(event(), counted, policy(), NOW).verdict == Verdict.FENCE


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
    fenced = decide(event(), ok, policy(), NOW)
    assert fenced.verdict == Verdict.FENCE
    claim = fenced.actions[0]
    assert isinstance(claim, ClaimAction)
    assert claim.entry.control_plane
    lost = facts(n, cluster_=cluster(control_plane_total=3, control_plane_ready=1))
    assert blocked(decide(event(), lost, policy(), NOW)) == ["control-plane-quorum"]


def test_control_plane_never_two_fenced() -> None:
    other = entry(node_name="cp-2", uid="uid-cp-2", control_plane=True)
    c = cluster(control_plane_total=5, control_plane_ready=4)
    d = decide(
        event(),
        facts(node(labels=CP), cluster_=c, record_=record(other)),
        policy(cluster={"max_fenced_nodes": 3}),
        NOW,
    )
    assert blocked(d) == ["control-plane-quorum"]
    assert "cp-2" in message(d, "control-plane-quorum")


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


def released(seconds_ago: float, uid: str = UID) -> Facts:
    return facts(record_=record(released=(Release(NODE, uid, ago(seconds_ago), "unfenced"),)))


def test_flap_guard_blocks_a_recent_release() -> None:
    d = decide(event(), released(600), policy(), NOW)
    assert (d.verdict, blocked(d), d.actions) == (Verdict.NOOP, ["flap"], ())
    assert "10m0s ago" in message(d, "flap")
    later = decide(event(), released(4000), policy(), NOW)
    assert later.verdict == Verdict.FENCE


def test_flap_guard_asks_for_approval_under_slack() -> None:
    p = policy(rule={"approval": "slack"})
    d = decide(event(), released(600), p, NOW)
    assert d.verdict == Verdict.AWAIT_APPROVAL
    assert "flapping" in message(d, "approval")


def test_flap_guard_is_not_fooled_by_annotations() -> None:
    """A node that wipes its unfenced-at mirror annotation still cannot dodge the flap guard,
    and one that writes a fresh unfenced-at is not blocked by it: the release lives in the
    record."""
    wiped = released(600)
    assert wiped.node is not None
    forged_old = replace(wiped, node=replace(wiped.node, annotations={}))
    assert blocked(decide(event(), forged_old, policy(), NOW)) == ["flap"]
    notes = {mirror.UNFENCED_AT: "2026-11-30T08:19:00Z", mirror.NODE_UID: UID}
    forged_new = facts(node(annotations=notes))
    assert decide(event(), forged_new, policy(), NOW).verdict == Verdict.FENCE


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
    claim, fence = approved.actions[:2]
    assert isinstance(claim, ClaimAction)
    assert isinstance(fence, FenceAction)
    assert "alice" in claim.entry.approval
    assert "alice" in fence.annotations[mirror.APPROVAL]
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
    f = facts(fenced_node(), held=entry(), pods=(pod("db-0"),))
    d = decide(event(), f, policy(), NOW)
    assert d.verdict == Verdict.PURGE
    assert kinds(d) == [PurgePodAction]
    assert d.node_confirmed_down


def test_fenced_node_without_leftovers_is_noop() -> None:
    f = facts(fenced_node(), held=entry(), pods=(pod("web", terminating=False),))
    d = decide(event(), f, policy(), NOW)
    assert (d.verdict, d.actions) == (Verdict.NOOP, ())
    assert d.node_confirmed_down


def test_fenced_node_back_to_ready_is_not_purged() -> None:
    f = facts(fenced_node(ready="True"), held=entry(), pods=(pod("db-0"),))
    d = decide(event(), f, policy(), NOW)
    assert (d.verdict, d.actions) == (Verdict.NOOP, ())
    assert "ready" in blocked(d)
    assert not d.node_confirmed_down


def test_fenced_node_with_fresh_lease_is_not_purged() -> None:
    f = facts(fenced_node(), held=entry(), lease_age=10, pods=(pod("db-0"),))
    d = decide(event(), f, policy(), NOW)
    assert (d.verdict, d.actions) == (Verdict.NOOP, ())
    assert "lease" in blocked(d)
    assert not d.node_confirmed_down


def test_taint_removed_by_someone_else_is_let_go_then_flap_guarded() -> None:
    """Someone removed nodefence's taint: nodefence lets go of the entry (remembering the
    release) instead of tainting again, and the next decision is held by the flap guard."""
    f = facts(node(), held=entry())
    d = decide(event(), f, policy(), NOW)
    assert d.verdict == Verdict.NOOP
    (release,) = d.actions
    assert isinstance(release, ReleaseAction)
    assert (release.node_uid, release.remember, release.claimed_by) == (UID, True, "")
    assert "removed by someone else" in release.why
    after = fence_record.without_entry(f.record, NODE, UID, at=NOW, why=release.why)
    again = decide(event(), replace(f, record=after), policy(), NOW)
    assert (again.verdict, blocked(again), again.actions) == (Verdict.NOOP, ["flap"], ())


@pytest.mark.invariant("S4")
@pytest.mark.parametrize(
    "taken_over",
    [
        Taint(OUT_OF_SERVICE_KEY, "NoExecute", "maintenance"),  # kubectl taint --overwrite
        Taint(OUT_OF_SERVICE_KEY, "NoExecute", ""),
        Taint(OUT_OF_SERVICE_KEY, "NoSchedule", "nodeshutdown"),
    ],
)
def test_s4_taint_taken_over_by_an_admin_is_let_go_never_removed(taken_over: Taint) -> None:
    """Same key, another value or effect: an admin now owns it. Every path lets go of the
    entry and leaves the taint on."""
    f = facts(node(ready="True", since=900, taints=(taken_over,)), lease_age=5, held=entry())
    healthy = replace(f, record=record(entry(ready_seen=900)))
    for d in (
        decide(event(), f, policy(), NOW),
        decide(event(RESOLVED), healthy, policy(), NOW),
        decide_reconcile(healthy, policy(), NOW, NODE),
    ):
        assert d.verdict == Verdict.NOOP
        (release,) = d.actions
        assert isinstance(release, ReleaseAction)
        assert "someone took it over" in release.why
        assert not any(isinstance(a, UnfenceAction) for a in d.actions)


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


# --- half-written fences ---------------------------------------------------------------------


def claimed(
    seconds_ago: float, *, lease_age: float = 900, pods: tuple[PodFacts, ...] = ()
) -> Facts:
    """A claim ``seconds_ago`` old whose taint is not on the node (yet)."""
    held = entry(phase=Phase.CLAIMED, claimed=seconds_ago)
    return facts(held=held, lease_age=lease_age, pods=pods)


def test_stale_claim_is_completed_when_every_guard_passes() -> None:
    """The replica that claimed died before its taint: the claim is finished without a second
    claim, and confirmed as that very claim."""
    d = decide(event(), claimed(600, pods=(pod("db-0"),)), policy(), NOW)
    assert d.verdict == Verdict.FENCE
    fence, confirm, purge = d.actions
    assert isinstance(fence, FenceAction)
    assert (fence.node_uid, fence.effect) == (UID, "NoExecute")
    assert isinstance(confirm, ConfirmAction)
    assert confirms(d) == [(NODE, UID, CLAIM_TOKEN)]
    assert isinstance(purge, PurgePodAction)
    assert "judged afresh" in message(d, "fence-in-progress")


def test_stale_claim_is_rolled_back_when_a_guard_blocks() -> None:
    """A rolled-back claim never had its taint, so the release is not remembered for the flap
    guard (the node may be fenced as soon as it is really dead)."""
    d = decide(event(), claimed(600, lease_age=5), policy(), NOW)
    assert d.verdict == Verdict.NOOP
    (rollback,) = d.actions
    assert rollback == ReleaseAction(NODE, UID, rollback.why, CLAIM_TOKEN, remember=False)
    assert "lease" in blocked(d)


def test_fresh_claim_by_another_replica_is_never_claimed_twice() -> None:
    """Another replica claimed a moment ago: this one spends no second slot. If every guard
    passes it may only complete that very claim; if one blocks it leaves the claim to its
    owner instead of rolling it back."""
    ok = decide(event(), claimed(10), policy(), NOW)
    assert ok.verdict == Verdict.FENCE
    assert not any(isinstance(a, ClaimAction) for a in ok.actions)
    assert confirms(ok) == [(NODE, UID, CLAIM_TOKEN)]
    refused = decide(event(), claimed(10, lease_age=5), policy(), NOW)
    assert (refused.verdict, refused.actions) == (Verdict.NOOP, ())


def test_own_fresh_claim_is_rolled_back_at_once_when_a_guard_blocks() -> None:
    d = decide(event(), claimed(10, lease_age=5), policy(), NOW, own_claim=CLAIM_TOKEN)
    (rollback,) = d.actions
    assert isinstance(rollback, ReleaseAction)
    assert (rollback.claimed_by, rollback.remember) == (CLAIM_TOKEN, False)


def test_fresh_claim_is_in_progress_for_resolve_and_reconcile() -> None:
    for d in (
        decide(event(RESOLVED), claimed(10), policy(), NOW),
        decide_reconcile(claimed(10), policy(), NOW, NODE),
    ):
        assert (d.verdict, blocked(d), d.actions) == (Verdict.NOOP, ["fence-in-progress"], ())


def test_stale_claim_is_rolled_back_by_resolve_and_reconcile() -> None:
    for d in (
        decide(event(RESOLVED), claimed(600), policy(), NOW),
        decide_reconcile(claimed(600), policy(), NOW, NODE),
    ):
        (rollback,) = d.actions
        assert rollback == ReleaseAction(NODE, UID, rollback.why, CLAIM_TOKEN, remember=False)
        assert "rolled back" in rollback.why


def test_claim_timeout_comes_from_the_policy() -> None:
    p = policy(cluster={"claim_timeout_seconds": 900})
    d = decide_reconcile(claimed(600), p, NOW, NODE)
    assert (d.verdict, blocked(d), d.actions) == (Verdict.NOOP, ["fence-in-progress"], ())


def test_claim_with_its_taint_on_is_confirmed() -> None:
    """The taint was written but the confirm was lost: the entry is confirmed, as that claim,
    and leftovers are purged."""
    f = facts(fenced_node(), held=entry(phase=Phase.CLAIMED, claimed=10), pods=(pod("db-0"),))
    for d in (decide(event(), f, policy(), NOW), decide_reconcile(f, policy(), NOW, NODE)):
        assert d.verdict == Verdict.PURGE
        assert kinds(d) == [ConfirmAction, PurgePodAction]
        assert confirms(d) == [(NODE, UID, CLAIM_TOKEN)]


def test_claim_meeting_someone_elses_taint_is_let_go() -> None:
    admin = Taint(OUT_OF_SERVICE_KEY, "NoSchedule", "nodeshutdown")
    f = facts(node(taints=(admin,)), held=entry(phase=Phase.CLAIMED, claimed=10))
    for d in (decide(event(), f, policy(), NOW), decide_reconcile(f, policy(), NOW, NODE)):
        (release,) = d.actions
        assert isinstance(release, ReleaseAction)
        assert (release.claimed_by, release.remember) == (CLAIM_TOKEN, False)


# --- S9 ------------------------------------------------------------------------------------------


@pytest.mark.invariant("S9")
def test_s9_recreated_node_lets_go_of_the_old_entry_and_inherits_nothing() -> None:
    f = facts(fenced_node(uid="uid-new"), held=entry(uid="uid-old"), pods=(pod("db-0"),))
    d = decide(event(), f, policy(), NOW)
    assert "re-created" in message(d, "node-identity")
    assert d.verdict == Verdict.NOOP
    (release,) = d.actions
    assert isinstance(release, ReleaseAction)
    assert release.node_uid == "uid-old"
    # Once let go, the taint on the new node object is nobody's nodefence knows of.
    after = fence_record.without_entry(f.record, NODE, "uid-old", at=NOW, why=release.why)
    again = decide(event(), replace(f, record=after), policy(), NOW)
    assert (again.verdict, again.actions) == (Verdict.NOOP, ())
    assert "foreign-taint" in blocked(again)


@pytest.mark.invariant("S9")
def test_s9_release_of_the_old_node_object_does_not_trigger_flap_guard() -> None:
    d = decide(event(), released(60, uid="uid-old"), policy(), NOW)
    assert d.verdict == Verdict.FENCE


# --- S12: the mirror is never authority -------------------------------------------------------


def forged(the_node_uid: str = UID) -> dict[str, str]:
    """Every mirror annotation a fence would write, as a node's own credentials could."""
    claim = entry(uid=the_node_uid)
    return {**mirror.fence_annotations(claim), mirror.APPROVAL: "approved by mallory"}


@pytest.mark.invariant("S12")
def test_s12_forged_mirror_on_an_admins_taint_is_never_unfenced() -> None:
    """The admin's taint with a perfect copy of nodefence's annotations beside it, on a
    healthy node: the record holds nothing, so nothing is removed, on any path."""
    n = node(ready="True", since=900, taints=(our_taint(),), annotations=forged())
    f = facts(n, lease_age=5)
    for d in (
        decide(event(RESOLVED), f, policy(), NOW),
        decide_reconcile(f, policy(), NOW, NODE),
    ):
        assert (d.verdict, d.actions) == (Verdict.NOOP, ())
        assert "never removed by nodefence" in message(d, "ownership")


@pytest.mark.invariant("S12")
def test_s12_forged_mirror_is_never_counted_as_ours() -> None:
    """A firing alert for a dead node with the admin's taint and forged annotations: the taint
    is foreign, so it is neither taken over nor purged under."""
    n = node(taints=(our_taint(),), annotations=forged())
    d = decide(event(), facts(n, pods=(pod("db-0"),)), policy(), NOW)
    assert (d.verdict, d.actions) == (Verdict.NOOP, ())
    assert blocked(d) == ["foreign-taint"]


@pytest.mark.invariant("S12")
def test_s12_the_mirror_neither_spends_nor_frees_a_slot() -> None:
    """Forged annotations on a node without a taint make it no holder (it is fenced as any
    other); a fenced node that wipes its own mirror still holds its slot and its fence."""
    d = decide(event(), facts(node(annotations=forged())), policy(), NOW)
    assert d.verdict == Verdict.FENCE
    assert isinstance(d.actions[0], ClaimAction)
    wiped = facts(fenced_node(), held=entry(), pods=(pod("db-0"),))
    assert wiped.node is not None
    assert wiped.node.annotations == {}
    held = decide(event(), wiped, policy(), NOW)
    assert (held.verdict, kinds(held)) == (Verdict.PURGE, [PurgePodAction])


# --- resolved alert: unfence and its guards -------------------------------------------------------


def healthy_fenced(
    p: Policy | None = None, lease_age: float = 5, pods: tuple[PodFacts, ...] = ()
) -> Decision:
    return decide(event(RESOLVED), recovered(lease_age=lease_age, pods=pods), p or policy(), NOW)


def test_unfence_when_healthy() -> None:
    d = healthy_fenced()
    assert d.verdict == Verdict.UNFENCE
    action, release = d.actions
    assert isinstance(action, UnfenceAction)
    assert (action.node, action.node_uid, action.resource_version, action.effect) == (
        NODE,
        UID,
        "41",
        "NoExecute",
    )
    assert action.annotations == {mirror.UNFENCED_AT: "2026-11-30T08:20:00Z"}
    assert mirror.FENCED_BY in action.remove_annotations
    assert mirror.NODE_UID not in action.remove_annotations
    assert isinstance(release, ReleaseAction)
    assert (release.node, release.node_uid, release.remember) == (NODE, UID, True)
    assert not d.node_confirmed_down


def test_unfence_removes_the_recorded_effect() -> None:
    f = facts(
        fenced_node(ready="True", since=900, effect="NoSchedule"),
        lease_age=5,
        held=replace(entry(ready_seen=900), effect="NoSchedule"),
    )
    d = decide(event(RESOLVED), f, policy(), NOW)
    action = d.actions[0]
    assert isinstance(action, UnfenceAction)
    assert action.effect == "NoSchedule"


@pytest.mark.invariant("S4")
def test_s4_foreign_taint_is_never_removed() -> None:
    admin = Taint(OUT_OF_SERVICE_KEY, "NoExecute", "nodeshutdown")
    d = decide(
        event(RESOLVED),
        facts(node(ready="True", taints=(admin,)), lease_age=5),
        policy(),
        NOW,
    )
    assert (d.verdict, d.actions) == (Verdict.NOOP, ())
    assert "never removed" in message(d, "ownership")


@pytest.mark.invariant("S5")
def test_s5_healthy_delay() -> None:
    d = decide(event(RESOLVED), recovered(since=60), policy(), NOW)
    assert (d.verdict, blocked(d), d.actions) == (
        Verdict.DEFERRED,
        ["healthy-delay", "verdict"],
        (),
    )
    not_ready = decide(
        event(RESOLVED), facts(fenced_node(), lease_age=5, held=entry()), policy(), NOW
    )
    assert (not_ready.verdict, not_ready.actions) == (Verdict.DEFERRED, ())


@pytest.mark.invariant("S5", "S11")
def test_s5_s11_old_transition_does_not_shorten_the_delay() -> None:
    """A kubelet clock running behind stamps Ready ten minutes ago; nodefence first saw it
    Ready 30 s ago, and the delay counts from there."""
    d = decide(event(RESOLVED), recovered(since=600, seen=30), policy(), NOW)
    assert (d.verdict, d.actions) == (Verdict.DEFERRED, ())
    assert blocked(d) == ["healthy-delay", "verdict"]
    assert "Ready for only 30s" in message(d, "healthy-delay")


@pytest.mark.invariant("S5")
def test_s5_future_transition_does_not_shorten_the_delay_either() -> None:
    """A kubelet clock running ahead: the later of the two times (the transition) counts."""
    f = recovered(since=-300, seen=900)
    d = decide(event(RESOLVED), f, policy(), NOW)
    assert (d.verdict, d.actions) == (Verdict.DEFERRED, ())
    assert "healthy-delay" in blocked(d)


def test_first_sight_of_ready_records_when_it_was_seen() -> None:
    """Ready for 15 minutes by its transition, but never seen Ready by nodefence: the decision
    records this moment and defers; the delay starts now."""
    f = facts(fenced_node(ready="True", since=900), lease_age=5, held=entry())
    d = decide(event(RESOLVED), f, policy(), NOW)
    assert d.verdict == Verdict.DEFERRED
    (observe,) = d.actions
    assert observe == ObserveReadyAction(NODE, UID, ready_transition=ago(900), seen_at=NOW)
    assert "counts from here" in message(d, "healthy-delay")


def test_a_new_ready_transition_is_a_new_first_sight() -> None:
    """Seen Ready long ago, then the node went down and came back (a new transition): the
    earlier sighting no longer counts."""
    seen_before = entry(ready_seen=4000, ready_since=4000)
    f = facts(fenced_node(ready="True", since=60), lease_age=5, held=seen_before)
    d = decide(event(RESOLVED), f, policy(), NOW)
    assert d.verdict == Verdict.DEFERRED
    assert d.actions == (ObserveReadyAction(NODE, UID, ready_transition=ago(60), seen_at=NOW),)


@pytest.mark.invariant("S5")
def test_s5_boot_id_required() -> None:
    p = policy(rule={"require_new_boot_id": True})
    same = healthy_fenced(p=p)
    assert (same.verdict, "boot-id" in blocked(same)) == (Verdict.DEFERRED, True)
    f = recovered()
    assert f.node is not None
    rebooted = decide(event(RESOLVED), replace(f, node=replace(f.node, boot_id="boot-2")), p, NOW)
    assert rebooted.verdict == Verdict.UNFENCE


def test_unfence_needs_a_lease_renewal_stamped_by_the_server() -> None:
    assert blocked(healthy_fenced(lease_age=600)) == ["lease-fresh", "verdict"]
    no_lease = decide(event(RESOLVED), replace(recovered(), lease=None), policy(), NOW)
    assert blocked(no_lease) == ["lease-fresh", "verdict"]
    kubelet_only = replace(recovered(), lease=LeaseFacts(renew_time=NOW, server_renewed=None))
    assert blocked(decide(event(RESOLVED), kubelet_only, policy(), NOW)) == [
        "lease-fresh",
        "verdict",
    ]


def test_unfence_waits_for_terminating_pods() -> None:
    d = healthy_fenced(pods=(pod("db-0"),))
    assert blocked(d) == ["terminating-pods", "verdict"]


def test_resolved_for_unfenced_node_is_noop() -> None:
    d = decide(event(RESOLVED), facts(node(ready="True")), policy(), NOW)
    assert (d.verdict, d.actions) == (Verdict.NOOP, ())
    assert "nothing to undo" in message(d, "ownership")
    assert blocked(d) == []


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
    f = recovered()
    strict = replace(f, record=record(replace(f.record.entries[0], rule="strict")))
    d = decide(event(RESOLVED), strict, p, NOW)
    assert (d.rule, d.verdict) == ("strict", Verdict.DEFERRED)


# --- reconcile -------------------------------------------------------------------------------


def test_reconcile_unfences_recovered_node() -> None:
    d = decide_reconcile(recovered(), policy(), NOW, NODE)
    assert d.verdict == Verdict.UNFENCE
    assert kinds(d) == [UnfenceAction, ReleaseAction]
    assert (d.status, d.fingerprint, d.alertname) == ("reconcile", "fp-1", "KubeNodeNotReady")


def test_reconcile_purges_leftovers_and_defers() -> None:
    down = facts(fenced_node(), held=entry(), pods=(pod("db-0"),))
    d = decide_reconcile(down, policy(), NOW, NODE)
    assert d.verdict == Verdict.PURGE
    assert d.node_confirmed_down
    idle = decide_reconcile(facts(fenced_node(), held=entry()), policy(), NOW, NODE)
    assert (idle.verdict, idle.actions) == (Verdict.NOOP, ())
    early = decide_reconcile(recovered(since=30), policy(), NOW, NODE)
    assert (early.verdict, early.actions) == (Verdict.DEFERRED, ())


def test_reconcile_leaves_foreign_and_recreated_nodes() -> None:
    admin = node(ready="True", taints=(our_taint(),))
    foreign = decide_reconcile(facts(admin, lease_age=5), policy(), NOW, NODE)
    assert (foreign.verdict, foreign.actions) == (Verdict.NOOP, ())
    new = facts(fenced_node(ready="True", since=900, uid="uid-new"), lease_age=5)
    d = decide_reconcile(replace(new, record=record(entry(uid="uid-old"))), policy(), NOW, NODE)
    assert d.verdict == Verdict.NOOP
    (release,) = d.actions
    assert isinstance(release, ReleaseAction)
    assert release.node_uid == "uid-old"


def test_reconcile_does_not_purge_without_taint() -> None:
    f = facts(node(), held=entry(), pods=(pod("db-0"),))
    d = decide_reconcile(f, policy(), NOW, NODE)
    assert d.verdict == Verdict.NOOP
    assert kinds(d) == [ReleaseAction]
    assert not d.node_confirmed_down


# --- dry run -------------------------------------------------------------------------------------


def test_dry_run_keeps_verdict_and_actions_and_says_so() -> None:
    d = decide(event(), facts(), policy(dry_run=True), NOW)
    assert (d.verdict, d.dry_run) == (Verdict.FENCE, True)
    assert kinds(d) == [ClaimAction, FenceAction, ConfirmAction]
    assert "nothing will be written" in message(d, "dry-run")
