"""The suite's tiers (``tests/tiers.py``): every folder of tests is in one, ``make test-unit`` runs
the unit folders, and ``make test`` keeps the real control plane's tier out of the parallel run."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

from tests.tiers import FOLDERS, folder_of

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
MAKEFILE = (REPO / "Makefile").read_text()


@functools.cache
def _collected(*args: str) -> list[str]:
    """The test ids ``pytest --collect-only`` selects, in a process of its own (each selection
    collected once: a collection imports every test module it names)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode in (0, 5), done.stdout[-3000:] + done.stderr[-3000:]
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_every_folder_of_tests_is_in_exactly_one_tier() -> None:
    folders = {folder_of(path) for path in TESTS.rglob("test_*.py")} - {None}
    assert folders == set(FOLDERS), sorted(folders ^ set(FOLDERS))
    assert set(FOLDERS.values()) == {"unit", "integration", "system", "simulator"}


def test_make_test_unit_collects_the_unit_folders_and_nothing_else() -> None:
    line = next(line for line in MAKEFILE.splitlines() if line.startswith("UNIT_TESTS :="))
    named = set(line.partition(":=")[2].split())
    assert named == {f"tests/{folder}" for folder, tier in FOLDERS.items() if tier == "unit"}
    assert "-m unit $(UNIT_TESTS)" in MAKEFILE


def test_make_test_runs_the_real_control_planes_tier_apart_and_alone() -> None:
    recipe = MAKEFILE.partition("\ntest: ")[2].partition("\n\n")[0]
    parallel, serial = (line for line in recipe.splitlines() if "$(BIN)/pytest" in line)
    assert "-n $(TEST_WORKERS)" in parallel
    assert "-m 'not realcluster and not serial'" in parallel
    assert "-m 'serial or realcluster'" in serial
    assert " -n " not in serial


# The folders whose tests are split between the real control plane's tier and another.
SPLIT = ("tests/realcluster", "tests/reliability/test_dry_run.py", "tests/sim_conformance")


def test_the_real_control_planes_tests_run_last() -> None:
    on_real = set(_collected("-m", "realcluster", *SPLIT))
    real = [test in on_real for test in _collected(*SPLIT)]
    assert True in real
    assert False in real
    assert real == sorted(real), "a test without the control plane after one with it"


def _on_real(test: str) -> bool:
    return "real" in test.rpartition("[")[2].rstrip("]").split("-")


def test_the_real_backend_of_the_conformance_tests_is_in_the_realcluster_tier() -> None:
    conformance = "tests/sim_conformance/"
    real = [t for t in _collected("-m", "realcluster", *SPLIT) if t.startswith(conformance)]
    assert real, "the conformance tests run on the real control plane too"
    assert all(_on_real(test) for test in real), real
    simulated = _collected("-m", "simulator", "tests/sim_conformance")
    assert simulated
    assert not any(_on_real(test) for test in simulated), simulated
