"""Every action type the engine can decide has its type name, JSON, words and result names in
``engine.action_kinds``; an action or result that is not in the table fails wherever it is met
instead of being worded as another."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

import pytest
from action_samples import SAMPLES

from nodefence.engine import action_kinds
from nodefence.engine.action_kinds import KINDS, UnknownActionError, kind_of, result_named
from nodefence.engine.model import Action, UnfenceAction
from nodefence.engine.render import action_to_dict, describe_action


@dataclasses.dataclass(frozen=True)
class UnheardOfAction:
    node: str


def test_every_action_type_is_in_the_table_once() -> None:
    decided = set(typing.get_args(Action))
    assert {kind.action for kind in KINDS} == decided
    assert len(KINDS) == len(decided)
    assert {type(sample) for sample in SAMPLES} == decided
    names = [kind.name for kind in KINDS]
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("action", SAMPLES, ids=lambda action: type(action).__name__)
def test_an_action_says_its_own_type_and_words(action: Action) -> None:
    kind = kind_of(action)
    as_json = action_to_dict(action)
    assert as_json["type"] == kind.name
    # The JSON has exactly the members of its declared shape.
    assert set(as_json) == set(typing.get_type_hints(kind.wire))
    assert describe_action(action)


def test_no_two_types_are_told_in_the_same_words() -> None:
    told = {describe_action(action) for action in SAMPLES}
    assert len(told) == len(SAMPLES)


def test_the_words_of_one_type_are_never_the_words_of_another() -> None:
    # An unfence's words (the taint removed) belong to an unfence alone: a release, a volume
    # delete or a record write never says it took the taint off.
    unfence = describe_action(SAMPLES[5])
    assert "remove the out-of-service taint" in unfence
    others = [describe_action(a) for a in SAMPLES if not isinstance(a, UnfenceAction)]
    assert all("remove the out-of-service taint" not in words for words in others)


def test_every_result_name_belongs_to_one_type() -> None:
    named = [result.name for kind in KINDS for result in kind.results]
    assert len(set(named)) == len(named)
    assert all(kind.results for kind in KINDS)
    # The names a decision's results and the actions metric have always shown, each with the
    # type whose writes it names.
    type_of = {result.name: kind.name for kind in KINDS for result in kind.results}
    assert type_of["purge"] == "purge-pod"
    assert type_of["power-off"] == type_of["power-on"] == "power"
    assert type_of["undo-fence"] == "unfence"
    assert type_of["release-node"] == "release-fence"


def test_the_json_shapes_are_the_table_s() -> None:
    assert set(typing.get_args(action_kinds.ActionJson)) == {kind.wire for kind in KINDS}


def test_a_result_moves_its_own_metric_and_only_a_fence_or_unfence_is_noticed() -> None:
    counted = {
        result.name: result.counts for kind in KINDS for result in kind.results if result.counts
    }
    assert counted == {
        "fence": action_kinds.Counted.FENCED,
        "unfence": action_kinds.Counted.UNFENCED,
        "purge": action_kinds.Counted.PURGED,
        "proof-contradicted": action_kinds.Counted.PROOF_CONTRADICTED,
    }
    noticed = {result.name for kind in KINDS for result in kind.results if result.notice}
    assert noticed == {"fence", "unfence"}
    assert "unfenced" in result_named("unfence").notice
    assert "unfenced" not in result_named("fence").notice


def test_an_unknown_action_raises_everywhere_it_is_told() -> None:
    unknown: Any = UnheardOfAction("worker1")
    for tell in (kind_of, action_to_dict, describe_action):
        with pytest.raises(UnknownActionError, match="UnheardOfAction"):
            tell(unknown)


def test_an_unknown_result_name_raises() -> None:
    with pytest.raises(UnknownActionError, match="unfenced"):
        result_named("unfenced")
    # A type's name is not a result's: a purge-pod action's results are named purge.
    with pytest.raises(UnknownActionError):
        result_named("purge-pod")
