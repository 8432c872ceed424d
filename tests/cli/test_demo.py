"""`make demo` runs `nodefence demo`: it must tell the whole seed story and exit 0."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.timeout(180)
def test_demo_observes_every_step_of_the_seed_story() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "nodefence", "demo"],
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    out = result.stdout
    assert "FAILED" not in out
    assert "demo complete" in out
    for step in (
        "hang Terminating",
        "carries the out-of-service taint",
        "purged with grace 0",
        "StatefulSet pods run again on other nodes",
        "the out-of-service taint is removed",
        "DaemonSet pods run on control02 again",
    ):
        assert step in out, step
