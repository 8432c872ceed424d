"""Every guard the engine names in a decision has its row in ``engine.guard_kinds``: its words for
people, its Event type, how a cached decision may use it, whether an approval stands in for it. A
guard name the table does not hold fails wherever it is read, never worded or judged as another.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from engine_factories import NOW, event, facts, node, policy
from engine_strategies import PROFILE, all_decisions, cases, fallback_event
from hypothesis import given, settings

from nodefence.commands.explain import outcome
from nodefence.engine import cached, escalation, guard_kinds
from nodefence.engine.cached import Source
from nodefence.engine.decide import decide
from nodefence.engine.guard_kinds import KINDS, Cache, EventType, UnknownGuardError, kind
from nodefence.engine.model import (
    AlertEvent,
    Approval,
    ApprovalDecision,
    Decision,
    Facts,
    Reason,
    Verdict,
)
from nodefence.policy import Policy
from nodefence.shell.report import node_event

SERVICE = Path(__file__).resolve().parents[2] / "service" / "nodefence"
# Where decisions are made: the engine, and the shell's dry-run power read.
DECIDING = ("engine", "shell")
# The calls that name a guard with their first argument.
NAMING = {"Reason", "add", "_pass", "_block"}


def _named(decision: Decision) -> set[str]:
    return {r.guard for r in decision.reasons}


@settings(PROFILE)
@given(case=cases)
def test_every_guard_a_decision_names_has_a_row_and_words(
    case: tuple[AlertEvent, Facts, Policy, Approval | None],
) -> None:
    event_, facts_, policy, approval = case
    for decision in all_decisions(event_, facts_, policy, approval):
        for guard in _named(decision):
            assert kind(guard).words, guard
        # What a cached decision keeps of it reads every row too.
        cached.refusal_on_cache(decision, (Source("the node", "the index", 1.0),))


def test_no_module_spells_a_guard_name() -> None:
    """The guards are named by their row's constant, never by a string of their own: a literal
    there would be a guard the table may not hold."""
    spelled = []
    for path in sorted(p for folder in DECIDING for p in (SERVICE / folder).rglob("*.py")):
        for call in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(call, ast.Call) or not call.args:
                continue
            func = call.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            first = call.args[0]
            if name in NAMING and isinstance(first, ast.Constant) and isinstance(first.value, str):
                spelled.append(f"{path.relative_to(SERVICE)}:{call.lineno} {first.value!r}")
    assert spelled == []


def test_each_row_is_whole_and_named_once() -> None:
    for name, row in KINDS.items():
        assert row.name == name
        assert row.words, name
        assert not row.words.endswith("."), name
        assert row.words == row.words.strip()
    constants = {
        value
        for key, value in vars(guard_kinds).items()
        if key.isupper() and not key.startswith("_") and isinstance(value, str)
    }
    assert constants == set(KINDS)


def test_the_guards_words_event_types_and_cache_are_the_ones_operators_know() -> None:
    """The words ``explain`` and ``status`` always said, the refusals said as Normal Events, the
    refusals that may stand on cached facts, and the two an approval stands in for."""
    assert guard_kinds.words("power-off") == "there is no proof that its machine is off"
    assert guard_kinds.words("lease") == (
        "its kubelet may still be running (its Lease was renewed recently)"
    )
    # Once "a guard holds it back": now said.
    assert guard_kinds.words("node-found") == "the node does not exist in the cluster"
    normal = {name for name, row in KINDS.items() if row.event is EventType.NORMAL}
    assert normal == {
        "ready",
        "not-ready-duration",
        "alert-wait",
        "lease",
        "lease-fresh",
        "healthy-delay",
        "storm-cooldown",
        "flap",
        "boot-id",
        "terminating-pods",
        "volume-attachments",
        "paused",
        "exclusion",
        "rule",
        "dry-run",
        "silence",
        "own-node",
    }
    refuses = {name for name, row in KINDS.items() if row.cache is Cache.REFUSES}
    assert refuses == {
        "own-node",
        "approval",
        "paused",
        "silence",
        "node-found",
        "exclusion",
        "rule",
        "fence-in-progress",
        "ready",
        "not-ready-duration",
        "alert-wait",
        "foreign-taint",
        "storm",
        "storm-cooldown",
        "fence-budget",
        "ready-fraction",
        "flap",
    }
    unread = {name for name, row in KINDS.items() if row.cache is Cache.UNREAD}
    assert unread == {"lease", "power-off", "machine-identity"}
    assert {name for name, row in KINDS.items() if row.overruled} == {
        "power-off",
        "machine-identity",
    }


def _refused_by(guard: str) -> Decision:
    return Decision(
        Verdict.NOOP,
        "worker-1",
        (Reason("rule", True, "rule 'default' matches"), Reason(guard, False, "held")),
        status="firing",
    )


@pytest.mark.parametrize(
    "read",
    [
        guard_kinds.kind,
        guard_kinds.words,
        guard_kinds.warns,
        guard_kinds.cache,
        guard_kinds.overruled,
        lambda guard: outcome(_refused_by(guard), held=False),
        lambda guard: node_event(_refused_by(guard), [], 0, fenced=False),
        lambda guard: cached.refusal_on_cache(_refused_by(guard), ()),
        lambda guard: escalation.overruled(
            _refused_by(guard).reasons,
            escalation.Failure("timeout", "it answered on", "ipmi"),
            Approval("ann", NOW, ApprovalDecision.APPROVE, "uid-worker-1"),
        ),
    ],
)
def test_an_unknown_guard_raises_wherever_it_is_read(read: object) -> None:
    assert callable(read)
    with pytest.raises(UnknownGuardError, match="moonphase"):
        read("moonphase")


def test_a_fallback_decision_and_a_missing_node_are_worded() -> None:
    missing = decide(event(node_name="nosuchnode"), facts(node(name="other")), policy(), NOW)
    assert missing.verdict is Verdict.SKIP
    assert outcome(missing, held=False) == (
        "would not fence it now: the node does not exist in the cluster"
    )
    fallback = decide(fallback_event("fp"), facts(), policy(), NOW)
    assert all(kind(r.guard).words for r in fallback.reasons)
