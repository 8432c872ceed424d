"""``fencing.on_failure: approval``: a power step that genuinely failed is put to a person, whose
approval stands in for the proof S10 asks for; every other guard still applies, a rejection holds,
a power-off already sent is never sent again, and a wrong inventory (identity mismatch, a system
two nodes share) is never escalated. With ``refuse`` (the default) nothing changes: no proof, no
taint."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest
from engine_factories import (
    CLAIM_TOKEN,
    NODE,
    NOW,
    UID,
    ago,
    cluster,
    entry,
    event,
    facts,
    node,
    record,
)
from engine_strategies import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import SecretStr

from nodefence.engine import escalation
from nodefence.engine import record as fence_record
from nodefence.engine.approval_request import ApprovalRequest, Incident
from nodefence.engine.decide import decide, decide_reconcile
from nodefence.engine.evidence import PowerEvidence
from nodefence.engine.identity import PLUG, MachineBinding, Reported
from nodefence.engine.model import (
    Approval,
    ApprovalDecision,
    AskApprovalAction,
    ClaimAction,
    ConfirmAction,
    Decision,
    Facts,
    FenceAction,
    PowerAction,
    ReleaseAction,
    Verdict,
)
from nodefence.engine.record import Phase
from nodefence.errors import ConfigError
from nodefence.policy import Policy, PolicyError, parse_policy
from nodefence.settings import Settings
from nodefence.slack.routes import check_slack_settings

MACHINE = "4c4c4544-0042-3010-8050-b7c04f4e3332"
OTHER = "4c4c4544-0042-3010-8050-b7c04f4e9999"
SOURCE = "redfish https://bmc-1.example/redfish/v1/Systems/1"
UNAUTHORISED = "HTTP 401 from the BMC: invalid user name or password"
PROFILE = settings(
    max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def redfish(on_failure: str = "approval", action: str = "off", **rule: Any) -> Policy:
    fencing = {"driver": "redfish", "action": action, "on_failure": on_failure}
    body = {"name": "default", "fencing": fencing, **rule}
    return parse_policy({"rules": [body]}, "<test>")


def binding(**overrides: Any) -> MachineBinding:
    return MachineBinding(
        **{"node": NODE, "target": SOURCE, "driver": "redfish", "expected": MACHINE, **overrides}
    )


def refused_login() -> PowerEvidence:
    """What the power step hands back when the BMC refused the login at the identity read:
    nothing was sent, nothing is known."""
    said = Reported("", SOURCE, detail=UNAUTHORISED)
    return PowerEvidence(
        "unknown",
        SOURCE,
        f"no power off sent: {SOURCE} did not report which machine it controls "
        f"({UNAUTHORISED}): not shown to be node {NODE}'s machine",
        at=ago(1),
        identity=said,
    )


def stuck_on() -> PowerEvidence:
    """A power-off that went out and was never read back as Off in time."""
    return PowerEvidence(
        "unknown",
        SOURCE,
        "sent ForceOff; the system still reports On after 15s",
        at=ago(1),
        action_sent=True,
        reset_sent=True,
    )


def the_facts(power: PowerEvidence | None, *, asked: bool = True, **overrides: Any) -> Facts:
    """The facts of a request whose power step handed back ``power``; ``asked``: the fence
    record holds the question a person was asked about that very failure, as it does when
    they press a button (an approval stands in only for the failure it was asked about)."""
    made = dataclasses.replace(facts(power=power, **overrides), machine=binding())
    failed = escalation.failure(redfish().rules[0], made.node or node(), made)
    if not asked or failed is None or made.record.approval(NODE) is not None:
        return made
    question = dataclasses.replace(asked_in_slack(), subject=failed.subject)
    return dataclasses.replace(made, record=fence_record.with_approval(made.record, question))


def approved(by: str = "U0ONCALL", *, uid: str = UID, age: float = 30) -> Approval:
    return Approval(by, ago(age), ApprovalDecision.APPROVE, uid, "fp-1")


def rejected(by: str = "U0ONCALL") -> Approval:
    return Approval(by, ago(30), ApprovalDecision.REJECT, UID, "fp-1")


def fences(decision: Decision) -> bool:
    return any(isinstance(a, FenceAction) for a in decision.actions)


def note(decision: Decision) -> str:
    found = escalation.is_escalation(decision.reasons)
    return found.message if found is not None else ""


# ------------------------------------------------------------------ the escalation itself
def test_a_refused_login_is_escalated_with_the_bmcs_error() -> None:
    decision = decide(event(), the_facts(refused_login()), redfish(), NOW)
    assert decision.verdict is Verdict.AWAIT_APPROVAL
    assert not fences(decision)
    assert decision.actions == ()
    assert UNAUTHORISED in note(decision)
    assert escalation.labels(escalation.is_escalation(decision.reasons)) == (  # type: ignore[arg-type]
        "redfish",
        "driver-error",
    )
    waiting = next(r for r in decision.reasons if r.guard == "approval")
    assert not waiting.passed
    assert "could not prove" in waiting.message
    assert UNAUTHORISED in waiting.message


def test_an_approval_then_stands_in_for_the_proof_and_says_so() -> None:
    decision = decide(
        event(), the_facts(refused_login()), redfish(), NOW, approval=approved("U0ONCALL")
    )
    assert decision.verdict is Verdict.FENCE
    assert fences(decision)
    [confirm] = [a for a in decision.actions if isinstance(a, ConfirmAction)]
    assert confirm.proof.startswith(f"{escalation.NO_PROOF}: ")
    assert UNAUTHORISED in confirm.proof
    assert confirm.proof.endswith(f"approved by U0ONCALL at {ago(30):%Y-%m-%dT%H:%M:%SZ}")
    assert confirm.approval.startswith("approved by U0ONCALL")
    [claim] = [a for a in decision.actions if isinstance(a, ClaimAction)]
    assert claim.entry.approval.startswith("approved by U0ONCALL")
    assert all(r.passed for r in decision.reasons), decision.reasons
    verdict = next(r for r in decision.reasons if r.guard == "verdict")
    assert f"{escalation.NO_PROOF}: " in verdict.message
    assert "proof: no power-off proof" not in verdict.message
    assert not any(isinstance(a, PowerAction) for a in decision.actions)


def test_with_refuse_the_same_failure_is_no_taint_and_nobody_is_asked() -> None:
    for approval in (None, approved()):
        decision = decide(
            event(), the_facts(refused_login()), redfish("refuse"), NOW, approval=approval
        )
        assert decision.verdict is Verdict.NOOP
        assert not fences(decision)
        assert note(decision) == ""


def test_nothing_is_escalated_before_the_power_step_was_tried() -> None:
    """Without this request's evidence the BMC is asked first, approval or not."""
    for approval in (None, approved()):
        decision = decide(event(), the_facts(None), redfish(), NOW, approval=approval)
        assert decision.verdict is Verdict.FENCE
        assert not fences(decision)
        [step] = [a for a in decision.actions if isinstance(a, PowerAction)]
        assert step.operation == "off"
        assert step.send
        assert note(decision) == ""


