"""``check-config`` refuses a policy that escalates failed power steps to Slack
(``fencing.on_failure: approval``) when the Slack settings are missing, naming the rule and the
settings, and accepts it once they are there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

POLICY = {
    "rules": [
        {
            "name": "servers",
            "fencing": {"driver": "redfish", "action": "off", "on_failure": "approval"},
        }
    ]
}
SLACK = {
    "NODEFENCE_SLACK_BOT_TOKEN": "xoxb-check-config",
    "NODEFENCE_SLACK_SIGNING_SECRET": "signing-check-config",
    "NODEFENCE_APPROVAL_KEY": "approval-key-check-config",
    "NODEFENCE_SLACK_CHANNEL": "C0NODEFENCE",
    "NODEFENCE_SLACK_APPROVERS": "U0ONCALL",
}


def check_config(tmp_path: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(POLICY))
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "NODEFENCE_AUTH_DISABLED": "true",
        "NODEFENCE_POLICY_FILE": str(policy),
        **extra,
    }
    return subprocess.run(
        [sys.executable, "-m", "nodefence", "check-config", "--offline"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=60,
    )


def test_escalation_without_slack_is_a_configuration_error(tmp_path: Path) -> None:
    out = check_config(tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "rule 'servers' sets fencing.on_failure: approval" in out.stderr
    assert "NODEFENCE_SLACK_BOT_TOKEN" in out.stderr
    assert "NODEFENCE_SLACK_APPROVERS or NODEFENCE_SLACK_APPROVER_GROUPS" in out.stderr
    assert out.stdout == ""


def test_escalation_with_slack_is_accepted_and_described(tmp_path: Path) -> None:
    out = check_config(tmp_path, **SLACK)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "a person is asked in Slack" in out.stdout
    for secret in ("xoxb-check-config", "signing-check-config", "approval-key-check-config"):
        assert secret not in out.stdout + out.stderr
