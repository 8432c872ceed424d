"""The engine against people and slow steps acting between nodefence's reads and writes.

Authorship of a taint (S4), the budget counted from the cluster's taints (S3), steps tied to the
entry their decision read (S7), exclusion and pause mid-fence, the bounded reboot, a record that
lost an entry: examples first, then hypothesis properties over generated facts.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta

import pytest
from engine_factories import (
    NODE,
    NOW,
    UID,
    ago,
    cluster,
    entry,
    event,
    facts,
    fenced_node,
    node,
    our_taint,
    pod,
    policy,
    record,
)
from engine_strategies import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from nodefence.engine import record as fence_record
from nodefence.engine.authorship import FIELD_MANAGER, taint_authorship
from nodefence.engine.decide import decide, decide_reconcile
from nodefence.engine.evidence import PowerEvidence
from nodefence.engine.identity import MachineBinding
from nodefence.engine.mirror import FENCED_AT, FENCED_BY, FENCED_BY_VALUE, NODE_UID, RULE
from nodefence.engine.model import (
    ClaimAction,
    ConfirmAction,
    Decision,
    NodeFacts,
    PowerAction,
    PurgePodAction,
    ReleaseAction,
    Taint,
    UnfenceAction,
    Verdict,
    VolumeAttachmentFacts,
)
from nodefence.engine.reboot import MAX_POWER_ONS
from nodefence.engine.record import FenceEntry, Phase
from nodefence.engine.wording import instant

OOS = "node.kubernetes.io/out-of-service"
ADMIN_TAINT = Taint(OOS, "NoExecute", "nodeshutdown")
REDFISH_REBOOT = {"fencing": {"driver": "redfish", "action": "reboot", "timeout_seconds": 30}}
REDFISH_OFF = {"fencing": {"driver": "redfish", "action": "off"}}


def admin_tainted(**kw: object) -> NodeFacts:
    """The node after an admin ran ``kubectl taint``: no timeAdded, kubectl-taint wrote it."""
    return node(taints=(ADMIN_TAINT,), taints_written_by=("kubectl-taint",), **kw)  # type: ignore[arg-type]


def reasons(d: Decision) -> str:
    return json.dumps([r.message for r in d.reasons])


def writes_under_taint(d: Decision) -> bool:
    """Whether the decision confirms, purges under or removes a taint."""
    return any(isinstance(a, ConfirmAction | PurgePodAction | UnfenceAction) for a in d.actions)


# ------------------------------------------------------------------ S4: authorship


def test_an_admins_taint_on_a_claimed_entry_lets_the_claim_go_and_is_never_confirmed() -> None:
    claimed = replace(entry(phase=Phase.CLAIMED, claimed=60), power_off_sent_at=ago(50))
    f = facts(admin_tainted(), held=claimed, pods=(pod("db-0"),))
    for d in (decide(event(), f, policy(), NOW), decide_reconcile(f, policy(), NOW, NODE)):
        assert not writes_under_taint(d), d.actions
        [release] = d.actions
        assert isinstance(release, ReleaseAction)
        assert release.claimed_by == claimed.claimed_by
        assert "kubectl-taint" in release.why
        assert "never read back as Off" in release.why


def test_nodefences_own_taint_after_a_lost_confirm_is_confirmed_with_its_time_added() -> None:
    f = facts(fenced_node(), held=entry(phase=Phase.CLAIMED, claimed=10), pods=(pod("db-0"),))
    d = decide_reconcile(f, policy(), NOW, NODE)
    confirm = next(a for a in d.actions if isinstance(a, ConfirmAction))
    assert confirm.taint_added == NOW


def test_a_taint_from_before_the_claim_is_not_nodefences() -> None:
    old = node(
        taints=(replace(our_taint(), time_added=ago(120)),), taints_written_by=(FIELD_MANAGER,)
    )
    verdict = taint_authorship(old, entry(phase=Phase.CLAIMED, claimed=60))
    assert not verdict.ours
    assert "timeAdded from after the claim" in verdict.why


def test_a_recorded_taint_replaced_by_an_admins_copy_is_let_go_not_removed() -> None:
    held = replace(entry(), taint_added=ago(3500))
    healthy = node(ready="True", since=900, taints=(ADMIN_TAINT,), taints_written_by=("kubectl",))
    f = facts(healthy, held=held, lease_age=5)
    for d in (decide(event(), f, policy(), NOW), decide_reconcile(f, policy(), NOW, NODE)):
        assert not any(isinstance(a, UnfenceAction) for a in d.actions)
        [release] = d.actions
        assert isinstance(release, ReleaseAction)
        assert "timeAdded is none" in release.why


def test_the_fence_write_stamps_its_taint_with_the_api_servers_time() -> None:
    d = decide(event(), facts(), policy(), NOW)
    assert d.verdict is Verdict.FENCE
    fence = next(a for a in d.actions if a.__class__.__name__ == "FenceAction")
    assert fence.time_added == NOW  # type: ignore[union-attr]


# ------------------------------------------------------------------ S3: the cluster's taints


def test_an_admins_hand_fenced_node_spends_the_budget() -> None:
    f = facts(cluster_=cluster(out_of_service=("worker-9",)))
    d = decide(event(), f, policy(), NOW)
    assert d.verdict is Verdict.NOOP
    [budget] = [r for r in d.reasons if r.guard == "fence-budget"]
    assert not budget.passed
    assert "worker-9" in budget.message


def test_the_nodes_own_taint_and_the_records_holders_are_not_counted_twice() -> None:
    other = entry(node_name="worker-2", uid="uid-2")
    f = facts(
        cluster_=cluster(out_of_service=("worker-2", NODE)),
        record_=record(other),
    )
    d = decide(event(), f, policy(cluster={"max_fenced_nodes": 2}), NOW)
    [budget] = [r for r in d.reasons if r.guard == "fence-budget"]
    assert budget.passed, budget.message


def orphaned(*, written_by: tuple[str, ...] = (FIELD_MANAGER,), uid: str = UID) -> NodeFacts:
    return node(
        taints=(our_taint(),),
        taints_written_by=written_by,
        annotations={
            FENCED_BY: FENCED_BY_VALUE,
            NODE_UID: uid,
            FENCED_AT: instant(ago(30)),
            RULE: "default",
        },
    )


def test_a_lost_entry_is_adopted_back_where_nodefence_wrote_the_taint() -> None:
    d = decide_reconcile(facts(orphaned()), policy(), NOW, NODE)
    [claim] = d.actions
    assert isinstance(claim, ClaimAction)
    assert claim.entry.phase is Phase.FENCED
    assert claim.entry.taint_added == NOW
    assert [r.guard for r in d.reasons if r.guard == "fence-record"] == ["fence-record"]


def test_a_lost_entry_is_reported_and_left_where_authorship_is_not_shown() -> None:
    for n in (orphaned(written_by=("kubectl-taint",)), orphaned(uid="uid-other")):
        d = decide_reconcile(facts(n), policy(), NOW, NODE)
        assert d.actions == ()
        [lost] = [r for r in d.reasons if r.guard == "fence-record"]
        assert not lost.passed
        assert "a person must" in lost.message


# ------------------------------------------------------------- exclusion and pause mid-fence


def test_exclusion_mid_fence_rolls_the_claim_back_and_says_what_the_machine_went_through() -> None:
    claimed = replace(entry(phase=Phase.CLAIMED, claimed=20), power_off_sent_at=ago(15))
    excluded = node(labels={"nodefence.io/exclude": "true"})
    for d in (
        decide(event(), facts(excluded, held=claimed), policy(rule=REDFISH_OFF), NOW),
        decide_reconcile(facts(excluded, held=claimed), policy(rule=REDFISH_OFF), NOW, NODE),
    ):
        [release] = d.actions
        assert isinstance(release, ReleaseAction)
        assert not release.remember
        assert "was excluded" in release.why
        assert "power-off was sent" in release.why


def test_pause_mid_fence_rolls_the_claim_back_but_never_a_written_fence() -> None:
    claimed = entry(phase=Phase.CLAIMED, claimed=20)
    paused = cluster(paused_reason="maintenance")
    d = decide_reconcile(facts(held=claimed, cluster_=paused), policy(), NOW, NODE)
    [release] = d.actions
    assert isinstance(release, ReleaseAction)
    assert "no power action had been sent" in release.why
    written = facts(fenced_node(), held=claimed, cluster_=paused)
    assert decide_reconcile(written, policy(), NOW, NODE).actions == ()


# ------------------------------------------------------------------ the reboot


def rebooting(
    *,
    sent: float | None,
    count: int = 0,
    pods: tuple = (),
    power: PowerEvidence | None = None,
    binding: MachineBinding | None = None,
) -> Decision:
    held = replace(
        entry(),
        power_on_sent_at=None if sent is None else ago(sent),
        power_on_count=count,
    )
    f = replace(facts(fenced_node(), held=held, pods=pods, power=power), machine=binding)
    return decide_reconcile(f, policy(rule=REDFISH_REBOOT), NOW, NODE)


def test_a_pod_nodefence_may_not_delete_never_holds_the_reboot_back() -> None:
    stuck = pod("db-0", finalizers=("example.com/protect",))
    d = rebooting(sent=None, pods=(stuck,))
    [power_on] = d.actions
    assert isinstance(power_on, PowerAction)
    assert (power_on.operation, power_on.send) == ("on", True)
    assert "default/db-0 (finalizer example.com/protect)" in reasons(d)


def test_a_purgeable_pod_is_purged_before_the_power_on() -> None:
    d = rebooting(sent=None, pods=(pod("db-0"),))
    assert all(isinstance(a, PurgePodAction) for a in d.actions)


def test_a_machine_still_off_after_its_power_on_is_read_then_powered_on_once_more() -> None:
    assert rebooting(sent=10).actions == (), "within the fencing timeout: wait"
    [read] = rebooting(sent=60).actions
    assert isinstance(read, PowerAction)
    assert (read.operation, read.send) == ("status", False)
    off = PowerEvidence("off", "redfish bmc", at=NOW)
    d = rebooting(sent=60, count=1, power=off)
    [again] = d.actions
    assert isinstance(again, PowerAction)
    assert (again.operation, again.send) == ("on", True)
    assert "once more" in reasons(d)
    on = PowerEvidence("on", "redfish bmc", at=NOW)
    assert rebooting(sent=60, count=1, power=on).actions == ()


def test_the_power_ons_are_bounded_and_the_decision_says_a_person_must_look() -> None:
    d = rebooting(sent=600, count=MAX_POWER_ONS, power=PowerEvidence("off", "bmc", at=NOW))
    assert d.actions == ()
    [stop] = [r for r in d.reasons if r.guard == "reboot"]
    assert not stop.passed
    assert "does not power it on again" in stop.message


def test_no_power_on_through_a_target_the_inventory_gives_two_nodes() -> None:
    """The inventory changed since the fence: the target may now be another node's machine,
    so neither its power state is read nor a power-on sent there (S10)."""
    shared = MachineBinding(NODE, "redfish https://bmc/1", "redfish", shared_with=("worker-2",))
    off = PowerEvidence("off", "redfish bmc", at=NOW)
    for d in (
        rebooting(sent=None, binding=shared),
        rebooting(sent=60, binding=shared),
        rebooting(sent=60, count=1, power=off, binding=shared),
    ):
        assert d.actions == (), d
        [stop] = [r for r in d.reasons if r.guard == "reboot"]
        assert not stop.passed
        assert "power the machine on by hand" in stop.message
        [identity] = [r for r in d.reasons if r.guard == "machine-identity"]
        assert "worker-2" in identity.message
    own = MachineBinding(NODE, "redfish https://bmc/1", "redfish")
    [power_on] = rebooting(sent=None, binding=own).actions
    assert isinstance(power_on, PowerAction)


# ------------------------------------------------------------------ S7 and the record


def test_every_step_forward_is_seen_as_the_entry_moving_on() -> None:
    start = entry(phase=Phase.CLAIMED, claimed=30)
    steps = [
        replace(start, power_off_sent_at=ago(29)),
        replace(start, power_off_sent_at=ago(29), phase=Phase.FENCED, fenced_at=ago(20)),
        replace(
            start,
            power_off_sent_at=ago(29),
            phase=Phase.FENCED,
            fenced_at=ago(20),
            power_on_sent_at=ago(10),
            power_on_count=1,
        ),
    ]
    seen = [start, *steps]
    for i, before in enumerate(seen):
        assert not fence_record.moved_on(before, before)
        for after in seen[i + 1 :]:
            assert fence_record.moved_on(before, after)
    assert [fence_record.progress(e) for e in seen] == [
        "claimed",
        "power-off sent",
        "fenced",
        "fenced, power-on sent (1x)",
    ]


def test_the_record_keeps_keys_it_does_not_own() -> None:
    raw = {"owner-note": "platform team", "fence.other": "not json"}
    current, _ = fence_record.from_configmap({"data": raw, "metadata": {"resourceVersion": "3"}})
    data = fence_record.encode(fence_record.with_entry(current, entry()), raw)
    assert data["owner-note"] == "platform team"
    assert data["fence.other"] == "not json"
    assert fence_record.FENCE_PREFIX + NODE in data


# ------------------------------------------------------------------ properties

writers = st.sampled_from([(), ("kubectl-taint",), (FIELD_MANAGER,), ("kubectl", FIELD_MANAGER)])
offsets = st.one_of(st.none(), st.integers(min_value=-3600, max_value=3600))


@st.composite
def foreign_or_own_taint(draw: st.DrawFn) -> tuple[NodeFacts, FenceEntry]:
    """An entry at any step, and an out-of-service taint that appeared at any moment, by any
    writer, with or without nodefence's timeAdded."""
    phase = draw(st.sampled_from(list(Phase)))
    claimed = draw(st.integers(min_value=1, max_value=7200))
    held = entry(phase=phase, claimed=claimed)
    if draw(st.booleans()):
        held = replace(held, power_off_sent_at=ago(max(0, claimed - 1)))
    recorded = draw(offsets)
    if phase is Phase.FENCED and recorded is not None:
        held = replace(held, taint_added=NOW - timedelta(seconds=recorded))
    added = draw(offsets)
    taint = Taint(
        OOS,
        draw(st.sampled_from(["NoExecute", "NoSchedule"])),
        draw(st.sampled_from(["nodeshutdown", "other"])),
        time_added=None if added is None else NOW - timedelta(seconds=added),
    )
    ready = draw(st.sampled_from(["True", "Unknown", "False"]))
    the_node = node(ready=ready, since=900, taints=(taint,), taints_written_by=draw(writers))
    return the_node, held


