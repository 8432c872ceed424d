"""What becomes of a fenced node's volumes is the engine's decision: the reason, and the
VolumeAttachments to delete (``ReleaseVolumeAttachmentAction``), decided on the node's
attachments read for the decision, only on a node nodefence holds fenced and found down (S1 and
S2 on the same facts), never in a refusal or a dry run, never while a pod with a claim is still
on the node; and the report of a fence carries what the loop found once it settled."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from engine_factories import (
    CLAIM_TOKEN,
    NODE,
    NOW,
    UID,
    entry,
    event,
    facts,
    fenced_node,
    lease,
    node,
    pod,
    policy,
)
from engine_strategies import PROFILE, all_decisions, cases
from hypothesis import given
from hypothesis import strategies as st

from nodefence.engine import guards
from nodefence.engine.decide import decide, decide_reconcile
from nodefence.engine.model import (
    Decision,
    Facts,
    Reason,
    ReleaseVolumeAttachmentAction,
    Verdict,
    VolumeAttachmentFacts,
    VolumesTurn,
)
from nodefence.engine.readiness import node_is_ready
from nodefence.engine.volumes import GUARD, seen
from nodefence.policy import Policy

OLD = "v1.24.8"
NEW = "v1.28.3"
MINE = (
    VolumeAttachmentFacts("csi-a", NODE, "pv-a", True, uid="uid-csi-a"),
    VolumeAttachmentFacts("csi-b", NODE, "pv-b", True, uid="uid-csi-b"),
)
ELSEWHERE = VolumeAttachmentFacts("csi-other", "worker-2", "pv-other", True)
CLEANUP: dict[str, Any] = {"volume_attachment_cleanup": True}


def on(version: str, the: Facts, attachments: tuple[VolumeAttachmentFacts, ...] | None) -> Facts:
    return replace(
        the, cluster=replace(the.cluster, server_version=version), attachments=attachments
    )


def fenced(
    *,
    version: str = OLD,
    attachments: tuple[VolumeAttachmentFacts, ...] | None = (*MINE, ELSEWHERE),
    **kw: Any,
) -> Facts:
    """A node nodefence fenced an hour ago, still dead."""
    return on(version, facts(fenced_node(), held=entry(), **kw), attachments)


def deletes(decision: Decision) -> list[str]:
    return [a.name for a in decision.actions if isinstance(a, ReleaseVolumeAttachmentAction)]


def said(decision: Decision) -> Reason | None:
    return next((r for r in decision.reasons if r.guard == GUARD), None)


def test_the_fence_decision_ends_with_the_volumes_left_attached() -> None:
    the = on(OLD, facts(), MINE)
    decision = decide(event(), the, policy(), NOW)
    assert decision.verdict is Verdict.FENCE
    last = decision.reasons[-1]
    assert last.guard == GUARD
    assert not last.passed
    assert last.message.startswith("VOLUMES NOT RELEASED: 2 VolumeAttachment(s)")
    assert deletes(decision) == []


def test_a_fence_without_the_attachments_read_asks_for_them_and_says_nothing_yet() -> None:
    decision = decide(event(), on(OLD, facts(), None), policy(), NOW)
    assert decision.verdict is Verdict.FENCE
    assert decision.needs_attachments
    assert said(decision) is None
    assert deletes(decision) == []


def test_a_server_that_detaches_itself_needs_no_list() -> None:
    decision = decide(event(), on(NEW, facts(), None), policy(), NOW)
    assert not decision.needs_attachments
    reason = said(decision)
    assert reason is not None
    assert reason.passed
    assert "detaches the volumes of an out-of-service node itself" in reason.message
    cleaned = decide_reconcile(fenced(version=NEW), policy(rule=CLEANUP), NOW, NODE)
    assert deletes(cleaned) == []


def test_cleanup_deletes_the_nodes_attachments_once_its_pods_are_gone() -> None:
    decision = decide_reconcile(fenced(), policy(rule=CLEANUP), NOW, NODE)
    assert decision.verdict is Verdict.NOOP
    assert deletes(decision) == ["csi-a", "csi-b"]
    releases = [a for a in decision.actions if isinstance(a, ReleaseVolumeAttachmentAction)]
    assert all(a.node_uid == UID for a in releases)
    # S9: each delete names the attachment it read, by UID.
    assert [a.uid for a in releases] == ["uid-csi-a", "uid-csi-b"]
    reason = said(decision)
    assert reason is not None
    assert reason.passed
    assert "deleting 2 VolumeAttachment(s)" in reason.message


def test_a_pod_with_a_claim_still_on_the_node_keeps_them() -> None:
    stuck = pod("db-0", has_pvc=True, finalizers=("example.com/keep",))
    decision = decide_reconcile(fenced(pods=(stuck,)), policy(rule=CLEANUP), NOW, NODE)
    assert deletes(decision) == []
    reason = said(decision)
    assert reason is not None
    assert not reason.passed
    assert "stay attached to" in reason.message


def test_an_attachment_already_being_deleted_is_not_deleted_again() -> None:
    going = (replace(MINE[0], deleting=True), MINE[1])
    decision = decide_reconcile(fenced(attachments=going), policy(rule=CLEANUP), NOW, NODE)
    assert deletes(decision) == ["csi-b"]


def test_a_repeated_alert_for_a_handled_node_says_nothing_of_volumes() -> None:
    """Without cleanup, a node already fenced and purged has nothing new to say; the request
    that fenced it (its own claim) does, since it reports what became of them."""
    quiet = decide(event(), fenced(), policy(), NOW, own_claim="another-request/0")
    assert quiet.verdict is Verdict.NOOP
    assert said(quiet) is None
    assert not quiet.needs_attachments
    own = decide(event(), fenced(), policy(), NOW, own_claim=CLAIM_TOKEN)
    reason = said(own)
    assert reason is not None
    assert reason.message.startswith("VOLUMES NOT RELEASED")
    assert own.actions == ()


def test_a_node_showing_life_gets_no_volume_decision() -> None:
    alive = replace(fenced(), lease=lease(5))
    decision = decide_reconcile(alive, policy(rule=CLEANUP), NOW, NODE)
    assert deletes(decision) == []
    assert said(decision) is None
    assert not decision.needs_attachments


def test_a_dry_run_says_nothing_of_volumes_and_deletes_nothing() -> None:
    dry = policy(rule=CLEANUP, dry_run=True)
    for decision in (
        decide(event(), on(OLD, facts(), MINE), dry, NOW),
        decide_reconcile(fenced(), dry, NOW, NODE),
    ):
        assert said(decision) is None, decision
        assert deletes(decision) == []
        assert not decision.needs_attachments


def test_a_refused_fence_gets_no_volume_decision() -> None:
    alive = on(OLD, facts(node(ready="True")), MINE)
    decision = decide(event(), alive, policy(rule=CLEANUP), NOW)
    assert decision.verdict is not Verdict.FENCE
    assert said(decision) is None
    assert deletes(decision) == []


# ------------------------------------------------------------- the fence request's report


def reasoned(message: str, *, passed: bool = False, deleting: bool = False) -> Decision:
    actions = (ReleaseVolumeAttachmentAction(NODE, UID, "csi-a", "pv-a"),) if deleting else ()
    return Decision(Verdict.NOOP, NODE, (Reason(GUARD, passed, message),), actions)


QUIET = Decision(Verdict.NOOP, NODE, (Reason("verdict", True, "nothing left"),))
# A fresh fence whose volumes stay attached: its own volumes reason says so.
AT_FENCE = on(OLD, facts(), MINE)


def reported(turns: list[Decision]) -> Decision:
    """The fence decided again once the loop settled, with what ``turns`` decided of volumes."""
    settled = replace(AT_FENCE, settled_volumes=tuple(seen(turn) for turn in turns))
    return decide(event(), settled, policy(), NOW)


def test_the_report_ends_with_what_the_last_turn_found() -> None:
    fence = decide(event(), AT_FENCE, policy(), NOW)
    report = reported([reasoned("while purging"), reasoned("settled"), QUIET])
    assert [r.message for r in report.reasons] == [
        *(r.message for r in fence.reasons[:-1]),
        "settled",
    ]
    assert report.verdict is Verdict.FENCE
    assert report.actions == fence.actions


def test_the_turn_that_deleted_outranks_the_turns_that_find_them_gone() -> None:
    turns = [reasoned("deleting 2", passed=True, deleting=True), reasoned("none", passed=True)]
    assert reported(turns).reasons[-1].message == "deleting 2"


def test_without_turns_the_fence_reports_its_own_volumes_reason() -> None:
    fence = decide(event(), AT_FENCE, policy(), NOW)
    assert reported([]) == fence
    assert reported([QUIET]) == fence


# ---------------------------------------------------------------------------- properties

attachment_sets = st.lists(
    st.builds(
        VolumeAttachmentFacts,
        name=st.sampled_from(["csi-1", "csi-2", "csi-3"]),
        node_name=st.sampled_from([NODE, "worker-2"]),
        persistent_volume=st.sampled_from(["pv-1", "pv-2"]),
        attached=st.booleans(),
        deleting=st.booleans(),
    ),
    max_size=3,
).map(tuple)
versions = st.sampled_from([OLD, NEW, "", "v1.25.0"])


def with_cleanup(the: Policy, cleanup: bool, *, dry_run: bool | None = None) -> Policy:
    rules = [r.model_copy(update={"volume_attachment_cleanup": cleanup}) for r in the.rules]
    update: dict[str, Any] = {"rules": rules}
    if dry_run is not None:
        update["dry_run"] = dry_run
    return the.model_copy(update=update)


@PROFILE
@given(
    case=cases,
    attachments=st.one_of(st.none(), attachment_sets),
    version=versions,
    cleanup=st.booleans(),
)
def test_volume_deletes_only_where_the_node_is_fenced_down_and_no_claim_is_on_it(
    case: tuple[Any, Facts, Policy, Any],
    attachments: tuple[VolumeAttachmentFacts, ...] | None,
    version: str,
    cleanup: bool,
) -> None:
    event_, the, the_policy, approval = case
    the = on(version, the, attachments)
    the_policy = with_cleanup(the_policy, cleanup)
    for decision in all_decisions(event_, the, the_policy, approval):
        names = deletes(decision)
        if not names:
            continue
        node_ = the.node
        assert node_ is not None
        assert not decision.dry_run
        assert decision.node_confirmed_down
        assert decision.verdict in (Verdict.FENCE, Verdict.PURGE, Verdict.NOOP), decision
        # S1 and S2 were checked on these very facts and showed the node dead.
        assert not node_is_ready(node_)
        assert all(r.passed for r in decision.reasons if r.guard in (guards.READY, guards.LEASE))
        assert not any(p.has_pvc and p.node_name == node_.name for p in the.pods), decision
        listed = {a.name for a in attachments or () if a.node_name == node_.name}
        assert set(names) <= listed
        assert version not in (NEW,), "a server that detaches itself is never helped"
        reason = said(decision)
        assert reason is not None
        assert reason.passed


@st.composite
def fenced_cases(draw: st.DrawFn) -> tuple[Facts, Policy, str]:
    """A node nodefence fenced, dead or coming back, with pods (with and without claims, still
    running or Terminating) and VolumeAttachments on it and elsewhere: where the deletes are."""
    the_node = fenced_node(ready=draw(st.sampled_from(["Unknown", "Unknown", "False", "True"])))
    pods = tuple(
        pod(
            f"p-{i}",
            node_name=draw(st.sampled_from([NODE, NODE, "worker-2"])),
            terminating=draw(st.booleans()),
            has_pvc=draw(st.sampled_from([False, False, True])),
            finalizers=draw(st.sampled_from([(), ("example.com/keep",)])),
        )
        for i in range(draw(st.integers(0, 3)))
    )
    the = facts(
        the_node,
        held=entry(),
        pods=pods,
        lease_age=draw(st.sampled_from([900, 900, 900, 5, None])),
    )
    version = draw(st.sampled_from([OLD, OLD, "", NEW]))
    the = on(version, the, draw(st.sampled_from([MINE, MINE, (*MINE, ELSEWHERE), None])))
    rule = {**CLEANUP} if draw(st.sampled_from([True, True, False])) else {}
    the_policy = policy(rule=rule, dry_run=draw(st.sampled_from([False, False, False, True])))
    return the, the_policy, draw(st.sampled_from([CLAIM_TOKEN, ""]))


@PROFILE
@given(case=fenced_cases())
def test_a_fenced_node_loses_its_attachments_only_when_down_and_no_claim_is_on_it(
    case: tuple[Facts, Policy, str],
) -> None:
    the, the_policy, own_claim = case
    for decision in (
        decide(event(), the, the_policy, NOW, own_claim=own_claim),
        decide_reconcile(the, the_policy, NOW, NODE),
    ):
        names = deletes(decision)
        if decision.dry_run or not decision.node_confirmed_down:
            assert names == []
            assert said(decision) is None
            assert not decision.needs_attachments
        if not names:
            continue
        assert the.node is not None
        assert not node_is_ready(the.node)
        assert all(r.passed for r in decision.reasons if r.guard in (guards.READY, guards.LEASE))
        assert not any(p.has_pvc and p.node_name == NODE for p in the.pods)
        assert the_policy.rules[0].volume_attachment_cleanup
        assert set(names) <= {a.name for a in the.attachments or () if a.node_name == NODE}
        assert the.cluster.server_version != NEW


def test_the_fenced_cases_reach_the_deletes() -> None:
    """The property above is only worth its name if its cases delete something."""
    seen: list[int] = []

    @PROFILE
    @given(case=fenced_cases())
    def count(case: tuple[Facts, Policy, str]) -> None:
        the, the_policy, _own = case
        seen.append(len(deletes(decide_reconcile(the, the_policy, NOW, NODE))))

    count()
    assert any(seen)


@PROFILE
@given(case=cases, attachments=st.one_of(st.none(), attachment_sets), version=versions)
def test_a_dry_run_never_decides_anything_about_volumes(
    case: tuple[Any, Facts, Policy, Any],
    attachments: tuple[VolumeAttachmentFacts, ...] | None,
    version: str,
) -> None:
    event_, the, the_policy, approval = case
    the = on(version, the, attachments)
    dry = with_cleanup(the_policy, True, dry_run=True)
    for decision in all_decisions(event_, the, dry, approval):
        assert deletes(decision) == []
        assert said(decision) is None
        assert not decision.needs_attachments


@PROFILE
@given(case=cases, version=versions, cleanup=st.booleans())
def test_only_a_decision_on_a_node_found_down_asks_for_the_attachments(
    case: tuple[Any, Facts, Policy, Any], version: str, cleanup: bool
) -> None:
    event_, the, the_policy, approval = case
    the = on(version, the, None)
    for decision in all_decisions(event_, the, with_cleanup(the_policy, cleanup), approval):
        assert deletes(decision) == []
        if decision.needs_attachments:
            assert decision.node_confirmed_down
            assert not decision.dry_run
            assert version != NEW
            assert said(decision) is None


# What the settle turns may have decided of the volumes: a reason or none, a delete or none.
volume_turns = st.lists(
    st.builds(
        VolumesTurn,
        st.one_of(
            st.none(),
            st.builds(
                Reason,
                st.just(GUARD),
                st.booleans(),
                st.sampled_from(["deleting 2", "none attached", "2 stay attached"]),
            ),
        ),
        st.booleans(),
    ),
    max_size=4,
).map(tuple)


@st.composite
def fresh_fences(draw: st.DrawFn) -> tuple[Facts, Policy, str]:
    """A node nodefence has not fenced, dead, with pods (with and without claims) and
    VolumeAttachments on it: a fence decision that says what becomes of them."""
    pods = tuple(
        pod(f"p-{i}", has_pvc=draw(st.sampled_from([False, False, True])))
        for i in range(draw(st.integers(0, 2)))
    )
    version = draw(st.sampled_from([OLD, OLD, "", NEW]))
    the = on(version, facts(pods=pods), draw(st.sampled_from([MINE, (*MINE, ELSEWHERE), ()])))
    rule = {**CLEANUP} if draw(st.sampled_from([True, True, False])) else {}
    return the, policy(rule=rule), CLAIM_TOKEN


@PROFILE
@given(case=st.one_of(fresh_fences(), fenced_cases()), turns=volume_turns)
def test_decided_again_with_the_settle_turns_a_decision_reports_what_they_found_of_its_volumes(
    case: tuple[Facts, Policy, str], turns: tuple[VolumesTurn, ...]
) -> None:
    """The engine decides from the turns' findings (``Facts.settled_volumes``) what a rewrite of
    the finished decision used to say: the same decision, its volumes reason last and replaced
    by the last turn's that deleted VolumeAttachments, else the last turn's that said anything,
    else its own; a decision that says nothing of volumes is not changed by them."""
    the, the_policy, own_claim = case
    decision = decide(event(), the, the_policy, NOW, own_claim=own_claim)
    settled_facts = replace(the, settled_volumes=turns)
    report = decide(event(), settled_facts, the_policy, NOW, own_claim=own_claim)
    own = said(decision)
    if own is None:
        assert report == decision
        return
    candidates = [(own, bool(deletes(decision)))]
    candidates += [(t.reason, t.deleted) for t in turns if t.reason is not None]
    chosen = ([r for r, gone in candidates if gone] or [r for r, _ in candidates])[-1]
    kept = tuple(r for r in decision.reasons if r.guard != GUARD)
    assert report == replace(decision, reasons=(*kept, chosen))


def test_a_settle_turn_is_seen_as_its_last_volumes_reason_and_whether_it_deleted() -> None:
    assert seen(QUIET) == VolumesTurn(None, False)
    assert seen(reasoned("deleting 2", passed=True, deleting=True)) == VolumesTurn(
        Reason(GUARD, True, "deleting 2"), True
    )
    decision = decide_reconcile(fenced(), policy(rule=CLEANUP), NOW, NODE)
    assert seen(decision) == VolumesTurn(said(decision), True)
