"""A dry run's look at the BMC is a fact the engine decides on (``engine.dry_run``): a dry-run
plan that would ask the node's BMC asks for a read-only look (``Decision.dry_run_read``), and
decided again with it (``Facts.dry_run_power``) it says what the look found, last, in a reason
of its own; nothing else in the decision changes, and no other decision asks or listens (S8)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from engine_factories import NODE, NOW, event, facts, node, policy
from engine_strategies import PROFILE, all_decisions, cases, mostly
from hypothesis import given
from hypothesis import strategies as st

from nodefence.engine.decide import decide
from nodefence.engine.evidence import PowerEvidence
from nodefence.engine.guard_kinds import DRY_RUN_POWER
from nodefence.engine.model import Decision, DryRunRead, Facts, PowerAction, Reason, Verdict
from nodefence.policy import Fencing, Policy

SOURCE = "redfish https://bmc-1.example/redfish/v1/Systems/1"
REDFISH = {"driver": "redfish", "action": "off"}


def dry(**rule: Any) -> Policy:
    return policy(rule={"fencing": REDFISH, **rule}, dry_run=True)


def power_action(decision: Decision) -> PowerAction:
    return next(a for a in decision.actions if isinstance(a, PowerAction))


def looked(the: Facts, read: DryRunRead) -> Facts:
    return replace(the, dry_run_power=read)


def on_reading(state: str = "on", *, raw: str = "On", detail: str = "") -> PowerEvidence:
    return PowerEvidence(state, SOURCE, detail, raw_state=raw)


def test_a_dry_run_fence_that_would_ask_the_bmc_asks_for_a_look_and_says_nothing_yet() -> None:
    decision = decide(event(), facts(), dry(), NOW)
    assert decision.dry_run
    assert decision.verdict is Verdict.FENCE
    assert decision.dry_run_read == power_action(decision)
    assert DRY_RUN_POWER not in {r.guard for r in decision.reasons}


def test_decided_again_with_the_look_it_says_what_was_found_last() -> None:
    before = decide(event(), facts(), dry(), NOW)
    read = DryRunRead(on_reading(), identity="the BMC reports machine 4c4c4544")
    after = decide(event(), looked(facts(), read), dry(), NOW)
    assert after.reasons[:-1] == before.reasons
    assert after.reasons[-1] == Reason(
        DRY_RUN_POWER,
        True,
        f"read-only power-state read: {SOURCE} reports node {NODE}'s machine On; the BMC reports "
        "machine 4c4c4544; no power action sent, a real run would power it off and read it back",
    )
    assert after.actions == before.actions
    assert after.dry_run_read is None
    assert replace(after, reasons=before.reasons) == replace(before, dry_run_read=None)


@pytest.mark.parametrize(
    ("read", "passed", "message"),
    [
        (
            DryRunRead(no_driver="no BMC inventory is configured (NODEFENCE_BMC_INVENTORY)"),
            False,
            f"no power-state read of node {NODE}: no BMC inventory is configured "
            "(NODEFENCE_BMC_INVENTORY)",
        ),
        (
            DryRunRead(identity="the BMC reports machine 0b1a, not this node's 4c4c"),
            False,
            f"read-only check: the redfish target of node {NODE} is not shown to be its machine, "
            "so a real run would send nothing and have no proof: the BMC reports machine 0b1a, "
            "not this node's 4c4c",
        ),
        (
            DryRunRead(on_reading("unknown", raw="", detail="connection refused")),
            False,
            f"read-only power-state read: {SOURCE} gave no power state for node {NODE} "
            "(connection refused): a real run would have no proof",
        ),
        (
            DryRunRead(on_reading("unknown", raw="")),
            False,
            f"read-only power-state read: {SOURCE} gave no power state for node {NODE} "
            "(no answer): a real run would have no proof",
        ),
        (
            DryRunRead(on_reading("off", raw="PoweringOff")),
            True,
            f"read-only power-state read: {SOURCE} reports node {NODE}'s machine PoweringOff; "
            "no power action sent, a real run would power it off and read it back",
        ),
    ],
)
def test_each_look_is_worded_as_the_operator_reads_it(
    read: DryRunRead, passed: bool, message: str
) -> None:
    decision = decide(event(), looked(facts(), read), dry(), NOW)
    assert decision.reasons[-1] == Reason(DRY_RUN_POWER, passed, message)


def test_a_verify_rule_would_only_read_the_machine_back() -> None:
    verify = dry(fencing={"driver": "redfish", "action": "verify"})
    decision = decide(event(), looked(facts(), DryRunRead(on_reading())), verify, NOW)
    assert decision.reasons[-1].message.endswith(
        "no power action sent, a real run would read it back"
    )


def test_a_real_run_and_a_refusal_neither_ask_nor_listen() -> None:
    read = DryRunRead(on_reading())
    real = policy(rule={"fencing": REDFISH})
    fence = decide(event(), looked(facts(), read), real, NOW)
    assert fence.verdict is Verdict.FENCE
    assert fence == decide(event(), facts(), real, NOW)
    assert fence.dry_run_read is None
    up = facts(node(ready="True"))
    refused = decide(event(), looked(up, read), dry(), NOW)
    assert not refused.actions
    assert refused == decide(event(), up, dry(), NOW)
    assert refused.dry_run_read is None


# ---------------------------------------------------------------------------- properties

reads = st.one_of(
    st.builds(DryRunRead, no_driver=st.sampled_from(["no BMC", "configuration error"])),
    st.builds(DryRunRead, identity=st.sampled_from(["", "not this node's machine"])),
    st.builds(
        DryRunRead,
        st.builds(
            PowerEvidence,
            st.sampled_from(["on", "off", "unknown"]),
            st.just(SOURCE),
            st.sampled_from(["", "timed out"]),
            raw_state=st.sampled_from(["", "On", "Off"]),
        ),
        identity=st.sampled_from(["", "the BMC reports machine 4c4c"]),
    ),
)
# Mostly a dry run whose rule asks a BMC, where the looks are.
fencings = mostly(
    {"driver": "redfish", "action": "off"},
    {"driver": "redfish", "action": "verify"},
    {"driver": "ipmi", "action": "reboot"},
    {"driver": "none"},
)
dry_runs = mostly(True, False)


def with_fencing(the: Policy, fencing: dict[str, str], dry_run: bool) -> Policy:
    rules = [r.model_copy(update={"fencing": Fencing(**fencing)}) for r in the.rules]
    return the.model_copy(update={"rules": rules, "dry_run": dry_run})


@pytest.mark.invariant("S8")
@PROFILE
@given(case=cases, fencing=fencings, dry_run=dry_runs, read=reads)
def test_the_look_is_asked_for_exactly_where_a_dry_run_would_touch_a_bmc_and_only_adds_its_reason(
    case: tuple[Any, Facts, Policy, Any],
    fencing: dict[str, str],
    dry_run: bool,
    read: DryRunRead,
) -> None:
    event_, the, the_policy, approval = case
    the_policy = with_fencing(the_policy, fencing, dry_run)
    before, reconciled = all_decisions(event_, the, the_policy, approval)
    after, reconciled_after = all_decisions(event_, looked(the, read), the_policy, approval)
    # The reconcile pass never looks: it reports nothing of a dry run's BMC.
    assert reconciled.dry_run_read is None
    assert reconciled_after == reconciled
    action = next((a for a in before.actions if isinstance(a, PowerAction)), None)
    if not before.dry_run or action is None:
        # Not a dry run, or nothing it would ask a BMC: no look asked, and one changes nothing.
        assert before.dry_run_read is None
        assert after == before
        return
    assert before.dry_run_read == action
    assert DRY_RUN_POWER not in {r.guard for r in before.reasons}
    # Decided again with the look: the same decision, its words last, nothing more asked.
    assert after.reasons[:-1] == before.reasons
    assert after.reasons[-1].guard == DRY_RUN_POWER
    assert replace(after, reasons=before.reasons) == replace(before, dry_run_read=None)
