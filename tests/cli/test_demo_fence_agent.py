"""`nodefence demo --fencing fence-agent` tells the seed story through fence_redfish against the
simulated BMCs: the taint follows the agent's status read of Off, the machine is powered on
again through the agent, and no BMC password appears in the timeline."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest


@pytest.mark.timeout(240)
def test_the_fence_agent_demo_fences_after_fence_redfish_reads_off() -> None:
    if shutil.which("fence_redfish", path="/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin") is None:
        pytest.skip("fence_redfish is not installed (Debian package fence-agents)")
    result = subprocess.run(
        [sys.executable, "-m", "nodefence", "demo", "--fencing", "fence-agent"],
        capture_output=True,
        text=True,
        timeout=230,
        check=False,
    )
    out = result.stdout
    assert result.returncode == 0, out[-4000:] + result.stderr[-2000:]
    assert "demo complete" in out
    assert "FAILED" not in out
    assert "power fencing through a fence agent" in out
    assert "the taint came after the BMC read back Off: fence-agent fence_redfish" in out
    assert "its BMC reports control02 On again" in out
    assert "identity unchecked" in out
    assert "new boot ID" in out
    assert "password" not in out.lower()
