"""The product image as built by ``make image`` (``tools/image/build.sh``), and the project's own
Docker daemon to run it in (``tools/image/dockerd.sh``).

The image is built once per test session by the same script ``make image`` runs, with its cache:
seconds when nothing changed. The daemon is then started for the tests of a module under the lock
the build takes too (``.cache/docker/lock``), so that no build stops it while a test runs a
container, and stopped after them. Without Debian's docker.io, debootstrap or socat, or without
root (dockerd needs it), the tests skip; under CI (``CI`` set) they fail, since ``.ci/run``
installs them all.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "docker"
# Debian's docker CLI, which matches its daemon (another docker on PATH may be newer).
DOCKER = "/usr/bin/docker"
# A cold build makes the stand-in base and installs every package: minutes, on a busy machine
# more; another build or module of image tests may hold the daemon's lock meanwhile.
BUILD_TIMEOUT = 1800.0
LOCK_TIMEOUT = 1800.0
# For the test that builds the image and waits for the daemon, in its setup.
SETUP_TIMEOUT = int(BUILD_TIMEOUT + LOCK_TIMEOUT + 300)


def _missing() -> str | None:
    """What this machine lacks to build and run the image, or None."""
    for tool, package in (
        (DOCKER, "docker.io"),
        ("dockerd", "docker.io"),
        ("debootstrap", "debootstrap"),
        ("socat", "socat"),
    ):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian package {package})"
    if os.geteuid() != 0:
        return "the image's Docker daemon needs root"
    return None


@dataclass(frozen=True)
class Docker:
    """The docker CLI against the project's daemon, and the image ``make image`` built."""

    host: str
    image: str

    def run(
        self, *args: str, input: str | None = None, timeout: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        """``docker ARGS``, its output captured; never raises on a non-zero exit."""
        return subprocess.run(
            [DOCKER, *args],
            input=input,
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
            env={**os.environ, "DOCKER_HOST": self.host},
        )

    def inspect(self) -> dict[str, Any]:
        done = self.run("image", "inspect", self.image)
        assert done.returncode == 0, done.stderr
        (found,) = json.loads(done.stdout)
        return dict(found)

    def name(self) -> str:
        """A container name of its own, for a container a test must stop and remove."""
        return f"nodefence-test-{uuid.uuid4().hex[:12]}"


def _lock(path: Path) -> int:
    """The daemon's lock, waited for with a deadline (a build or another session may hold it)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + LOCK_TIMEOUT
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                pytest.fail(f"{path} is held by another build or test session")
            time.sleep(1)


def build_image() -> str:
    """The image reference ``make image``'s script prints last; skips (fails under CI) where
    this machine cannot build it."""
    missing = _missing()
    if missing is not None:
        if os.environ.get("CI"):
            pytest.fail(f"{missing}: .ci/run installs it")
        pytest.skip(missing)
    build = subprocess.run(
        [str(REPO / "tools" / "image" / "build.sh")],
        capture_output=True,
        text=True,
        check=False,
        timeout=BUILD_TIMEOUT,
        cwd=REPO,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-5000:]
    return build.stdout.strip().splitlines()[-1]


@contextlib.contextmanager
def running_daemon(image: str) -> Iterator[Docker]:
    """The daemon, for the block only, under its lock: a build waits on it meanwhile."""
    fd = _lock(CACHE / "lock")
    dockerd = str(REPO / "tools" / "image" / "dockerd.sh")
    try:
        started = subprocess.run(
            [dockerd, "start"], capture_output=True, text=True, check=False, timeout=120
        )
        assert started.returncode == 0, started.stderr
        yield Docker(started.stdout.strip().splitlines()[-1], image)
    finally:
        subprocess.run([dockerd, "stop"], check=False, timeout=120)
        os.close(fd)


@pytest.fixture(scope="session")
def image() -> str:
    """The image, built once per session."""
    return build_image()


@pytest.fixture(scope="module")
def docker(image: str) -> Iterator[Docker]:
    """The daemon, for the module's tests only."""
    with running_daemon(image) as daemon:
        yield daemon
