"""The simulator is a distribution of its own, ``nodefence-sim`` (the package ``nodefence_sim``,
built from ``service/pyproject.toml``): the product's distribution, ``nodefence``, carries none of
it, so what runs in a cluster cannot depend on the fake cluster the tests run on. Of the product,
only the CLI's ``simulate`` and ``demo`` reach it, when they run, and without it they say in one
line which distribution to install.

The wheels are built for real from a copy of the checkout, with the build backend the venv holds
(no network), and installed into scratch virtualenvs."""

from __future__ import annotations

import ast
import email
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import urllib.request
import zipfile
from collections.abc import Iterator
from email.message import Message
from pathlib import Path

import pytest

import nodefence

REPO = Path(__file__).resolve().parents[2]
SERVICE = REPO / "service"
PRODUCT = SERVICE / "nodefence"
SIMULATOR = SERVICE / "nodefence_sim"
VERSION = nodefence.__version__
# The one product module that may name the simulator: the CLI, inside the two commands about it.
MAY_IMPORT_THE_SIMULATOR = {PRODUCT / "cli.py"}


def _imports(tree: ast.AST) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def _names_the_simulator(names: set[str]) -> bool:
    return any(name.split(".")[0] == "nodefence_sim" for name in names)


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def test_no_product_module_imports_the_simulator() -> None:
    offenders = sorted(
        str(path.relative_to(PRODUCT))
        for path in PRODUCT.rglob("*.py")
        if path not in MAY_IMPORT_THE_SIMULATOR and _names_the_simulator(_imports(_tree(path)))
    )
    assert offenders == []
    assert not (PRODUCT / "sim").exists()


def test_the_cli_imports_the_simulator_only_when_a_command_needs_it() -> None:
    """Module level of cli.py: no simulator import, so every other command loads without it."""
    cli = _tree(PRODUCT / "cli.py")
    top_level = {
        name
        for statement in cli.body
        if isinstance(statement, ast.Import | ast.ImportFrom)
        for name in _imports(statement)
    }
    assert not _names_the_simulator(top_level)
    assert _names_the_simulator(_imports(cli)), "simulate and demo run the simulator"