@pytest.mark.invariant("S4")
@settings(max_examples=examples(300), deadline=None)
@given(case=foreign_or_own_taint(), lease_age=st.sampled_from([5, 900]))
def test_s4_a_taint_not_shown_to_be_nodefences_is_never_confirmed_purged_under_or_removed(
    case: tuple[NodeFacts, FenceEntry], lease_age: int
) -> None:
    the_node, held = case
    f = facts(the_node, held=held, pods=(pod("db-0"),), lease_age=lease_age)
    ours = taint_authorship(the_node, held).ours
    taint = the_node.out_of_service_taint
    assert taint is not None
    if held.phase is Phase.CLAIMED and ours:
        # Shown by the API server: the last writer of spec.taints was nodefence, after the claim.
        assert FIELD_MANAGER in the_node.taints_written_by
        assert taint.time_added is not None
        assert taint.time_added >= held.claimed_at
    p = policy(rule={"healthy_delay_seconds": 0})
    for d in (
        decide(event(), f, p, NOW),
        decide(event(status=event().status.__class__("resolved")), f, p, NOW),
        decide_reconcile(f, p, NOW, NODE),
    ):
        if not ours:
            assert not writes_under_taint(d), (held, the_node, d.actions)


@st.composite
def cluster_with_taints(draw: st.DrawFn) -> tuple[tuple[str, ...], tuple[FenceEntry, ...], int]:
    names = [f"worker-{i}" for i in range(2, 8)]
    tainted = tuple(draw(st.lists(st.sampled_from(names), unique=True, max_size=5)))
    held = tuple(
        entry(node_name=n, uid=f"uid-{n}")
        for n in draw(st.lists(st.sampled_from(names), unique=True, max_size=4))
    )
    return tainted, held, draw(st.integers(min_value=0, max_value=5))


