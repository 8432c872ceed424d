"""The command line at its edges: an API server that does not answer is one clear line and a
non-zero exit for every command that needs it; a reader that stops reading (``| head``) ends the
command quietly; ``check-config`` fails when what it is configured to reach does not answer;
error messages say their prefix once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from bench.processes import closed_port, free_port

from nodefence_sim.demo.payloads import node_alert, webhook
from nodefence_sim.kubeconfig import write_kubeconfig

from .operator_support import Cluster

UNREACHABLE = "cannot reach the Kubernetes API"


# A home without ~/.kube/config, so "no cluster" means none whatever this machine's user has.
EMPTY_HOME = tempfile.mkdtemp(prefix="nodefence-no-kubeconfig-")


def _env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("NODEFENCE_", "KUBE"))}
    return {**base, "HOME": EMPTY_HOME, "NODEFENCE_AUTH_DISABLED": "true", **extra}


def _run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nodefence", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def closed_port_kubeconfig(tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig whose server is a loopback port nothing listens on, for the whole test (a
    port only found free was once taken by a simulated API server, which answered)."""
    with closed_port() as port:
        yield write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{port}")


@pytest.mark.parametrize(
    "args",
    [
        ("status",),
        ("status", "-o", "json"),
        ("explain", "compute01"),
        ("release", "compute01", "--reason", "r", "--yes"),
        ("pause", "--reason", "r"),
        ("resume",),
        ("plan", "--payload", "{payload}"),
        ("reconcile",),
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_an_unreachable_api_is_one_line_and_a_non_zero_exit(
    args: tuple[str, ...], closed_port_kubeconfig: Path, tmp_path: Path
) -> None:
    payload = tmp_path / "payload.json"
    payload.write_text(json.dumps(webhook([node_alert("compute01")])))
    argv = [a.replace("{payload}", str(payload)) for a in args]
    started = time.monotonic()

    result = _run(*argv, env=_env(KUBECONFIG=str(closed_port_kubeconfig)))

    took = time.monotonic() - started
    assert result.returncode == 1, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"nodefence: {UNREACHABLE} (KUBECONFIG={closed_port_kubeconfig})")
    assert "Connect call failed" in lines[0]
    assert result.stdout == ""
    print(f"{' '.join(args)}: exit {result.returncode} after {took:.1f}s")


def test_check_config_fails_when_the_api_it_is_configured_for_does_not_answer(
    closed_port_kubeconfig: Path,
) -> None:
    result = _run("check-config", env=_env(KUBECONFIG=str(closed_port_kubeconfig)))

    assert result.returncode == 1
    assert f"nodefence: check-config: {UNREACHABLE} at http://127.0.0.1:" in result.stderr
    assert "Traceback" not in result.stderr
    report = json.loads(result.stdout)
    assert report["reachability"]["kubernetes"]["reachable"] is False


def test_check_config_reports_the_cluster_and_alertmanager_it_reaches(cluster: Cluster) -> None:
    result = _run("check-config", env=_env(KUBECONFIG=str(cluster.kubeconfig)))

    assert result.returncode == 0, result.stderr
    kubernetes = json.loads(result.stdout)["reachability"]["kubernetes"]
    assert kubernetes["reachable"] is True
    assert kubernetes["version"] == "v1.24.8"
    assert kubernetes["namespace"]["nodefence"]["nodefence-fences"] == "absent (not written yet)"

    with closed_port() as port:
        silent = f"http://127.0.0.1:{port}"
        failed = _run(
            "check-config",
            env=_env(KUBECONFIG=str(cluster.kubeconfig), NODEFENCE_ALERTMANAGER_URL=silent),
        )

    assert failed.returncode == 1
    assert f"nodefence: check-config: Alertmanager at {silent}" in failed.stderr
    assert json.loads(failed.stdout)["reachability"]["alertmanager"]["reachable"] is False


def test_check_config_without_any_cluster_fails_saying_what_it_could_not_reach() -> None:
    result = _run("check-config", env=_env())

    assert result.returncode == 1, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == [
        f"nodefence: check-config: {UNREACHABLE}: no KUBECONFIG, no ~/.kube/config, and not "
        "running in a cluster (set KUBECONFIG, or pass --offline to check the files only)"
    ]
    kubernetes = json.loads(result.stdout)["reachability"]["kubernetes"]
    assert kubernetes["checked"] is False
    assert kubernetes["reachable"] is False


def test_check_config_offline_checks_the_files_only_and_says_so(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("rules:\n  - name: default\n")
    # Nothing listens on this port: offline, not even an Alertmanager that is configured is
    # reached.
    silent = f"http://127.0.0.1:{free_port()}"
    env = _env(NODEFENCE_POLICY_FILE=str(policy), NODEFENCE_ALERTMANAGER_URL=silent)

    result = _run("check-config", "--offline", env=env)

    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["reachability"]["checked"] is False
    assert "--offline" in report["reachability"]["why"]
    assert report["settings"]["policy_file"] == str(policy)
    assert result.stderr.strip() == (
        "nodefence: check-config: --offline: only the files (settings, policy, BMC inventory) "
        "were checked; the Kubernetes API and Alertmanager were not reached"
    )
    # The files are still checked offline: a bad policy fails as it does online.
    policy.write_text("rules:\n  - lease_staleness_seconds: -5\n")
    refused = _run("check-config", "--offline", env=env)
    assert refused.returncode == 2
    assert "lease_staleness_seconds" in refused.stderr


def test_a_reader_that_stops_reading_ends_the_command_quietly(cluster: Cluster) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "nodefence", "status", "-o", "json"],
            env=_env(KUBECONFIG=str(cluster.kubeconfig)),
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write_end)

    assert result.stderr == ""
    assert result.returncode == 141


def test_status_piped_into_head_prints_its_first_line_and_nothing_on_stderr(
    cluster: Cluster,
) -> None:
    result = subprocess.run(
        ["bash", "-c", f"{sys.executable} -m nodefence status | head -1"],
        env=_env(KUBECONFIG=str(cluster.kubeconfig)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert result.returncode == 0
    assert result.stdout == "Pause switch: not paused\n"
    assert result.stderr == ""


def test_bad_settings_and_policy_say_their_prefix_once(tmp_path: Path) -> None:
    settings = _run("status", env=_env(NODEFENCE_REQUEST_DEADLINE_SECONDS="-1"))
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text("rules: [x]\n")
    policy = _run("status", env=_env(NODEFENCE_POLICY_FILE=str(policy_file)))

    assert settings.returncode == 2
    assert settings.stderr.count("invalid settings") == 1, settings.stderr
    assert settings.stderr.startswith("nodefence: invalid settings: request_deadline_seconds")
    assert policy.returncode == 2
    assert policy.stderr.count("invalid policy") == 1, policy.stderr
    assert policy.stderr.startswith(f"nodefence: invalid policy {policy_file}: rules[0]")


def test_a_payload_plan_cannot_use_is_one_line_naming_each_field(tmp_path: Path) -> None:
    payload = tmp_path / "payload.json"
    payload.write_text('{"version": "4"}')

    missing = _run("plan", "--payload", str(tmp_path / "absent.json"), env=_env())
    invalid = _run("plan", "--payload", str(payload), env=_env())

    assert missing.returncode == 1
    assert missing.stderr == f"nodefence: cannot read {tmp_path / 'absent.json'}: " + (
        "No such file or directory\n"
    )
    assert invalid.returncode == 1
    assert invalid.stderr == (
        f"nodefence: {payload} is not a webhook payload: status: Field required; "
        "alerts: Field required\n"
    )
