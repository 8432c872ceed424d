"""What every conformance test uses: real kubectl and the official Python client pointed at the
simulated cluster, and a poll with a deadline."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from kubernetes import client, config

from nodefence_sim.testing import SimulatorHandle

REPO = Path(__file__).resolve().parents[2]
# Generous: a poll returns as soon as its condition holds, and must hold on a busy machine.
DEADLINE = 30.0


async def kubectl(handle: SimulatorHandle, *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        "kubectl",
        "--kubeconfig",
        str(handle.kubeconfig),
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "HOME": str(handle.kubeconfig.parent)},
        cwd=REPO,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


def api(handle: SimulatorHandle) -> client.ApiClient:
    configuration = client.Configuration()
    config.load_kube_config(str(handle.kubeconfig), client_configuration=configuration)
    return client.ApiClient(configuration)


async def until(check: Any, what: str) -> None:
    """Poll ``check()`` (a coroutine function) until true or the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE
    while not await check():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)
