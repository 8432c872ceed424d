"""The two fields of the nodefence-sim distribution that come from the product's one version
source, ``nodefence.__version__``: its own version, and the exact ``nodefence`` it requires. The
simulator and the demo drive the product's internals, so they are only ever tested with the
nodefence of the same commit; pyproject.toml cannot derive a requirement from another
distribution's version, hence this file."""

from __future__ import annotations

import ast
from pathlib import Path

from setuptools import setup

SOURCE = Path(__file__).resolve().with_name("nodefence") / "__init__.py"


def nodefence_version() -> str:
    """``__version__`` read from the product's source, as setuptools' ``attr:`` does for it."""
    for statement in ast.parse(SOURCE.read_text(encoding="utf-8")).body:
        if (
            isinstance(statement, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__version__" for t in statement.targets)
            and isinstance(statement.value, ast.Constant)
            and isinstance(statement.value.value, str)
        ):
            return statement.value.value
    raise SystemExit(f"nodefence-sim: no __version__ string in {SOURCE}")


VERSION = nodefence_version()

setup(
    version=VERSION,
    install_requires=[
        f"nodefence=={VERSION}",
        # 3.14: web.RequestKey, the typed request storage the API server keeps its warnings in.
        "aiohttp>=3.14,<4",
        "multidict>=6",
        "PyYAML>=6",
        "pydantic>=2.6,<3",
        "jsonpatch>=1.33",
        # The real backend's throwaway CA and API server certificate (nodefence_sim.real.pki).
        "cryptography>=42",
    ],
)
