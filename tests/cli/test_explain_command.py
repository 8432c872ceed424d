"""``nodefence explain NODE``: the decision a firing node alert would get now, on live facts,
with every guard's reason, and not one write (S8): the simulator's request log shows only reads,
and kubectl finds the node, the fence record and the BMC as they were."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta

import pytest
import yaml
from bench.processes import eventually, free_port, get_json, http

from .operator_support import INFERENCE_POLICY, KUBECTL, Cluster

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed"),
]

READS = {"get", "list", "watch"}


def _only_reads(cluster: Cluster, since: int) -> list[dict[str, object]]:
    seen = cluster.requests(since)
    assert seen, "explain read nothing from the cluster"
    writes = [r for r in seen if r["verb"] not in READS or r["method"] != "GET"]
    assert not writes, f"explain wrote to the cluster: {writes}"
    return seen


def test_explains_why_a_dead_node_without_proof_is_not_fenced(cluster: Cluster) -> None:
    cluster.down("control02", since_seconds=1200)
    before = cluster.node("control02")["metadata"]["resourceVersion"]
    cursor = cluster.cursor()

    result = cluster.nodefence("explain", "control02", env={"NODEFENCE_AUTH_DISABLED": "true"})

    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "A firing KubeNodeNotReady alert for node control02" in out
    # The headline says the verdict and, in plain words, the one guard that decides it.
    assert "nodefence would not fence it now: there is no proof that its machine is off" in out
    # Every guard is listed with its reason, the blocking one marked.
    for guard in ("ready", "not-ready-duration", "lease", "storm", "fence-budget", "flap"):
        assert f"ok  {guard}:" in out, out
    assert "NO  power-off: rule 'default' has no fencing section" in out
    assert "Held back because there is no proof that its machine is off: rule 'default'" in out
    # Internal guard names are the text's only in the per-guard listing, never its headline.
    assert "Held back by" not in out
    _only_reads(cluster, cursor)
    assert cluster.node("control02")["metadata"]["resourceVersion"] == before
    assert cluster.oos_taints("control02") == []


def test_json_names_the_alert_the_verdict_and_each_guard(cluster: Cluster) -> None:
    result = cluster.nodefence(
        "explain", "compute01", "-o", "json", env={"NODEFENCE_AUTH_DISABLED": "true"}
    )

    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["node"] == "compute01"
    assert report["alert"]["alertname"] == "KubeNodeNotReady"
    assert report["alert"]["labels"]["node"] == "compute01"
    assert "no Alertmanager is configured" in report["alert"]["source"]
    assert report["outcome"] == "would not fence it now: the node is Ready"
    # No wait with a known end: a Ready node may stay Ready.
    assert report["earliest"] is None
    # A Ready node with a live Lease: S1 and S2 hold it back.
    assert {"ready", "lease"} <= set(report["heldBackBy"])
    guards = {r["guard"]: r for r in report["decision"]["reasons"]}
    assert guards["ready"]["passed"] is False
    assert "dry-run" not in guards, "the dry run explain forces is not part of the answer"
    assert report["decision"]["actions"] == []
    assert report["decision"]["results"] == []


def test_a_fence_it_would_make_is_shown_and_not_made(cluster: Cluster) -> None:
    policy = cluster.policy(INFERENCE_POLICY)
    cluster.down("compute02", since_seconds=1200)
    cursor = cluster.cursor()

    result = cluster.nodefence(
        "explain",
        "compute02",
        "-o",
        "json",
        env={"NODEFENCE_AUTH_DISABLED": "true", "NODEFENCE_POLICY_FILE": str(policy)},
    )

    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["outcome"] == "would fence it"
    assert report["heldBackBy"] == []
    kinds = [a["type"] for a in report["decision"]["actions"]]
    assert kinds[:3] == ["claim", "fence", "confirm"]
    _only_reads(cluster, cursor)
    assert cluster.oos_taints("compute02") == []
    assert cluster.configmap("nodefence-fences") is None, "no budget slot was claimed"
    assert cluster.node_events("compute02") == []


def test_a_bmc_rule_lists_the_power_off_it_would_send_and_sends_none(cluster: Cluster) -> None:
    policy = cluster.policy(
        "rules:\n  - name: bmc\n    fencing:\n      driver: redfish\n      action: 'off'\n"
    )
    cluster.down("compute02", since_seconds=1200)
    assert cluster.power_state("compute02") == "On"
    cursor = cluster.cursor()

    result = cluster.nodefence(
        "explain",
        "compute02",
        env={
            "NODEFENCE_AUTH_DISABLED": "true",
            "NODEFENCE_POLICY_FILE": str(policy),
            "NODEFENCE_BMC_INVENTORY": str(cluster.bmc_inventory),
        },
    )

    assert result.returncode == 0, result.stderr
    assert "nodefence would fence it" in result.stdout
    assert "-> power node compute02 off through its BMC (redfish)" in result.stdout
    _only_reads(cluster, cursor)
    assert cluster.power_state("compute02") == "On", "explain sent a power action"
    assert cluster.oos_taints("compute02") == []


def test_a_node_that_does_not_exist_is_an_error(cluster: Cluster) -> None:
    result = cluster.nodefence("explain", "nosuchnode", env={"NODEFENCE_AUTH_DISABLED": "true"})

    assert result.returncode == 1
    assert result.stderr.strip() == "nodefence: node nosuchnode does not exist in the cluster"
    assert result.stdout == ""


def test_an_alert_the_policy_does_not_handle_is_refused(cluster: Cluster) -> None:
    result = cluster.nodefence(
        "explain", "compute01", "--alert", "SomethingElse", env={"NODEFENCE_AUTH_DISABLED": "true"}
    )

    assert result.returncode == 1
    assert "does not handle alert SomethingElse" in result.stderr
    assert "Traceback" not in result.stderr


def test_labels_given_on_the_command_line_select_the_rule(cluster: Cluster) -> None:
    policy = cluster.policy(
        "rules:\n"
        "  - name: critical-only\n"
        "    match:\n"
        "      alert_labels:\n"
        "        severity: critical\n"
        "    fencing:\n"
        "      driver: none\n"
    )
    cluster.down("compute02", since_seconds=1200)
    env = {"NODEFENCE_AUTH_DISABLED": "true", "NODEFENCE_POLICY_FILE": str(policy)}

    plain = json.loads(cluster.nodefence("explain", "compute02", "-o", "json", env=env).stdout)
    critical = cluster.nodefence(
        "explain", "compute02", "-o", "json", "--label", "severity=critical", env=env
    )

    assert plain["heldBackBy"] == ["rule"]
    assert critical.returncode == 0, critical.stderr
    report = json.loads(critical.stdout)
    assert report["alert"]["labels"]["severity"] == "critical"
    assert report["decision"]["rule"] == "critical-only"
    assert report["outcome"] == "would fence it"


@pytest.mark.skipif(
    shutil.which("prometheus-alertmanager") is None,
    reason="prometheus-alertmanager not on PATH (Debian package prometheus-alertmanager)",
)
def test_an_alert_firing_in_alertmanager_is_explained_with_its_own_labels(
    cluster: Cluster,
) -> None:
    """With NODEFENCE_ALERTMANAGER_URL set, explain takes the alert Alertmanager holds firing:
    its labels (a rule may match on them) and its fingerprint."""
    config = cluster.workdir / "alertmanager.yml"
    config.write_text(
        yaml.safe_dump({"route": {"receiver": "null"}, "receivers": [{"name": "null"}]})
    )
    port = free_port()
    am_url = f"http://127.0.0.1:{port}"
    am = cluster.procs.start(
        "alertmanager",
        [
            "prometheus-alertmanager",
            f"--config.file={config}",
            f"--storage.path={cluster.workdir / 'am-data'}",
            "--cluster.listen-address=",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
    )
    cluster.procs.wait_ready(am, f"{am_url}/-/ready")
    now = datetime.now(UTC)
    labels = {
        "alertname": "KubeNodeNotReady",
        "node": "compute02",
        "severity": "critical",
        "team": "storage",
    }
    posted, body = http(
        "POST",
        f"{am_url}/api/v2/alerts",
        [
            {
                "labels": labels,
                "startsAt": (now - timedelta(minutes=5)).isoformat(),
                "endsAt": (now + timedelta(hours=1)).isoformat(),
            }
        ],
    )
    assert posted == 200, body
    held = eventually(
        lambda: get_json(f"{am_url}/api/v2/alerts"), within=30, what="alert held by Alertmanager"
    )
    policy = cluster.policy(
        "rules:\n"
        "  - name: storage-critical\n"
        "    match:\n"
        "      alert_labels:\n"
        "        team: storage\n"
        "    fencing:\n"
        "      driver: none\n"
    )
    cluster.down("compute02", since_seconds=1200)

    result = cluster.nodefence(
        "explain",
        "compute02",
        "-o",
        "json",
        env={
            "NODEFENCE_AUTH_DISABLED": "true",
            "NODEFENCE_POLICY_FILE": str(policy),
            "NODEFENCE_ALERTMANAGER_URL": am_url,
        },
    )

    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["alert"]["source"] == f"firing in Alertmanager ({am_url})"
    assert report["alert"]["labels"] == labels
    assert report["alert"]["fingerprint"] == held[0]["fingerprint"]
    assert report["decision"]["rule"] == "storage-critical"
    assert report["outcome"] == "would fence it"


def test_a_node_nodefence_fenced_is_said_to_be_fenced_not_refused(cluster: Cluster) -> None:
    policy = cluster.policy(INFERENCE_POLICY)
    cluster.down("compute02", since_seconds=1200)
    cluster.fence("compute02", policy)
    cursor = cluster.cursor()

    result = cluster.nodefence(
        "explain",
        "compute02",
        "-o",
        "json",
        env={"NODEFENCE_AUTH_DISABLED": "true", "NODEFENCE_POLICY_FILE": str(policy)},
    )

    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["fencedByNodefence"] is True
    assert report["outcome"].startswith("has fenced it already")
    assert report["heldBackBy"] == []
    _only_reads(cluster, cursor)


def test_a_wait_headlines_its_guard_and_the_earliest_fence(cluster: Cluster) -> None:
    """A node NotReady for a minute: the headline says why not now, and when at the earliest
    (the NotReady minimum counted from its last sign of life, on the API server's clock)."""
    cluster.down("compute02", since_seconds=60)
    policy = cluster.policy(INFERENCE_POLICY)
    env = {"NODEFENCE_AUTH_DISABLED": "true", "NODEFENCE_POLICY_FILE": str(policy)}
    text = cluster.nodefence("explain", "compute02", env=env)
    assert text.returncode == 0, text.stderr
    assert "nodefence would not fence it now: it has not been NotReady long enough yet" in (
        text.stdout
    )
    assert "Earliest it can happen: " in text.stdout
    report = json.loads(cluster.nodefence("explain", "compute02", "-o", "json", env=env).stdout)
    assert report["heldBackBy"][0] == "not-ready-duration"
    earliest = datetime.fromisoformat(report["earliest"].replace("Z", "+00:00"))
    (reason,) = [r for r in report["decision"]["reasons"] if r["guard"] == "not-ready-duration"]
    assert not reason["passed"]
    # At least the 5-minute default minus the minute already waited, after the decision.
    now = datetime.fromisoformat(report["decision"]["decided_at"].replace("Z", "+00:00"))
    assert timedelta(minutes=3) < earliest - now <= timedelta(minutes=5)