def test_a_state_read_as_on_under_verify_is_escalated_as_not_off() -> None:
    reading = PowerEvidence(
        "on", SOURCE, "the system reports On", at=ago(1), identity=Reported(MACHINE, SOURCE)
    )
    decision = decide(event(), the_facts(reading), redfish(action="verify"), NOW)
    assert decision.verdict is Verdict.AWAIT_APPROVAL
    assert "not-off" in note(decision)


# ------------------------------------------------------------ a power-off already sent
def test_a_power_off_not_read_back_keeps_its_claim_while_a_person_is_asked() -> None:
    claimed = dataclasses.replace(entry(phase=Phase.CLAIMED, claimed=20), power_off_sent_at=ago(18))
    the = the_facts(stuck_on(), record_=record(claimed))
    decision = decide(event(), the, redfish(), NOW, own_claim=CLAIM_TOKEN)
    assert decision.verdict is Verdict.AWAIT_APPROVAL
    assert "timeout" in note(decision)
    # The claim (and its powerOffSentAt) stays, so the power-off is never sent again.
    assert not any(isinstance(a, ReleaseAction) for a in decision.actions)


def test_approved_after_a_power_off_completes_the_claim_without_sending_again() -> None:
    claimed = dataclasses.replace(entry(phase=Phase.CLAIMED, claimed=20), power_off_sent_at=ago(18))
    # Before the step: the approval does not skip it, and what went out is only read back.
    before = decide(
        event(), the_facts(None, record_=record(claimed)), redfish(), NOW, approval=approved()
    )
    [step] = [a for a in before.actions if isinstance(a, PowerAction)]
    assert not step.send
    after = decide(
        event(),
        the_facts(stuck_on(), record_=record(claimed)),
        redfish(),
        NOW,
        approval=approved(),
        own_claim=CLAIM_TOKEN,
    )
    assert after.verdict is Verdict.FENCE
    [confirm] = [a for a in after.actions if isinstance(a, ConfirmAction)]
    assert confirm.claimed_by == CLAIM_TOKEN
    assert confirm.approval.startswith("approved by U0ONCALL")
    assert "still reports On" in confirm.proof
    assert not any(isinstance(a, PowerAction | ClaimAction) for a in after.actions)


