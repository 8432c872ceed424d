"""What deploy/README.md tells an operator to run does what it says: the Alertmanager patch adds
to spec.secrets instead of replacing it, the token-file patch renders into a valid Deployment,
and the Slack settings it lists are every one nodefence requires."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from nodefence.slack.routes import _APPROVAL_SETTINGS

from .conftest import DEPLOY, Obj

README = DEPLOY / "README.md"
K8S_VERSION = "1.32"
ALERTMANAGER: Obj = {
    "apiVersion": "monitoring.coreos.com/v1",
    "kind": "Alertmanager",
    "metadata": {"name": "main", "namespace": "monitoring"},
    "spec": {"replicas": 3},
}


def readme() -> str:
    return README.read_text()


def kubectl() -> str:
    found = shutil.which("kubectl")
    if found is None:
        pytest.fail("kubectl is required (.ci/run checks for it)")
    return found


def alertmanager_patches() -> list[str]:
    section = readme().split("## 5. Alertmanager", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"patch alertmanager main --type json \\\n\s*-p '(\[.*?\])'", section)


def patched(tmp_path: Path, obj: Obj, patch: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "alertmanager.yaml"
    path.write_text(yaml.safe_dump(obj))
    return subprocess.run(
        [
            kubectl(),
            "patch",
            "--local",
            "-f",
            str(path),
            "--type",
            "json",
            "-p",
            patch,
            "-o",
            "yaml",
        ],
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_alertmanager_patch_adds_to_the_secrets_already_there(tmp_path: Path) -> None:
    append, create = alertmanager_patches()
    with_secrets = {**ALERTMANAGER, "spec": {"replicas": 3, "secrets": ["alertmanager-tls"]}}
    out = patched(tmp_path, with_secrets, append)
    assert out.returncode == 0, out.stderr
    assert yaml.safe_load(out.stdout)["spec"]["secrets"] == [
        "alertmanager-tls",
        "nodefence-alert-token",
    ]
    # Without a list yet the append fails, which is why the README creates the list instead.
    assert patched(tmp_path, ALERTMANAGER, append).returncode != 0
    out = patched(tmp_path, ALERTMANAGER, create)
    assert out.returncode == 0, out.stderr
    assert yaml.safe_load(out.stdout)["spec"]["secrets"] == ["nodefence-alert-token"]
    assert "patch alertmanager main --type merge" not in readme()


def yaml_block_after(marker: str) -> Any:
    text = readme()
    start = text.index(marker)
    block = text[start:].split("```", 1)[0]
    return yaml.safe_load(block)


def test_the_token_file_patch_renders_a_valid_deployment(tmp_path: Path) -> None:
    patch = yaml_block_after("# alert-token-file.yaml, listed under patches: in your overlay")
    (tmp_path / "alert-token-file.yaml").write_text(yaml.safe_dump(patch))
    overlay = DEPLOY / "overlays" / "deployment"
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(overlay, tmp_path)],
                "patches": [{"path": "alert-token-file.yaml"}],
            }
        )
    )
    out = subprocess.run(
        [kubectl(), "kustomize", "--load-restrictor", "LoadRestrictionsNone", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    objs = [o for o in yaml.safe_load_all(out.stdout) if o]
    [deployment] = [o for o in objs if o["kind"] == "Deployment"]
    kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    path = Path(env["NODEFENCE_ALERT_TOKEN_FILE"])
    [mount] = [m for m in container["volumeMounts"] if m["name"] == "alert-tokens"]
    assert mount["readOnly"] is True
    assert path.parent == Path(mount["mountPath"])
    [volume] = [v for v in pod["volumes"] if v["name"] == "alert-tokens"]
    assert volume["secret"]["secretName"] == "nodefence-alert-tokens"
    assert volume["secret"]["defaultMode"] & 0o222 == 0
    # The rest of the container is the overlay's, untouched.
    assert env["NODEFENCE_POLICY_FILE"] == "/etc/nodefence/policy/policy.yaml"
    assert f"--from-literal={path.name}=" in readme()


def test_every_slack_setting_nodefence_requires_is_listed() -> None:
    text = readme()
    required = [*_APPROVAL_SETTINGS.values(), "NODEFENCE_SLACK_APPROVERS"]
    for name in required:
        assert f"`{name}`" in text, name
        assert f"--from-literal={name}=" in text, name


def test_dry_run_is_not_said_to_record_events() -> None:
    text = " ".join(readme().split())
    assert "records Events" not in text
    assert "no Event either" in text
    assert "GET /decisions" in text


def test_every_command_the_runbook_names_exists() -> None:
    """The 3 a.m. runbook's commands are real subcommands with the options it uses."""
    section = readme().split("## The 3 a.m. runbook", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`nodefence ([a-z][a-z-]+)", section))
    assert {"status", "explain", "pause", "resume", "release"} <= named
    for command in sorted(named):
        out = subprocess.run(
            [sys.executable, "-m", "nodefence", command, "--help"],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert out.returncode == 0, (command, out.stderr)
        for option in re.findall(rf"`nodefence {command} [^`]*?(--[a-z-]+)", section):
            assert option in out.stdout, (command, option)
