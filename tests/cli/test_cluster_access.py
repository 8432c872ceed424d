"""Every command finds its cluster as kubectl does: ``KUBECONFIG`` (a list), else
``~/.kube/config``, else the in-cluster account; ``--kubeconfig``, ``--context`` and
``-n/--namespace`` on every command; a kubeconfig that cannot be used is one line naming the
file, exit 1, and nothing written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from bench.processes import free_port

from nodefence.cli import CLUSTER_COMMANDS, _parser

from .operator_support import Cluster


def run(
    *args: str, home: Path, extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``nodefence`` with no KUBECONFIG and no NODEFENCE_ settings, HOME at ``home``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NODEFENCE_", "KUBE"))}
    env.update({"HOME": str(home), "NODEFENCE_AUTH_DISABLED": "true", **(extra or {})})
    return subprocess.run(
        [sys.executable, "-m", "nodefence", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def two_contexts(cluster: Cluster, path: Path) -> Path:
    """The cluster's kubeconfig with a second context, current, that points nowhere."""
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    (good,) = config["contexts"]
    (server,) = config["clusters"]
    config["clusters"].append(
        {"name": "nowhere", "cluster": {"server": f"http://127.0.0.1:{free_port()}"}}
    )
    config["contexts"].append(
        {"name": "nowhere", "context": {**good["context"], "cluster": "nowhere"}}
    )
    config["current-context"] = "nowhere"
    path.write_text(yaml.safe_dump(config))
    assert server["name"] != "nowhere"
    return path


def test_every_cluster_command_takes_kubectls_flags() -> None:
    parser = _parser()
    for command in CLUSTER_COMMANDS:
        extra = {
            "explain": ["n1"],
            "release": ["n1", "--reason", "r"],
            "pause": ["--reason", "r"],
            "plan": ["--payload", "p.json"],
        }
        args = parser.parse_args(
            [command, *extra.get(command, []), "--kubeconfig", "k", "--context", "c", "-n", "ns"]
        )
        assert (args.kubeconfig, args.context, args.namespace) == ("k", "c", "ns"), command


def test_home_kubeconfig_is_used_without_kubeconfig_set(cluster: Cluster, tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    (home / ".kube" / "config").write_text(cluster.kubeconfig.read_text())
    done = run("status", "-o", "json", "-n", "nodefence", home=home)
    assert done.returncode == 0, done.stderr
    assert '"fenced": []' in done.stdout


def test_context_and_namespace_select(cluster: Cluster, tmp_path: Path) -> None:
    config = two_contexts(cluster, tmp_path / "two.yaml")
    (good,) = [
        c["name"] for c in yaml.safe_load(config.read_text())["contexts"] if c["name"] != "nowhere"
    ]
    home = tmp_path / "home"
    home.mkdir()
    refused = run("status", "--kubeconfig", str(config), home=home)
    assert refused.returncode == 1
    assert "cannot reach the Kubernetes API" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert cluster.kubectl("create", "namespace", "ops").returncode == 0
    # Nothing of nodefence's in ops yet: refused, naming the namespace and how to choose one.
    elsewhere = ("pause", "--reason", "maintenance", "--kubeconfig", str(config))
    refused = run(*elsewhere, "--context", good, "-n", "ops", home=home)
    assert refused.returncode == 1
    assert "nodefence is not installed in namespace ops" in refused.stderr
    assert "-n NAMESPACE" in refused.stderr
    assert cluster.kubectl("get", "configmap", "-n", "ops", "nodefence-control").returncode != 0
    policy = cluster.workdir / "policy-cm.yaml"
    policy.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": "nodefence-policy-abc",
                    "namespace": "ops",
                    "labels": {"app.kubernetes.io/part-of": "nodefence"},
                },
                "data": {"policy.yaml": ""},
            }
        )
    )
    assert cluster.kubectl("apply", "-f", str(policy)).returncode == 0
    paused = run(
        "pause",
        "--reason",
        "maintenance",
        "--kubeconfig",
        str(config),
        "--context",
        good,
        "-n",
        "ops",
        home=home,
    )
    assert paused.returncode == 0, paused.stderr
    held = cluster.kubectl_json("get", "configmap", "-n", "ops", "nodefence-control")
    assert held["metadata"]["annotations"]["nodefence.io/paused"] == "true"
    assert (
        cluster.kubectl("get", "configmap", "-n", "nodefence", "nodefence-control").returncode != 0
    )
    # KUBECONFIG as a list: a missing file is skipped, the others merged.
    listed = f"{tmp_path / 'missing.yaml'}{os.pathsep}{config}"
    ok = run("status", "--context", good, "-n", "ops", home=home, extra={"KUBECONFIG": listed})
    assert ok.returncode == 0, ok.stderr
    assert "paused" in ok.stdout.lower()


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("", "empty or not a kubeconfig"),
        ("clusters: [unclosed\n", "not valid YAML"),
        ("- just\n- a list\n", "empty or not a kubeconfig"),
        ("clusters: {}\ncontexts: []\nusers: []\n", "clusters must be a list"),
        ("clusters: []\ncontexts: []\nusers: []\ncurrent-context: gone\n", "gone"),
    ],
)
def test_a_broken_kubeconfig_is_one_line_naming_the_file(
    tmp_path: Path, content: str, problem: str
) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(content)
    for args in (("status",), ("explain", "n1"), ("reconcile",), ("pause", "--reason", "x")):
        done = run(*args, "--kubeconfig", str(broken), home=tmp_path)
        assert done.returncode == 1, (args, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, (args, done.stderr)
        assert lines[0].startswith("nodefence: "), lines
        assert str(broken) in lines[0], lines
        assert problem in lines[0], lines
        assert "Traceback" not in done.stderr


def test_a_missing_kubeconfig_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    done = run("status", "--kubeconfig", str(missing), home=tmp_path)
    assert done.returncode == 1
    assert done.stderr.strip() == f"nodefence: kubeconfig {missing}: no such file"
    listed = run("status", home=tmp_path, extra={"KUBECONFIG": str(missing)})
    assert listed.returncode == 1
    assert "none of its files exists" in listed.stderr


def test_serve_and_reconcile_help_list_the_settings_they_read() -> None:
    from nodefence.settings import environment_names

    for command in ("serve", "reconcile"):
        done = subprocess.run(
            [sys.executable, "-m", "nodefence", command, "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        flat = " ".join(done.stdout.split())
        for name in environment_names():
            assert name in flat, (command, name)
        for flag in ("--kubeconfig", "--context", "--namespace"):
            assert flag in flat, (command, flag)
