"""The engine reads as small named steps: no function in ``service/nodefence/engine`` is over 60
lines, and each pass of the fence path (``engine.fence_path``) is at most 40, so a change to one
safety question lands in the function that asks it."""

from __future__ import annotations

import ast
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[2] / "service" / "nodefence" / "engine"
LONGEST = 60
# The fence path's passes, in the order they run, and its entry.
PASSES = ("fence", "liveness", "cluster_limits", "proof", "escalate", "refusal_or_rollback", "plan")
LONGEST_PASS = 40


def lengths(path: Path) -> dict[str, int]:
    """Every function of the module (methods and nested ones too), with its lines, docstring
    and decorators included."""
    found = {}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            found[f"{path.name}:{node.lineno} {node.name}"] = (node.end_lineno or first) - first + 1
    return found


def test_no_engine_function_is_over_60_lines() -> None:
    measured = {
        name: n for path in sorted(ENGINE.glob("*.py")) for name, n in lengths(path).items()
    }
    assert measured, "no engine function found"
    assert {name: n for name, n in measured.items() if n > LONGEST} == {}


def test_each_pass_of_the_fence_path_is_at_most_40_lines() -> None:
    measured = {name.split(" ")[1]: n for name, n in lengths(ENGINE / "fence_path.py").items()}
    assert set(PASSES) <= set(measured)
    assert {name: measured[name] for name in PASSES if measured[name] > LONGEST_PASS} == {}


def test_a_long_function_is_measured_as_long(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(61))
    path = tmp_path / "long.py"
    path.write_text(f"def long() -> None:\n{body}\n")
    assert lengths(path) == {"long.py:1 long": 62}
