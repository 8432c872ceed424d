"""A claim must outlast its power step: ``claim_timeout_seconds: 30`` beside a rule whose BMC may
take 60 s is refused at start, naming both numbers. Accepted, a claim rolled back at 32 s while
its replica still waited on the BMC let another replica fence afresh and power the machine on
again, and then the first replica's late power-off turned it off for good."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nodefence.policy import claim_outlasts_power_steps, parse_policy
from nodefence.runtime import effective_policy
from nodefence.settings import Settings

POLICY = """\
rules:
  - name: bare-metal
    fencing: {driver: redfish, action: "off", timeout_seconds: 60}
cluster:
  claim_timeout_seconds: 30
"""


def _env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("NODEFENCE_", "KUBE"))}
    return {**base, "NODEFENCE_AUTH_DISABLED": "true", **extra}


def test_a_claim_shorter_than_the_power_step_is_refused_by_check_config_and_serve(
    tmp_path: Path,
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    env = _env(NODEFENCE_POLICY_FILE=str(policy), NODEFENCE_REQUEST_DEADLINE_SECONDS="20")

    for command in (["check-config", "--offline"], ["serve"]):
        result = subprocess.run(
            [sys.executable, "-m", "nodefence", *command],
            env={**env, "PORT": "0"},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 2, (command, result.stderr)
        assert "cluster.claim_timeout_seconds (30) is shorter than rule 'bare-metal'" in (
            result.stderr
        )
        assert "= 80s" in result.stderr
        assert "at least 81" in result.stderr


def test_a_claim_that_outlasts_every_power_step_is_accepted(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY.replace("claim_timeout_seconds: 30", "claim_timeout_seconds: 81"))
    settings = Settings(policy_file=str(policy), auth_disabled=True, request_deadline_seconds=20)

    assert effective_policy(settings).cluster.claim_timeout_seconds == 81


@pytest.mark.parametrize(
    ("fencing", "short"),
    [
        ({"driver": "redfish", "action": "off", "timeout_seconds": 15}, True),
        ({"driver": "ipmi", "action": "reboot", "timeout_seconds": 15}, True),
        ({"driver": "redfish", "action": "verify", "timeout_seconds": 15}, False),
        ({"driver": "none"}, False),
    ],
)
def test_only_rules_that_power_need_the_longer_claim(
    fencing: dict[str, object], short: bool
) -> None:
    policy = parse_policy(
        {"rules": [{"name": "r", "fencing": fencing}], "cluster": {"claim_timeout_seconds": 30}}
    )

    assert bool(claim_outlasts_power_steps(policy, 20)) is short
