"""Every action the engine can decide has its own commit handler: an action type without one is
an error, never carried out as some other kind (an unknown write taken for a Ready sighting)."""

from __future__ import annotations

import dataclasses
import typing
from datetime import UTC, datetime

import pytest

from nodefence.engine.model import Action, ObserveReadyAction
from nodefence.shell.commit import HANDLERS, handler_for


def test_every_member_of_the_action_union_has_a_handler() -> None:
    members = set(typing.get_args(Action))
    assert members, "the engine's Action union lists no types"
    assert members - set(HANDLERS) == set()


def test_no_handler_serves_a_type_outside_the_union() -> None:
    assert set(HANDLERS) - set(typing.get_args(Action)) == set()


def test_each_type_has_a_handler_of_its_own() -> None:
    handlers = list(HANDLERS.values())
    assert len(set(handlers)) == len(handlers)


@dataclasses.dataclass(frozen=True)
class NewAction:
    """Stands for an action type the engine gained but the shell was not taught."""

    node: str


def test_an_action_without_a_handler_is_refused_by_name() -> None:
    with pytest.raises(TypeError, match="no commit handler for NewAction"):
        handler_for(typing.cast(Action, NewAction("worker1")))


def test_a_subclass_is_not_taken_for_its_parent() -> None:
    """Dispatch is by exact type: a look-alike of a housekeeping write is not one."""

    @dataclasses.dataclass(frozen=True)
    class LooksLikeObserve(ObserveReadyAction):
        pass

    with pytest.raises(TypeError, match="LooksLikeObserve"):
        handler_for(LooksLikeObserve("n", "u", None, datetime.now(UTC)))
