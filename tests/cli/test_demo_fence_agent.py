"""`nodefence demo --fencing fence-agent` tells the seed story through fence_redfish against the
simulated BMCs: the taint follows the agent's status read of Off, the machine is powered on
again through the agent, the proof is bound to the node's machine by the system UUID its BMC
reports, and no BMC password appears in the timeline."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from nodefence_sim.controllers.kubelet import system_uuid


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
    # The entries state no identity: the proof binds to control02's machine by the Redfish
    # system UUID read through fence_redfish's own BMC, the simulated machine's SMBIOS UUID.
    matched = f"identity matched ({system_uuid('control02')})"
    assert f"the proof is bound to control02's machine: {matched}" in out
    bound_proof = re.compile(
        r"proof: fence-agent fence_redfish ip=\S+ ipport=\d+ "
        r"systems_uri=/redfish/v1/Systems/control02 reported Off \([^)]*\); " + re.escape(matched)
    )
    # The fence decision and the NodeFenced Event on the Node both keep it.
    assert len(bound_proof.findall(out)) >= 2, out[-4000:]
    assert "identity unchecked" not in out
    assert "new boot ID" in out
    assert "password" not in out.lower()