def asked_in_slack(expires_in: float = 3000) -> ApprovalRequest:
    """The question about this incident, as the fence record holds it once posted."""
    asked_node = node()
    return ApprovalRequest(
        NODE,
        Incident.of(asked_node, "fp-1"),
        requested_at=ago(600),
        expires_at=NOW + timedelta(seconds=expires_in),
        claimed_by=CLAIM_TOKEN,
        channel="C0NODEFENCE",
        ts="1796150149.000001",
    )


def old_claim_with_power_off_sent() -> Any:
    """Claimed and powered off 20 minutes ago: far past the claim timeout (5 minutes)."""
    claimed = entry(phase=Phase.CLAIMED, claimed=1200)
    return dataclasses.replace(claimed, power_off_sent_at=ago(1190), fingerprint="fp-1")


@pytest.mark.parametrize("own", ["", CLAIM_TOKEN])
def test_a_slow_answer_finds_the_claim_and_its_power_off_mark_kept(own: str) -> None:
    """However long the person takes, the claim whose power-off went out is not rolled back,
    so their approval never sends the power-off a second time."""
    held = old_claim_with_power_off_sent()
    the = the_facts(stuck_on(), record_=record(held))
    waiting = decide(event(), the, redfish(), NOW, own_claim=own)
    assert waiting.verdict is Verdict.AWAIT_APPROVAL
    assert not any(isinstance(a, ReleaseAction) for a in waiting.actions)
    # The reconcile pass leaves it too while the question is open...
    asked = dataclasses.replace(the, power=None)
    asked = dataclasses.replace(
        asked, record=dataclasses.replace(asked.record, approvals=(asked_in_slack(),))
    )
    kept = decide_reconcile(asked, redfish(), NOW, NODE)
    assert not any(isinstance(a, ReleaseAction) for a in kept.actions)
    assert "a person is asked in Slack" in kept.summary
    # ...and the answer only reads the machine again.
    before = decide(event(), asked, redfish(), NOW, approval=approved(), own_claim=own)
    [step] = [a for a in before.actions if isinstance(a, PowerAction)]
    assert not step.send


