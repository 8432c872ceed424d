"""A new guard is one row, one function and one call in a pass: the toy guard below, added by
these tests alone, holds a fence back, and its row alone decides its words in ``explain``, the
type of the Event that says the refusal, and whether the refusal may stand on cached facts."""

from __future__ import annotations

import dataclasses

import pytest
from engine_factories import NOW, event, facts, node, policy

from nodefence.commands.explain import Explanation, as_text, outcome
from nodefence.engine import fence_path, guard_kinds
from nodefence.engine.cached import Source, refusal_on_cache
from nodefence.engine.decide import decide
from nodefence.engine.guard_kinds import Cache, EventType, GuardKind
from nodefence.engine.model import Decision, NodeFacts, Reason, Verdict
from nodefence.shell.report import node_event

MOON = "toy-full-moon"
LABEL = "example.com/moon"
# The one row.
ROW = GuardKind(MOON, "the moon is full over it", EventType.NORMAL, Cache.REFUSES)


def moon_not_full(node_: NodeFacts) -> Reason:
    """The one function."""
    if node_.labels.get(LABEL) == "full":
        return Reason(MOON, False, f"the moon over {node_.name} is full")
    return Reason(MOON, True, f"no full moon over {node_.name}")


def install(monkeypatch: pytest.MonkeyPatch, row: GuardKind = ROW) -> None:
    monkeypatch.setitem(guard_kinds.KINDS, MOON, row)
    # The one call, in the cluster limits' pass.
    checks = (*fence_path.CLUSTER_LIMITS, lambda s: moon_not_full(s.node))
    monkeypatch.setattr(fence_path, "CLUSTER_LIMITS", checks)


def moonlit() -> Decision:
    return decide(event(), facts(node(labels={LABEL: "full"})), policy(), NOW)


def test_the_toy_guard_holds_a_fence_back_and_explain_says_its_words(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    install(monkeypatch)
    assert decide(event(), facts(node()), policy(), NOW).verdict is Verdict.FENCE
    held = moonlit()
    assert held.verdict is Verdict.NOOP
    assert [r.guard for r in held.reasons if not r.passed] == [MOON]
    assert outcome(held, held=False) == "would not fence it now: the moon is full over it"
    report = {"alert": {"alertname": "KubeNodeNotReady", "source": "test", "labels": {}}}
    said = {**report, "node": "worker-1", "policyDryRun": False, "outcome": "would not fence"}
    text = as_text(Explanation(held, said))
    assert "Held back because the moon is full over it: the moon over worker-1 is full" in text


@pytest.mark.parametrize(
    ("event_type", "warning"), [(EventType.NORMAL, False), (EventType.WARNING, True)]
)
def test_the_toy_guard_s_row_sets_its_event_type(
    monkeypatch: pytest.MonkeyPatch, event_type: EventType, warning: bool
) -> None:
    install(monkeypatch, dataclasses.replace(ROW, event=event_type))
    held = moonlit()
    assert node_event(held, [], 0, fenced=False) == ("FenceRefused", held.summary, warning)


@pytest.mark.parametrize(("cache", "stands"), [(Cache.REFUSES, True), (Cache.LIVE, False)])
def test_the_toy_guard_s_row_sets_whether_its_refusal_stands_on_the_cache(
    monkeypatch: pytest.MonkeyPatch, cache: Cache, stands: bool
) -> None:
    install(monkeypatch, dataclasses.replace(ROW, cache=cache))
    stood = refusal_on_cache(moonlit(), (Source("the node", "the watch-fed node index", 1.0),))
    assert (stood is not None) is stands


def test_without_its_row_the_toy_guard_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch)
    held = moonlit()
    monkeypatch.delitem(guard_kinds.KINDS, MOON)
    with pytest.raises(guard_kinds.UnknownGuardError, match=MOON):
        moonlit()
    with pytest.raises(guard_kinds.UnknownGuardError, match=MOON):
        outcome(held, held=False)
    with pytest.raises(guard_kinds.UnknownGuardError, match=MOON):
        node_event(held, [], 0, fenced=False)
