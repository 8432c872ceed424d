"""The simulator is its own package (``nodefence_sim``): the receiver and its tools never load
it, so what runs in a cluster cannot depend on the fake cluster the tests run on. Only the two
commands that are about the embedded cluster, ``simulate`` and ``demo``, reach it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PRODUCT = Path(__file__).resolve().parents[2] / "service" / "nodefence"
# The embedded playground: the demo drives the product against the simulated cluster.
MAY_IMPORT_THE_SIMULATOR = {PRODUCT / "cli.py", PRODUCT / "demo"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def _allowed(path: Path) -> bool:
    return any(path == place or place in path.parents for place in MAY_IMPORT_THE_SIMULATOR)


def test_no_product_module_imports_the_simulator() -> None:
    offenders = sorted(
        str(path.relative_to(PRODUCT))
        for path in PRODUCT.rglob("*.py")
        if not _allowed(path)
        and any(name.split(".")[0] == "nodefence_sim" for name in _imports(path))
    )
    assert offenders == []
    assert not (PRODUCT / "sim").exists()


def test_the_receiver_loads_without_the_simulator() -> None:
    """What ``nodefence serve``, ``reconcile``, ``plan`` and ``status`` import, loaded in a
    fresh interpreter, leaves the simulator unloaded."""
    probe = (
        "import sys\n"
        "import nodefence.cli, nodefence.http.app, nodefence.runtime, nodefence.status\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'nodefence_sim'))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"