def test_without_an_open_question_an_old_claim_is_rolled_back_as_before() -> None:
    held = old_claim_with_power_off_sent()
    expired = dataclasses.replace(asked_in_slack(), expires_at=ago(1))
    for approvals in ((), (expired,)):
        the = the_facts(None, record_=record(held))
        the = dataclasses.replace(the, record=dataclasses.replace(the.record, approvals=approvals))
        decision = decide_reconcile(the, redfish(), NOW, NODE)
        assert any(isinstance(a, ReleaseAction) for a in decision.actions), approvals
    # A node back Ready is not held for a question nobody needs answered any more.
    ready = the_facts(None, the_node=node(ready="True"), record_=record(held))
    ready = dataclasses.replace(
        ready, record=dataclasses.replace(ready.record, approvals=(asked_in_slack(),))
    )
    assert any(
        isinstance(a, ReleaseAction) for a in decide_reconcile(ready, redfish(), NOW, NODE).actions
    )


# ---------------------------------------------------------------- what is never escalated
def test_an_identity_mismatch_is_a_wrong_inventory_and_never_escalated() -> None:
    reading = PowerEvidence(
        "off",
        SOURCE,
        "the system reports Off",
        at=ago(1),
        action_sent=True,
        reset_sent=True,
        identity=Reported(OTHER, SOURCE),
    )
    for approval in (None, approved()):
        decision = decide(event(), the_facts(reading), redfish(), NOW, approval=approval)
        assert decision.verdict is Verdict.NOOP
        assert not fences(decision)
        assert note(decision) == ""
        assert any(r.guard == "machine-identity" and not r.passed for r in decision.reasons)


def test_a_system_two_nodes_share_is_never_escalated() -> None:
    shared = dataclasses.replace(
        the_facts(refused_login()), machine=binding(shared_with=("worker-2",))
    )
    decision = decide(event(), shared, redfish(), NOW, approval=approved())
    assert decision.verdict is Verdict.NOOP
    assert not fences(decision)
    assert note(decision) == ""


def test_a_fence_agent_that_failed_is_escalated_and_one_acting_on_another_vm_is_not() -> None:
    server = "5f0c2a1e-8d6b-4c1e-9a3f-2b7d9e0c4a11"
    agent = "fence-agent fence_openstack"
    rule = {"name": "default", "fencing": {"driver": "fence-agent", "on_failure": "approval"}}
    policy = parse_policy({"rules": [rule]})
    vm = dataclasses.replace(node(), provider_id=f"openstack:///{server}")
    bound = MachineBinding(node=NODE, target=agent, driver="fence-agent")
    failed = PowerEvidence(
        "unknown", agent, "status exited 1: Failed: Unable to obtain correct plug status", ago(1)
    )
    made = dataclasses.replace(facts(vm, power=failed), machine=bound)
    asked = decide(event(), made, policy, NOW)
    assert asked.verdict is Verdict.AWAIT_APPROVAL
    assert "Unable to obtain correct plug status" in note(asked)
    assert "driver fence-agent, driver-error" in note(asked)
    elsewhere = PowerEvidence(
        "off",
        agent,
        "status exited 2",
        ago(1),
        action_sent=True,
        reset_sent=True,
        identity=Reported("another-vm", agent, basis=PLUG, agent="fence_openstack"),
    )
    wrong = dataclasses.replace(facts(vm, power=elsewhere), machine=bound)
    for approval in (None, approved()):
        refused = decide(event(), wrong, policy, NOW, approval=approval)
        assert refused.verdict is Verdict.NOOP
        assert not fences(refused)
        assert note(refused) == ""


# ------------------------------------------------------------- every other guard applies
@pytest.mark.parametrize(
    ("why", "overrides"),
    [
        ("ready", {"the_node": node(ready="True")}),
        ("lease", {"lease_age": 10}),
        ("budget", {"record_": record(entry(node_name="worker-2", uid="uid-2"))}),
        ("storm", {"cluster_": cluster(total_nodes=10, ready_nodes=2)}),
    ],
)
def test_an_approval_never_overrides_the_other_guards(why: str, overrides: Any) -> None:
    decision = decide(
        event(), the_facts(refused_login(), **overrides), redfish(), NOW, approval=approved()
    )
    assert not fences(decision), why
    assert decision.verdict is not Verdict.AWAIT_APPROVAL, why


