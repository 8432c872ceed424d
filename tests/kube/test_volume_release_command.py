"""The command a fence's reason and Event give an operator to release the volumes it left
attached, run as written by a real kubectl against the simulated API server: it deletes those
VolumeAttachments of the node, and no other."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from nodefence.engine.model import VolumeAttachmentFacts
from nodefence.engine.volumes import COMMAND_LIMIT, release_command
from nodefence.kube.convert import volume_attachment_facts
from nodefence_sim.resources import VOLUME_ATTACHMENTS
from nodefence_sim.testing import SimulatorHandle, running_simulator


@pytest.fixture
async def seed() -> AsyncIterator[SimulatorHandle]:
    async with running_simulator(scenario="seed") as handle:
        yield handle


def _attached(seed: SimulatorHandle) -> dict[str, list[VolumeAttachmentFacts]]:
    by_node: dict[str, list[VolumeAttachmentFacts]] = {}
    for item in seed.sim.store.items(VOLUME_ATTACHMENTS):
        facts = volume_attachment_facts(item)
        by_node.setdefault(facts.node_name, []).append(facts)
    return by_node


def _run(command: str, kubeconfig: Path) -> subprocess.CompletedProcess[str]:
    bash = shutil.which("bash")
    assert bash is not None
    # kubectl as the tests use it: the venv's, first on PATH.
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return subprocess.run(
        [bash, "-c", command],
        env={**os.environ, "KUBECONFIG": str(kubeconfig), "PATH": path},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("form", ["names", "node"])
async def test_the_release_command_deletes_the_nodes_attachments_and_no_other(
    seed: SimulatorHandle, form: str
) -> None:
    before = _attached(seed)
    node, mine = next((n, a) for n, a in sorted(before.items()) if a)
    others = {a.uid for n, attached in before.items() if n != node for a in attached}
    assert others, "the seed cluster has attachments on other nodes"
    # Listed often enough, the same attachments make the command long: it selects by node.
    listed = tuple(mine) if form == "names" else tuple(mine) * (COMMAND_LIMIT // 40 + 1)
    command = release_command(node, listed)
    assert command.startswith("kubectl delete" if form == "names" else "kubectl get")

    # In a thread: the simulator answering kubectl runs on this test's event loop.
    done = await asyncio.to_thread(_run, command, seed.kubeconfig)
    assert done.returncode == 0, done.stderr

    after = {a.uid for attached in _attached(seed).values() for a in attached}
    assert not {a.uid for a in mine} & after
    assert others <= after
