"""Which tests hold each safety invariant, read from their ``@pytest.mark.invariant`` marks.

A test that would fail if S1-S12 (PRODUCT.md, "Safety invariants") broke carries
``@pytest.mark.invariant("S4")`` (a module's tests all at once through ``pytestmark``). This module
reads those marks from the source, without importing a test or running a fixture, and writes the
index in CONTRIBUTING.md between its marker comments, split by backend: the simulator and the
in-process tests, and the real control plane (a test marked ``realcluster`` or asking for
``real_backend``, as ``tests/tiers.py`` puts it in that tier).

``python -m tests.invariant_index --write`` rewrites the index; ``--check`` says whether it is
current. ``tests/architecture/test_invariant_index.py`` fails when it is not, when a mark names
an unknown invariant, or when an invariant has no test, or none on the real backend.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"
CONTRIBUTING = REPO / "CONTRIBUTING.md"
START = "<!-- invariant-index:start -->"
END = "<!-- invariant-index:end -->"

# The invariants of PRODUCT.md, in a few words each; a mark naming any other id is an error.
INVARIANTS = {
    "S1": "never fence a node whose Ready condition is True",
    "S2": "never fence a node whose kubelet Lease was renewed within the staleness window",
    "S3": "never exceed the fence budget, also with several replicas and duplicated alerts",
    "S4": "never remove an out-of-service taint nodefence did not apply",
    "S5": "never unfence before the healthy delay (and a new bootID where the policy asks)",
    "S6": "never delete a pod that is not on the fenced node or whose UID changed",
    "S7": "duplicate, reordered or concurrent deliveries produce the effects of one",
    "S8": "a dry run performs zero writes to the cluster",
    "S9": "a node re-created under the same name inherits no old decision",
    "S10": "never taint without proof of power-off from the node's own machine or an approval",
    "S11": "liveness is judged on the API server's clock only",
    "S12": "nodefence's authority lives where a node cannot write",
}

# Invariants no test on the real control plane holds yet, each with what such a test would
# show. The architecture test fails when an invariant without a real-backend test is missing
# here, and when one listed here has gained one, so the list only ever shrinks.
NOT_YET_ON_REAL: dict[str, str] = {}


@dataclass(frozen=True)
class Marked:
    """One test function and the invariants its marks name."""

    test: str  # tests/<folder>/<file>.py::<name>, as pytest names it
    ids: tuple[str, ...]
    real: bool


def _mark(node: ast.expr) -> tuple[str, tuple[ast.expr, ...]] | None:
    """``pytest.mark.NAME`` or ``pytest.mark.NAME(...)``: the name and its arguments."""
    args: tuple[ast.expr, ...] = ()
    if isinstance(node, ast.Call):
        args = tuple(node.args)
        node = node.func
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "mark"
        and isinstance(node.value.value, ast.Name)
        and node.value.value.id == "pytest"
    ):
        return node.attr, args
    return None


def _marks(nodes: Iterable[ast.expr]) -> Iterator[tuple[str, tuple[ast.expr, ...]]]:
    for node in nodes:
        found = _mark(node)
        if found is not None:
            yield found


def _pytestmark(body: list[ast.stmt]) -> list[ast.expr]:
    """The marks a module or class assigns to ``pytestmark``, one or a list of them."""
    for stmt in body:
        if isinstance(stmt, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in stmt.targets
        ):
            value = stmt.value
            return list(value.elts) if isinstance(value, ast.List | ast.Tuple) else [value]
    return []


def _ids(marks: list[tuple[str, tuple[ast.expr, ...]]], where: str) -> tuple[str, ...]:
    ids: list[str] = []
    for name, args in marks:
        if name != "invariant":
            continue
        if not args:
            raise ValueError(f"{where}: pytest.mark.invariant names no invariant")
        for arg in args:
            if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
                raise TypeError(f"{where}: pytest.mark.invariant takes literal ids like 'S4'")
            ids.append(arg.value)
    return tuple(ids)


def _tests(
    body: list[ast.stmt], prefix: str
) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef, list[ast.expr]]]:
    """Each test function of a module or of its ``Test*`` classes, with the marks its class
    gives it."""
    for stmt in body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef) and stmt.name.startswith(
            "test"
        ):
            yield f"{prefix}::{stmt.name}", stmt, []
        elif isinstance(stmt, ast.ClassDef) and stmt.name.startswith("Test"):
            inherited = [*stmt.decorator_list, *_pytestmark(stmt.body)]
            for name, function, _ in _tests(stmt.body, f"{prefix}::{stmt.name}"):
                yield name, function, inherited


def marked_in(path: Path, root: Path = REPO) -> list[Marked]:
    """The tests of one file that carry an invariant mark, in the order they are written, named
    from ``root``."""
    tree = ast.parse(path.read_text(), str(path))
    prefix = path.relative_to(root).as_posix()
    module = _pytestmark(tree.body)
    found = []
    for name, function, inherited in _tests(tree.body, prefix):
        marks = list(_marks([*module, *inherited, *function.decorator_list]))
        ids = _ids(marks, name)
        if not ids:
            continue
        arguments = [a.arg for a in [*function.args.posonlyargs, *function.args.args]]
        real = any(m == "realcluster" for m, _ in marks) or "real_backend" in arguments
        found.append(Marked(name, tuple(dict.fromkeys(ids)), real))
    return found


def collect(tests: Path = TESTS) -> list[Marked]:
    return [m for path in sorted(tests.rglob("test_*.py")) for m in marked_in(path, tests.parent)]


def problems(marked: list[Marked]) -> list[str]:
    """What is wrong with the marks: unknown ids, invariants with no test or none on the real
    backend (unless listed in ``NOT_YET_ON_REAL``), and listed ones that have one now."""
    found = [
        f"{m.test}: unknown invariant {i}" for m in marked for i in m.ids if i not in INVARIANTS
    ]
    for sid in INVARIANTS:
        holders = [m for m in marked if sid in m.ids]
        on_real = any(m.real for m in holders)
        if not holders:
            found.append(f"{sid}: no test is marked invariant({sid!r})")
        elif not on_real and sid not in NOT_YET_ON_REAL:
            found.append(f"{sid}: no test on the real backend is marked invariant({sid!r})")
        elif on_real and sid in NOT_YET_ON_REAL:
            found.append(f"{sid}: has a real-backend test now; take it out of NOT_YET_ON_REAL")
    return found


def render(marked: list[Marked]) -> str:
    """The index: per invariant, its tests on each backend."""
    lines = [
        START,
        "<!-- Written by `python -m tests.invariant_index --write` from the tests'",
        "     @pytest.mark.invariant marks; edit the marks, not this list. -->",
        "",
    ]
    for sid, words in INVARIANTS.items():
        holders = [m for m in marked if sid in m.ids]
        lines.append(f"- **{sid}** {words}")
        for title, real in (("simulator and in-process", False), ("real backend", True)):
            tests = [m.test for m in holders if m.real is real]
            lines.append(f"  - {title} ({len(tests)}):")
            if real and sid in NOT_YET_ON_REAL:
                lines.append(f"    - none yet: {NOT_YET_ON_REAL[sid]}")
            lines.extend(f"    - `{test}`" for test in tests)
    lines.append(END)
    return "\n".join(lines)


def rewritten(text: str, index: str) -> str:
    """The document with the part between the marker comments replaced by ``index``."""
    if text.count(START) != 1 or text.count(END) != 1 or text.index(START) > text.index(END):
        raise ValueError(f"{CONTRIBUTING.name} needs one {START} before one {END}")
    head, rest = text.split(START)
    _, tail = rest.split(END)
    return head + index + tail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help="rewrite the index")
    action.add_argument("--check", action="store_true", help="fail when the index is stale")
    args = parser.parse_args(argv)
    marked = collect()
    for problem in problems(marked):
        print(problem, file=sys.stderr)
    text = CONTRIBUTING.read_text()
    wanted = rewritten(text, render(marked))
    if args.write:
        CONTRIBUTING.write_text(wanted)
    elif wanted != text:
        print(f"{CONTRIBUTING.name}: the invariant index is stale", file=sys.stderr)
        return 1
    return 1 if problems(marked) else 0


if __name__ == "__main__":
    sys.exit(main())