@pytest.mark.invariant("S3")
@settings(max_examples=examples(300), deadline=None)
@given(case=cluster_with_taints())
def test_s3_no_claim_beyond_the_budget_counting_taints_outside_the_record(
    case: tuple[tuple[str, ...], tuple[FenceEntry, ...], int],
) -> None:
    tainted, held, limit = case
    f = facts(
        cluster_=cluster(total_nodes=40, ready_nodes=39, out_of_service=tainted),
        record_=record(*held),
    )
    d = decide(event(), f, policy(cluster={"max_fenced_nodes": limit}), NOW)
    spent = len(({e.node for e in held} | set(tainted)) - {NODE})
    if any(isinstance(a, ClaimAction) for a in d.actions):
        assert spent < limit


@st.composite
def entry_at_any_step(draw: st.DrawFn) -> FenceEntry:
    phase = draw(st.sampled_from(list(Phase)))
    held = entry(phase=phase, claimed=draw(st.integers(min_value=1, max_value=3600)))
    if draw(st.booleans()):
        held = replace(held, power_off_sent_at=ago(1))
    if phase is Phase.FENCED and draw(st.booleans()):
        held = replace(
            held,
            power_on_sent_at=ago(draw(st.integers(min_value=0, max_value=3600))),
            power_on_count=draw(st.integers(min_value=0, max_value=3)),
        )
    return held