def test_a_rejection_holds_before_any_power_step() -> None:
    decision = decide(event(), the_facts(None), redfish(), NOW, approval=rejected())
    assert decision.verdict is Verdict.NOOP
    assert decision.actions == ()
    assert any("rejected by U0ONCALL" in r.message for r in decision.reasons)
    after = decide(event(), the_facts(refused_login()), redfish(), NOW, approval=rejected())
    assert after.verdict is Verdict.NOOP
    assert not fences(after)


@pytest.mark.parametrize(
    "answer",
    [approved(uid="uid-recreated"), approved(age=7200), approved(age=-120)],
    ids=["another node object", "too old", "from the future"],
)
def test_an_answer_that_does_not_fit_keeps_waiting(answer: Approval) -> None:
    decision = decide(event(), the_facts(refused_login()), redfish(), NOW, approval=answer)
    assert decision.verdict is Verdict.AWAIT_APPROVAL
    assert not fences(decision)


# ---------------------------------------------------------------------- configuration
def test_on_failure_defaults_to_refuse_and_needs_a_power_driver() -> None:
    fencing = redfish("refuse").rules[0].fencing
    assert fencing is not None
    assert fencing.on_failure == "refuse"
    plain = parse_policy({"rules": [{"fencing": {"driver": "ipmi"}}]})
    assert plain.rules[0].fencing is not None
    assert plain.rules[0].fencing.on_failure == "refuse"
    with pytest.raises(PolicyError, match="on_failure approval escalates a failed power step"):
        parse_policy({"rules": [{"fencing": {"driver": "annotation", "on_failure": "approval"}}]})
    with pytest.raises(PolicyError, match="on_failure"):
        parse_policy({"rules": [{"fencing": {"driver": "redfish", "on_failure": "ask"}}]})


def test_on_failure_approval_without_slack_settings_refuses_to_start() -> None:
    settings_ = Settings(alert_token=SecretStr("t"))
    with pytest.raises(ConfigError) as raised:
        check_slack_settings(settings_, redfish())
    message = str(raised.value)
    assert "fencing.on_failure: approval" in message
    assert "'default'" in message
    assert "NODEFENCE_SLACK_BOT_TOKEN" in message
    assert "NODEFENCE_SLACK_APPROVERS" in message
    # refuse needs nothing of Slack.
    check_slack_settings(settings_, redfish("refuse"))


# ----------------------------------------------------------------------------- S10
evidence = st.one_of(
    st.none(),
    st.builds(
        PowerEvidence,
        state=st.sampled_from(["on", "off", "unknown"]),
        source=st.just(SOURCE),
        detail=st.sampled_from(["", UNAUTHORISED, "sent ForceOff; still On"]),
        at=st.just(ago(1)),
        action_sent=st.booleans(),
        identity=st.one_of(
            st.none(),
            st.builds(
                Reported,
                value=st.sampled_from([MACHINE, OTHER, ""]),
                source=st.just(SOURCE),
                detail=st.sampled_from(["", UNAUTHORISED]),
            ),
        ),
        reset_sent=st.booleans(),
    ),
)
# Weighted towards the cases that decide something: a dead node, a proper binding, a valid answer.
bindings = st.sampled_from(
    [binding(), binding(), binding(), binding(unchecked=True), binding(shared_with=("w-2",)), None]
)
answers = st.sampled_from(
    [
        approved(),
        approved(),
        approved(),
        rejected(),
        approved(uid="uid-recreated"),
        approved(age=7200),
        approved(age=-120),
        None,
        None,
    ]
)


