"""A newcomer finds the tests of each safety invariant in CONTRIBUTING.md: the index there is
what the tests' ``@pytest.mark.invariant`` marks say, every mark names one of S1-S12, and every
invariant has a marked test, one of them on the real control plane (or owns up to having none
in ``NOT_YET_ON_REAL``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests import invariant_index
from tests.invariant_index import CONTRIBUTING, INVARIANTS, Marked, collect, problems, render

TOY = """
import pytest

pytestmark = [pytest.mark.timeout(5), pytest.mark.invariant("S8")]


@pytest.mark.invariant("S1", "S2")
@pytest.mark.parametrize("x", [1])
def test_sim(x): ...


@pytest.mark.realcluster
@pytest.mark.invariant("S3")
def test_marked_real(): ...


def test_asks_for_the_real_backend(procs, real_backend): ...


class TestGroup:
    pytestmark = pytest.mark.invariant("S4")

    async def test_in_a_class(self): ...


def helper_not_a_test(): ...
"""


def test_the_index_in_contributing_is_what_the_marks_say() -> None:
    index = render(collect())
    assert index in CONTRIBUTING.read_text(), (
        "the invariant index is stale: run python -m tests.invariant_index --write"
    )


def test_every_invariant_has_a_marked_test_and_one_on_the_real_backend() -> None:
    assert problems(collect()) == []


def test_marks_are_read_from_decorators_classes_and_the_modules_pytestmark(
    tmp_path: Path,
) -> None:
    (tmp_path / "tests" / "toy").mkdir(parents=True)
    (tmp_path / "tests" / "toy" / "test_toy.py").write_text(TOY)
    assert collect(tmp_path / "tests") == [
        Marked("tests/toy/test_toy.py::test_sim", ("S8", "S1", "S2"), real=False),
        Marked("tests/toy/test_toy.py::test_marked_real", ("S8", "S3"), real=True),
        Marked("tests/toy/test_toy.py::test_asks_for_the_real_backend", ("S8",), real=True),
        Marked("tests/toy/test_toy.py::TestGroup::test_in_a_class", ("S8", "S4"), real=False),
    ]


def holding_all(*, real: bool) -> list[Marked]:
    return [Marked(f"tests/x/test_x.py::test_{sid}", (sid,), real=real) for sid in INVARIANTS]


def off_the_real_backend(marked: list[Marked], sid: str) -> list[Marked]:
    return [Marked(m.test, m.ids, real=False) if m.ids == (sid,) else m for m in marked]


def test_an_unknown_id_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(invariant_index, "NOT_YET_ON_REAL", {})
    marked = [*holding_all(real=True), Marked("tests/x/test_x.py::test_y", ("S13",), real=False)]
    assert problems(marked) == ["tests/x/test_x.py::test_y: unknown invariant S13"]


def test_an_invariant_without_a_test_or_a_real_one_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(invariant_index, "NOT_YET_ON_REAL", {})
    marked = [m for m in holding_all(real=True) if m.ids != ("S7",)]
    marked = off_the_real_backend(marked, "S3")
    assert problems(marked) == [
        "S3: no test on the real backend is marked invariant('S3')",
        "S7: no test is marked invariant('S7')",
    ]


def test_a_gap_owned_up_to_passes_and_one_closed_must_be_taken_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(invariant_index, "NOT_YET_ON_REAL", {"S5": "why"})
    without = [
        m if m.ids != ("S5",) else Marked(m.test, m.ids, False) for m in holding_all(real=True)
    ]
    assert problems(without) == []
    assert problems(holding_all(real=True)) == [
        "S5: has a real-backend test now; take it out of NOT_YET_ON_REAL"
    ]


def test_a_mark_without_literal_ids_is_refused(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_bad.py").write_text(
        "import pytest\n\n\n@pytest.mark.invariant()\ndef test_bad(): ...\n"
    )
    with pytest.raises(ValueError, match="names no invariant"):
        collect(tmp_path / "tests")
