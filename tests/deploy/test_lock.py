"""The lock file pins what the project depends on, and every install goes through it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LOCK = REPO / "requirements.lock"


def _name(requirement: str) -> str:
    """A requirement's project name, normalised as pip compares names (PEP 503)."""
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement.strip())
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in LOCK.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, sep, version = line.partition("==")
        assert sep, f"not an exact pin: {line!r}"
        assert version.strip(), f"no version: {line!r}"
        assert _name(name) not in pins, f"pinned twice: {name}"
        pins[_name(name)] = version.strip()
    return pins


def test_every_declared_dependency_and_the_build_backend_is_pinned() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    declared = list(project["project"]["dependencies"])
    for extra in project["project"]["optional-dependencies"].values():
        declared += extra
    declared += project["build-system"]["requires"]
    pins = _pins()
    missing = sorted({_name(r) for r in declared} - set(pins))
    assert not missing, f"not in requirements.lock: {missing}"
    assert "nodefence" not in pins


def test_make_and_the_image_install_through_the_lock() -> None:
    makefile = (REPO / "Makefile").read_text()
    assert "PINNED := PIP_CONSTRAINT=$(CURDIR)/$(LOCK)" in makefile
    assert "$(PINNED) $(BIN)/pip install --quiet -e '.[dev]'" in makefile
    assert "$(VENV)/.installed: pyproject.toml $(LOCK)" in makefile
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "PIP_CONSTRAINT=/src/requirements.lock" in dockerfile
    # CI installs through make, so through the lock.
    assert "make venv" in (REPO / ".ci" / "run").read_text()