@st.composite
def cases(draw: st.DrawFn) -> tuple[Facts, Policy, Approval | None, str]:
    pending = None
    if draw(st.booleans()):
        claimed = entry(phase=Phase.CLAIMED, claimed=draw(st.sampled_from([5, 60, 3600])))
        pending = dataclasses.replace(
            claimed, power_off_sent_at=draw(st.sampled_from([None, ago(3)]))
        )
    made = facts(
        node(ready=draw(st.sampled_from(["Unknown", "Unknown", "False", "True"]))),
        lease_age=draw(st.sampled_from([900, 900, 900, 10])),
        record_=record(pending) if pending is not None else record(),
        power=draw(evidence),
    )
    made = dataclasses.replace(made, machine=draw(bindings))
    policy = redfish(
        draw(st.sampled_from(["refuse", "approval"])),
        draw(st.sampled_from(["verify", "off", "reboot"])),
        approval=draw(st.sampled_from(["none", "slack"])),
    )
    return made, policy, draw(answers), draw(st.sampled_from(["", CLAIM_TOKEN]))


def _valid_approval(answer: Approval | None, policy: Policy) -> bool:
    if answer is None or answer.decision is not ApprovalDecision.APPROVE:
        return False
    age = NOW - answer.at
    timeout = timedelta(seconds=policy.rules[0].approval_timeout_seconds)
    return answer.node_uid == UID and timedelta(0) <= age <= timeout


@pytest.mark.invariant("S10")
@PROFILE
@given(cases())
def test_no_taint_without_proof_or_an_explicit_approval(
    case: tuple[Facts, Policy, Approval | None, str],
) -> None:
    """S10 with escalation: a taint follows a reading of Off from this node's machine, or,
    only under on_failure: approval, a failure of this request's power step and a person's
    valid approval; never a wrong inventory, never a Ready node; with refuse, only the Off."""
    made, policy, answer, own = case
    decision = decide(event(), made, policy, NOW, approval=answer, own_claim=own)
    fencing = policy.rules[0].fencing
    assert fencing is not None
    if not fences(decision):
        return
    power = made.power
    assert power is not None, "a taint before the power step was tried"
    assert made.node is not None
    assert made.node.ready is not None
    assert made.node.ready.status != "True"
    bound = made.machine
    assert bound is not None
    assert not bound.shared_with
    said = power.identity.value if power.identity is not None else ""
    if not bound.unchecked:
        # (An unchecked entry's target is never asked which machine it is.)
        assert said != OTHER, "a machine shown to be another node's proved or escalated"
    [confirm] = [a for a in decision.actions if isinstance(a, ConfirmAction)]
    if power.state == "off" and (said == MACHINE or bound.unchecked):
        assert not confirm.proof.startswith(escalation.NO_PROOF)
        return
    assert fencing.on_failure == "approval", "refuse fenced without a reading of Off"
    assert _valid_approval(answer, policy)
    assert answer is not None
    assert confirm.proof.startswith(f"{escalation.NO_PROOF}: ")
    assert f"approved by {answer.user}" in confirm.proof


@PROFILE
@given(cases())
def test_an_escalation_never_sends_a_power_off_twice(
    case: tuple[Facts, Policy, Approval | None, str],
) -> None:
    made, policy, answer, own = case
    decision = decide(event(), made, policy, NOW, approval=answer, own_claim=own)
    held = made.record.entry(NODE)
    for step in (a for a in decision.actions if isinstance(a, PowerAction)):
        if held is not None and held.power_off_sent_at is not None:
            assert not step.send


# ------------------------------------------------------------------ the question it answers
def reads_on() -> PowerEvidence:
    """The BMC answers, and says the machine is On; nothing was sent."""
    return PowerEvidence("on", SOURCE, "", at=ago(1), identity=Reported(MACHINE, SOURCE))


def unreachable() -> PowerEvidence:
    return PowerEvidence(
        "unknown", SOURCE, "cannot connect to the BMC: connection refused", at=ago(1)
    )


def stuck_on_read_again() -> PowerEvidence:
    """The power-off sent earlier in the incident, read back once more: still On."""
    return PowerEvidence(
        "on", SOURCE, "", at=ago(1), action_sent=True, identity=Reported(MACHINE, SOURCE)
    )


