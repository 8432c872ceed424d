"""`make demo` runs `nodefence demo --fencing redfish`: it must tell the whole seed story with
power fencing and exit 0; plain `nodefence demo` tells it on inference alone and says so."""

from __future__ import annotations

import subprocess
import sys

import pytest

COMMON_STEPS = (
    "hang Terminating",
    "carries the out-of-service taint",
    "purged with grace 0",
    "StatefulSet pods run again on other nodes",
    "healthy delay starts now",
    "the out-of-service taint is removed",
    "DaemonSet pods run on control02 again",
)


def _demo(*args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "nodefence", "demo", *args],
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    out = result.stdout
    assert "FAILED" not in out
    assert "demo complete" in out
    for step in COMMON_STEPS:
        assert step in out, step
    return out


@pytest.mark.timeout(180)
def test_powered_demo_proves_the_machine_off_before_the_taint() -> None:
    out = _demo("--fencing", "redfish")
    still_on = out.index("still reports control02 On")
    off = out.index("reports the machine is Off (read back after nodefence powered it off")
    tainted = out.index("ok control02 carries the out-of-service taint")
    assert still_on < off < tainted, "the BMC's Off must be read back before the taint"
    assert "its BMC reports control02 On again" in out
    assert "came back with a new boot ID" in out
    assert "boot ID changed since fence time" in out


@pytest.mark.timeout(180)
def test_inference_demo_says_it_has_no_proof() -> None:
    out = _demo()
    assert "inference mode" in out
    assert "no proof" in out