def test_the_receiver_loads_without_the_simulator() -> None:
    """What ``nodefence serve``, ``reconcile``, ``plan`` and ``status`` import, loaded in a
    fresh interpreter, leaves the simulator unloaded."""
    probe = (
        "import sys\n"
        "import nodefence.cli, nodefence.http.app, nodefence.runtime, nodefence.commands.status\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'nodefence_sim'))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


def _copy_checkout(target: Path) -> Path:
    """What the two builds read, copied without local state, so that building writes nothing
    into the shared checkout."""
    target.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, target / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist")
    shutil.copytree(SERVICE, target / "service", ignore=ignore)
    return target


def _pip_wheel(
    out: Path, *sources: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``pip wheel`` offline, with the venv's own setuptools, as a release build runs it."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--disable-pip-version-check",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(out),
            *sources,
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The nodefence and nodefence-sim wheels, as ``pip wheel`` builds them from the checkout."""
    root = tmp_path_factory.mktemp("wheels")
    source = _copy_checkout(root / "src")
    out = root / "dist"
    built = _pip_wheel(out, ".", "./service", cwd=source)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-4000:]
    found = {path.name.split("-")[0]: path for path in out.glob("*.whl")}
    assert set(found) == {"nodefence", "nodefence_sim"}, sorted(found)
    return found


def _members(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


def _metadata(wheel: Path) -> Message:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return email.message_from_bytes(archive.read(name))


def _sources(package: Path) -> set[str]:
    """The checkout's modules and data files of a package, as wheel member names."""
    return {
        str(path.relative_to(SERVICE))
        for path in package.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


def _requirement_name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


def test_the_nodefence_wheel_carries_the_product_and_no_simulator(
    wheels: dict[str, Path],
) -> None:
    members = _members(wheels["nodefence"])
    metadata = _metadata(wheels["nodefence"])

    assert sorted(m for m in members if m.startswith("nodefence_sim")) == []
    assert not any("nodefence_sim" in m or "nodefence-sim" in m for m in members)
    assert _sources(PRODUCT) <= members, sorted(_sources(PRODUCT) - members)
    assert metadata["Name"] == "nodefence"
    assert metadata["Version"] == VERSION
    requires = metadata.get_all("Requires-Dist") or []
    assert not any(_requirement_name(r) == "nodefence-sim" for r in requires), requires
    with zipfile.ZipFile(wheels["nodefence"]) as archive:
        (entry_points,) = [n for n in archive.namelist() if n.endswith("/entry_points.txt")]
        assert "nodefence = nodefence.cli:main" in archive.read(entry_points).decode()


def test_the_sim_wheel_carries_the_simulator_and_requires_the_same_nodefence(
    wheels: dict[str, Path],
) -> None:
    members = _members(wheels["nodefence_sim"])
    metadata = _metadata(wheels["nodefence_sim"])
    requires = metadata.get_all("Requires-Dist") or []

    assert _sources(SIMULATOR) <= members, sorted(_sources(SIMULATOR) - members)
    assert "nodefence_sim/scenarios/seed.yaml" in members
    assert "nodefence_sim/demo/story.py" in members
    assert sorted(m for m in members if m.startswith("nodefence/")) == []
    assert metadata["Name"] == "nodefence-sim"
    assert metadata["Version"] == VERSION
    assert f"nodefence=={VERSION}" in requires
    # What it needs besides the product is installed at the tested versions (make venv, CI).
    locked = {
        _requirement_name(line)
        for line in (REPO / "requirements.lock").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    others = {_requirement_name(r) for r in requires} - {"nodefence"}
    assert others, requires
    assert others <= locked, sorted(others - locked)


def test_the_sim_sdist_rebuilds_a_wheel_with_the_same_requirement(tmp_path: Path) -> None:
    """A release's source archive of nodefence-sim builds on its own: it carries the one file
    its version and its nodefence pin are read from, and no more of the product."""
    source = _copy_checkout(tmp_path / "src") / "service"
    build_sdist = "from setuptools import build_meta; print(build_meta.build_sdist('../sdist'))"
    built = subprocess.run(
        [sys.executable, "-c", build_sdist],
        cwd=source,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-4000:]
    sdist = tmp_path / "src" / "sdist" / built.stdout.split()[-1]
    with tarfile.open(sdist) as archive:
        product = sorted(n for n in archive.getnames() if "/nodefence/" in n)
        archive.extractall(tmp_path / "unpacked", filter="data")
    assert product == [f"nodefence_sim-{VERSION}/nodefence/__init__.py"]
    rebuilt = _pip_wheel(tmp_path / "dist", str(tmp_path / "unpacked" / f"nodefence_sim-{VERSION}"))
    assert rebuilt.returncode == 0, rebuilt.stderr[-4000:]
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    assert f"nodefence=={VERSION}" in (_metadata(wheel).get_all("Requires-Dist") or [])
    assert not any(m.startswith("nodefence/") for m in _members(wheel))
    assert "nodefence_sim/scenarios/seed.yaml" in _members(wheel)


def _scratch_venv(root: Path, wheels: list[Path]) -> Path:
    """A virtualenv holding exactly ``wheels`` (no dependency resolution, no index), whose
    third-party dependencies are this venv's, through a path file naming a directory of links to
    them: everything of its site-packages but its own nodefence and nodefence-sim installs."""
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    installed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--disable-pip-version-check",
            "--python",
            str(python),
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            *map(str, wheels),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stderr[-4000:]
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    dependencies = root / "dependencies"
    dependencies.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.lower().startswith(("nodefence", "__editable__")):
            (dependencies / entry.name).symlink_to(entry)
    (Path(site) / "dependencies.pth").write_text(f"{dependencies}\n")
    return venv


def _run(venv: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return subprocess.run(
        [str(venv / "bin" / args[0]), *args[1:]],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=cwd,
        env=env,
    )


def test_the_nodefence_wheel_alone_names_the_missing_distribution(
    wheels: dict[str, Path], tmp_path: Path
) -> None:
    venv = _scratch_venv(tmp_path, [wheels["nodefence"]])
    probe = (
        "import importlib.util, importlib.metadata, nodefence\n"
        "print(nodefence.__file__)\n"
        "print(importlib.util.find_spec('nodefence_sim'))\n"
        "print(sorted(d.metadata['Name'] for d in importlib.metadata.distributions()"
        " if d.metadata['Name'].startswith('nodefence')))\n"
    )
    where, sim, dists = _run(venv, "python", "-c", probe, cwd=tmp_path).stdout.splitlines()
    assert Path(where).is_relative_to(venv), where
    assert sim == "None"
    assert dists == "['nodefence']"

    version = _run(venv, "nodefence", "--version", cwd=tmp_path)
    assert (version.returncode, version.stdout) == (0, f"nodefence {VERSION}\n"), version.stderr
    for command in (["simulate", "--port", "0"], ["demo"], ["demo", "--approval"]):
        refused = _run(venv, "nodefence", *command, cwd=tmp_path)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert refused.stdout == ""
        (line,) = refused.stderr.splitlines()
        assert line.startswith(f"nodefence {command[0]}: ")
        assert "nodefence-sim distribution" in line
        assert f"pip install nodefence-sim=={VERSION}" in line


@pytest.fixture
def simulator(wheels: dict[str, Path], tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    venv = _scratch_venv(tmp_path, [wheels["nodefence"], wheels["nodefence_sim"]])
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    process = subprocess.Popen(
        [str(venv / "bin" / "nodefence"), "simulate", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_both_wheels_serve_the_seed_cluster(simulator: subprocess.Popen[str]) -> None:
    """The sim wheel carries its scenario data and runs with the product wheel it requires."""
    assert simulator.stdout is not None
    line = simulator.stdout.readline()
    assert line.startswith("nodefence simulate: listening on "), line
    url = line.split("listening on ", 1)[1].split()[0]
    with urllib.request.urlopen(f"{url}/api/v1/nodes", timeout=30) as response:  # noqa: S310
        body = response.read().decode()
    assert '"control02"' in body


def test_make_venv_installs_both_distributions_editable() -> None:
    makefile = (REPO / "Makefile").read_text()
    assert "$(PINNED) $(BIN)/pip install --quiet -e '.[dev]' -e ./service" in makefile
    recipe_inputs = next(
        line for line in makefile.splitlines() if line.startswith("$(VENV)/.installed:")
    )
    # A change to either distribution's metadata reinstalls the venv.
    for source in ("pyproject.toml", "service/pyproject.toml", "service/setup.py"):
        assert source in recipe_inputs.split(), source
    # The lock is re-resolved from both.
    assert ".lock-venv/bin/pip install --quiet '.[dev]' ./service" in makefile