@pytest.mark.invariant("S7")
@settings(max_examples=examples(300), deadline=None)
@given(
    held=entry_at_any_step(),
    tainted=st.booleans(),
    power=st.sampled_from([None, "off", "on", "unknown"]),
    rule=st.sampled_from([REDFISH_OFF, REDFISH_REBOOT]),
)
def test_s7_a_power_action_is_tied_to_the_entry_its_decision_read(
    held: FenceEntry, tainted: bool, power: str | None, rule: dict[str, object]
) -> None:
    """Whatever step the incident is at, a power action the engine sends carries the entry
    exactly as read (or is sent right after the claim the same decision writes), so a replica
    whose step was delayed while another moved the entry on sends nothing."""
    the_node = fenced_node() if tainted else node()
    evidence = None if power is None else PowerEvidence(power, "bmc", at=NOW)
    f = facts(the_node, held=held, power=evidence)
    for d in (
        decide(event(), f, policy(rule=rule), NOW),
        decide_reconcile(f, policy(rule=rule), NOW, NODE),
    ):
        claims = [a for a in d.actions if isinstance(a, ClaimAction)]
        for action in d.actions:
            if isinstance(action, PowerAction) and action.send:
                if action.entry is None:
                    assert claims, d.actions
                else:
                    assert not fence_record.moved_on(action.entry, held)
                if held.phase is Phase.FENCED and action.operation == "on":
                    assert held.power_on_count < MAX_POWER_ONS
                if action.operation == "off":
                    assert held.power_off_sent_at is None or action.entry is None


