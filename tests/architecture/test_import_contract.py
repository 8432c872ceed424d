"""The layers of ``.importlinter`` hold on the checkout, and breaking one fails ``lint-imports``
(what ``make lint`` runs): a copy of the product gets one forbidden import at a time."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

pytestmark = pytest.mark.skipif(
    not LINT_IMPORTS.exists(), reason="import-linter is not installed (make venv installs it)"
)


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on the tree at ``root`` (its ``service/`` first on the path)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "service"), str(root)])}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tree")
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    shutil.copytree(REPO / "service", root / "service", ignore=ignore)
    shutil.copytree(REPO / "tests" / "architecture", root / "tests" / "architecture", ignore=ignore)
    shutil.copy(REPO / ".importlinter", root / ".importlinter")
    return root


def with_line(path: Path, line: str) -> str:
    """Add ``line`` at the end of ``path``; return the text to put back."""
    before = path.read_text(encoding="utf-8")
    path.write_text(before + "\n" + line + "\n", encoding="utf-8")
    return before


def test_the_checkout_keeps_every_contract() -> None:
    done = lint_imports(REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "broken" not in done.stdout.lower().replace("0 broken", ""), done.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        (
            "nodefence/engine/model.py",
            "import nodefence.kube.client  # noqa",
            "The engine decides on facts alone",
        ),
        (
            "nodefence/settings.py",
            "import nodefence.shell.fencer  # noqa",
            "Policy and settings import nothing above them",
        ),
        (
            "nodefence/commands/status.py",
            "import nodefence_sim.server  # noqa",
            "The product never imports the simulator",
        ),
        (
            "nodefence/kube/convert.py",
            "import nodefence.runtime  # noqa",
            "Adapters and the shell never import runtime",
        ),
        (
            "nodefence/errors.py",
            "import nodefence.settings  # noqa",
            "No import circle among nodefence's modules",
        ),
    ],
)
def test_a_forbidden_import_breaks_its_contract(
    copy: Path, module: str, line: str, contract: str
) -> None:
    path = copy / "service" / module
    before = with_line(path, line)
    try:
        done = lint_imports(copy)
    finally:
        path.write_text(before, encoding="utf-8")
    assert done.returncode != 0, done.stdout
    broken = done.stdout.split("Broken contracts", 1)[-1]
    assert contract in broken.replace("\n", " "), done.stdout
