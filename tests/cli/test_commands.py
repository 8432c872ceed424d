"""The console script as operators run it: real processes, real environment variables."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest
from bench.processes import free_port

from nodefence_sim.testing import SimulatorProcess

SECRET = "s3cr3t-token-value-never-printed"


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nodefence", *args],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_check_config_masks_secrets_and_shows_policy(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("dry_run: true\ncluster:\n  max_fenced_nodes: 2\n")
    result = run(
        "check-config",
        "--offline",
        env={"NODEFENCE_ALERT_TOKEN": SECRET, "NODEFENCE_POLICY_FILE": str(policy)},
    )
    assert result.returncode == 0, result.stderr
    assert SECRET not in result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["settings"]["alert_token"] == "********"
    assert report["policy"]["cluster"]["max_fenced_nodes"] == 2
    assert report["policy"]["dry_run"] is True


def test_invalid_policy_fails_naming_the_field(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("rules:\n  - lease_staleness_seconds: -5\n")
    result = run(
        "check-config",
        env={"NODEFENCE_ALERT_TOKEN": SECRET, "NODEFENCE_POLICY_FILE": str(policy)},
    )
    assert result.returncode == 2
    assert "lease_staleness_seconds" in result.stderr


def test_serve_refuses_to_start_without_credentials() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NODEFENCE_")}
    result = subprocess.run(
        [sys.executable, "-m", "nodefence", "serve"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "NODEFENCE_ALERT_TOKEN" in result.stderr


@pytest.mark.timeout(90)
async def test_serve_becomes_ready_against_the_simulator_and_stops_on_sigterm(
    tmp_path: Path,
) -> None:
    output = tmp_path / "serve.log"
    with SimulatorProcess() as sim, output.open("wb") as sink:
        kubeconfig = sim.kubeconfig
        port = free_port()
        env = {
            **os.environ,
            "PORT": str(port),
            "KUBECONFIG": str(kubeconfig),
            "NODEFENCE_ALERT_TOKEN": SECRET,
            "NODEFENCE_NAMESPACE": "nodefence",
        }
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "nodefence",
            "serve",
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 30
            async with aiohttp.ClientSession() as session:
                while True:
                    try:
                        async with session.get(f"http://127.0.0.1:{port}/readyz") as r:
                            if r.status == 200:
                                break
                    except aiohttp.ClientError:
                        pass
                    assert time.monotonic() < deadline, "serve never became ready"
                    await asyncio.sleep(0.1)
                async with session.post(
                    f"http://127.0.0.1:{port}/alerts", json={"version": "4"}
                ) as r:
                    assert r.status == 401
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                pytest.fail("serve did not stop on SIGTERM:\n" + output.read_text()[-4000:])
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        out = output.read_text()
        assert proc.returncode == 0, out
        assert SECRET not in out
        lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        assert lines, "serve logs JSON lines by default"