FAILURES = {
    "refused-login": refused_login,
    "unreachable": unreachable,
    "stuck-on": stuck_on,
    "stuck-on-read-again": stuck_on_read_again,
    "reads-on": reads_on,
}


def asked_about(power: PowerEvidence) -> str:
    """What the question asked in Slack recorded, for a power step that handed back ``power``."""
    waiting = decide(event(), the_facts(power, asked=False), redfish(), NOW)
    assert waiting.verdict is Verdict.AWAIT_APPROVAL, waiting
    assert waiting.asks_about
    return waiting.asks_about


def test_an_approval_for_a_refused_login_does_not_fence_a_machine_then_reading_on() -> None:
    question = dataclasses.replace(asked_in_slack(), subject=asked_about(refused_login()))
    at_click = dataclasses.replace(
        the_facts(stuck_on(), asked=False),
        record=fence_record.with_approval(record(), question),
    )

    decision = decide(event(), at_click, redfish(), NOW, approval=approved(), asking_at=NOW)

    assert not fences(decision)
    assert decision.verdict is Verdict.AWAIT_APPROVAL
    blocking = [r.message for r in decision.reasons if not r.passed and r.guard == "approval"]
    assert any("nobody was asked about" in m and "reads On" in m for m in blocking), blocking
    [ask] = [a for a in decision.actions if isinstance(a, AskApprovalAction)]
    assert ask.subject == decision.asks_about
    assert "the machine reads On" in ask.subject


def test_the_same_fact_read_again_at_the_click_is_the_question_answered() -> None:
    """A power-off that never takes, asked about; at the click it is read back On once more:
    the same fact in other words, so the approval stands (and nothing is sent again)."""
    assert asked_about(stuck_on()) == asked_about(stuck_on_read_again())


@PROFILE
@given(st.sampled_from(sorted(FAILURES)), st.sampled_from(sorted(FAILURES)))
def test_an_approval_stands_in_only_for_the_failure_it_was_asked_about(
    asked_for: str, found: str
) -> None:
    question = dataclasses.replace(asked_in_slack(), subject=asked_about(FAILURES[asked_for]()))
    at_click = dataclasses.replace(
        the_facts(FAILURES[found](), asked=False),
        record=fence_record.with_approval(record(), question),
    )

    decision = decide(event(), at_click, redfish(), NOW, approval=approved(), asking_at=NOW)

    same = question.subject == asked_about(FAILURES[found]())
    assert fences(decision) == same, (asked_for, found, decision.reasons)
    if not same:
        # The new fact is put to a person; a reading On never rides on another failure's yes.
        [ask] = [a for a in decision.actions if isinstance(a, AskApprovalAction)]
        assert ask.subject != question.subject
    if "reads On" in asked_about(FAILURES[found]()) and "reads On" not in question.subject:
        assert not fences(decision)


def test_an_approval_with_no_question_in_the_record_fences_nothing() -> None:
    decision = decide(
        event(), the_facts(refused_login(), asked=False), redfish(), NOW, approval=approved()
    )

    assert not fences(decision)
    assert any("cannot be matched" in r.message for r in decision.reasons if not r.passed)


def test_an_approval_written_without_a_question_answers_nothing_asked() -> None:
    """One answer wins by writing the answer into the record before acting on it; where the
    record held no question, the approval written there is not taken for one."""
    unasked = ApprovalRequest(
        NODE,
        Incident.of(node(), "fp-1"),
        expires_at=NOW + timedelta(seconds=3000),
        approval=f"approved by U0ALICE at {NOW.strftime('%Y-%m-%dT%H:%M:%SZ')}",
        approval_until=NOW + timedelta(seconds=20),
    )
    at_click = dataclasses.replace(
        the_facts(refused_login(), asked=False),
        record=fence_record.with_approval(record(), unasked),
    )

    decision = decide(event(), at_click, redfish(), NOW, approval=approved())

    assert not fences(decision)
    assert any("cannot be matched" in r.message for r in decision.reasons if not r.passed)
