"""The Prometheus rules: promtool checks and unit tests, the two files in step, the contract."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
RULES_DIR = REPO / "alertrules"
RULES = RULES_DIR / "nodefence.rules.yaml"
PROMETHEUS_RULE = RULES_DIR / "prometheusrule.yaml"
UNIT_TESTS = sorted((RULES_DIR / "tests").glob("*.yaml"))
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (Debian package prometheus; CI installs it)"
)
TRIGGER = "NodefenceNodeNotReady"
SELF_ALERTS = {
    "NodefenceWebhookErrors",
    "NodefenceNodeFencedTooLong",
    "NodefenceApprovalPending",
    "NodefenceDown",
    "NodefenceWebhookRejected",
    "NodefencePausedTooLong",
    "NodefenceReconcileStalled",
    "NodefenceVolumesUnreleased",
    "NodefenceProofContradicted",
    "NodefenceFencingUnavailable",
    "NodefencePowerActionFailed",
    "NodefenceFenceRecordMissing",
    "NodefenceAlertmanagerUnreachable",
    "NodefenceTLSCertificateRefused",
}


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    return data


def rules_by_name() -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in load(RULES)["groups"] for r in g["rules"]}


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, check=False)


@needs_promtool
def test_rules_file_passes_promtool_check() -> None:
    out = promtool("check", "rules", str(RULES))
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(rules_by_name())} rules found" in out.stdout


@needs_promtool
def test_prometheus_rule_spec_passes_promtool_check(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(load(PROMETHEUS_RULE)["spec"]))
    out = promtool("check", "rules", str(spec))
    assert out.returncode == 0, out.stdout + out.stderr


@needs_promtool
def test_promtool_unit_tests_pass() -> None:
    assert UNIT_TESTS
    out = promtool("test", "rules", *map(str, UNIT_TESTS))
    assert out.returncode == 0, out.stdout + out.stderr


@needs_promtool
def test_unit_tests_fail_when_a_threshold_changes(tmp_path: Path) -> None:
    """The unit tests pin the thresholds: a rule file with a looser one makes them fail."""
    changed = RULES.read_text().replace("> 3600 * 6", "> 3600 * 8")
    assert changed != RULES.read_text()
    (tmp_path / "tests").mkdir()
    (tmp_path / RULES.name).write_text(changed)
    copy = tmp_path / "tests" / "nodefence_alerts_test.yaml"
    copy.write_text((RULES_DIR / "tests" / "nodefence_alerts_test.yaml").read_text())
    out = promtool("test", "rules", str(copy))
    assert out.returncode != 0
    assert "NodefenceNodeFencedTooLong" in out.stdout + out.stderr


@needs_promtool
@pytest.mark.parametrize(
    ("alert", "pinned", "looser"),
    [
        ("NodefencePausedTooLong", "> 3600 * 4", "> 3600 * 5"),
        ("NodefenceReconcileStalled", "> 0) > 600", "> 0) > 1800"),
        (
            "NodefenceAlertmanagerUnreachable",
            "max(nodefence_alertmanager_up) == 0\n        for: 10m",
            "max(nodefence_alertmanager_up) == 0\n        for: 30m",
        ),
        ("NodefenceWebhookRejected", "[10m])) > 0", "[10m])) > 5"),
        ("NodefenceTLSCertificateRefused", "[1h])) > 0", "[1h])) > 1"),
        (
            "NodefenceVolumesUnreleased",
            "(nodefence_volumes_unreleased) > 0\n        for: 10m",
            "(nodefence_volumes_unreleased) > 0\n        for: 30m",
        ),
    ],
)
def test_operations_tests_pin_their_thresholds(
    tmp_path: Path, alert: str, pinned: str, looser: str
) -> None:
    """Each alert on how nodefence is run fails its unit tests when its threshold moves."""
    text = RULES.read_text()
    assert text.count(pinned) == 1, pinned
    (tmp_path / "tests").mkdir()
    (tmp_path / RULES.name).write_text(text.replace(pinned, looser))
    copy = tmp_path / "tests" / "nodefence_operations_test.yaml"
    copy.write_text((RULES_DIR / "tests" / "nodefence_operations_test.yaml").read_text())
    out = promtool("test", "rules", str(copy))
    assert out.returncode != 0
    assert alert in out.stdout + out.stderr


def test_prometheus_rule_carries_the_same_groups() -> None:
    resource = load(PROMETHEUS_RULE)
    assert resource["apiVersion"] == "monitoring.coreos.com/v1"
    assert resource["kind"] == "PrometheusRule"
    assert resource["metadata"]["name"] == "nodefence"
    assert resource["metadata"]["labels"]["prometheus"] == "k8s"
    assert resource["metadata"]["labels"]["role"] == "alert-rules"
    assert resource["spec"] == load(RULES), (
        "prometheusrule.yaml spec must equal nodefence.rules.yaml; copy the groups over"
    )


def test_node_alerts_are_the_kube_prometheus_ones() -> None:
    rules = rules_by_name()
    not_ready = rules["KubeNodeNotReady"]
    assert not_ready["expr"].strip() == (
        'kube_node_status_condition{job="kube-state-metrics",condition="Ready",status="true"} == 0'
    )
    assert not_ready["for"] == "15m"
    assert not_ready["labels"] == {"severity": "warning"}
    unreachable = rules["KubeNodeUnreachable"]
    assert unreachable["expr"].strip() == (
        '(kube_node_spec_taint{job="kube-state-metrics",key="node.kubernetes.io/unreachable",'
        'effect="NoSchedule"} unless ignoring(key,value) kube_node_spec_taint'
        '{job="kube-state-metrics",key=~"ToBeDeletedByClusterAutoscaler|'
        'cloud.google.com/impending-node-termination|aws-node-termination-handler/spot-itn"})'
        " == 1"
    )
    assert unreachable["for"] == "15m"
    for rule in (not_ready, unreachable):
        assert "{{ $labels.node }}" in rule["annotations"]["description"]


def test_trigger_is_kube_node_not_ready_with_a_short_for_in_its_own_group() -> None:
    """Its own name and group: kube-prometheus users drop nodefence-node-alerts (their own
    KubeNodeNotReady would merge with ours and flap) and must keep the trigger."""
    groups = {g["name"]: g["rules"] for g in load(RULES)["groups"]}
    (trigger,) = groups["nodefence-trigger"]
    assert trigger["alert"] == TRIGGER
    assert TRIGGER not in {r["alert"] for r in groups["nodefence-node-alerts"]}
    assert trigger["expr"] == rules_by_name()["KubeNodeNotReady"]["expr"]
    assert trigger["for"] == "1m"
    # Not "info": kube-prometheus' InfoInhibitor would mute it, and a muted alert reaches
    # neither the webhook nor the reconcile pass.
    assert trigger["labels"] == {"severity": "none"}
    assert "{{ $labels.node }}" in trigger["annotations"]["description"]


@needs_promtool
@pytest.mark.parametrize("longer", ["2m", "15m"])
def test_unit_tests_pin_the_trigger_for(tmp_path: Path, longer: str) -> None:
    text = RULES.read_text()
    start = text.index(f"- alert: {TRIGGER}")
    end = text.index("for: 1m", start)
    changed = text[:end] + f"for: {longer}" + text[end + len("for: 1m") :]
    (tmp_path / "tests").mkdir()
    (tmp_path / RULES.name).write_text(changed)
    copy = tmp_path / "tests" / "nodefence_trigger_test.yaml"
    copy.write_text((RULES_DIR / "tests" / "nodefence_trigger_test.yaml").read_text())
    out = promtool("test", "rules", str(copy))
    assert out.returncode != 0
    assert TRIGGER in out.stdout + out.stderr


def test_every_alert_has_a_firing_and_a_quiet_unit_test() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for path in UNIT_TESTS:
        for test in load(path)["tests"]:
            for case in test.get("alert_rule_test", []):
                (firing if case.get("exp_alerts") else quiet).add(case["alertname"])
    names = set(rules_by_name())
    assert names == SELF_ALERTS | {"KubeNodeNotReady", "KubeNodeUnreachable", TRIGGER}
    assert names - firing == set()
    assert names - quiet == set()


def test_metric_contract_documents_every_metric_the_rules_use() -> None:
    used = set()
    for name in SELF_ALERTS:
        used |= set(re.findall(r"nodefence_[a-z_]+", rules_by_name()[name]["expr"]))
    documented = set(re.findall(r"`(nodefence_[a-z_]+)`", (RULES_DIR / "README.md").read_text()))
    assert used == {
        "nodefence_http_requests_total",
        "nodefence_fenced_timestamp_seconds",
        "nodefence_approval_pending_seconds",
        "nodefence_webhook_rejected_total",
        "nodefence_paused_timestamp_seconds",
        "nodefence_reconcile_last_success_timestamp_seconds",
        "nodefence_reconcile_interval_seconds",
        "nodefence_volumes_unreleased",
        "nodefence_proof_contradicted_timestamp_seconds",
        "nodefence_fencing_ready",
        "nodefence_power_actions_total",
        "nodefence_fences_without_record",
        "nodefence_alertmanager_up",
        "nodefence_tls_reload_failures_total",
    }
    assert used == documented