# ------------------------------------------------------------------ the unfence gate


def test_the_unfence_waits_for_volume_attachments_from_before_the_fence() -> None:
    held = entry()
    assert held.fenced_at is not None
    old = VolumeAttachmentFacts(
        "csi-old", NODE, "pv-1", True, created=held.fenced_at - timedelta(1)
    )
    new = VolumeAttachmentFacts("csi-new", NODE, "pv-2", True, created=NOW)
    elsewhere = VolumeAttachmentFacts("csi-other", "worker-2", "pv-3", True, created=ago(9999))
    for attached, verdict in (
        ((old, new, elsewhere), Verdict.DEFERRED),
        ((new, elsewhere), Verdict.UNFENCE),
        (None, Verdict.DEFERRED),
    ):
        f = facts(
            node(
                ready="True", since=900, taints=(our_taint(),), taints_written_by=(FIELD_MANAGER,)
            ),
            held=replace(held, ready_seen_at=ago(900), ready_transition=ago(900)),
            lease_age=5,
            attachments=attached,
        )
        d = decide_reconcile(f, policy(), NOW, NODE)
        assert d.verdict is verdict, reasons(d)
        [gate] = [r for r in d.reasons if r.guard == "volume-attachments"]
        assert gate.passed is (verdict is Verdict.UNFENCE)
        if attached and old in attached:
            assert "csi-old" in gate.message
