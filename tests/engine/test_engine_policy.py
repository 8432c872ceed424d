"""Policy loading: defaults, a full file, and errors that name the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from engine_factories import NOW, event, facts

from nodefence.engine.decide import decide
from nodefence.engine.model import Verdict
from nodefence.policy import Policy, PolicyError, load_policy, parse_policy

DATA = Path(__file__).parent / "data"
DOCS_EXAMPLE = Path(__file__).parents[2] / "docs" / "policy.example.yaml"


def test_defaults_without_file() -> None:
    policy = load_policy(None)
    assert policy == Policy()
    assert (policy.dry_run, policy.paused) == (False, False)
    assert {"KubeNodeNotReady", "KubeNodeUnreachable"} <= set(policy.alerts.names)
    assert policy.alerts.node_labels == ["node"]
    (rule,) = policy.rules
    assert (rule.min_not_ready_seconds, rule.lease_staleness_seconds) == (300, 50)
    assert rule.power_off_ends_wait
    assert policy.cluster.fallback_after_seconds == 300
    assert (rule.healthy_delay_seconds, rule.require_new_boot_id) == (300, False)
    assert (rule.taint_effect, rule.approval, rule.flap_window_seconds) == (
        "NoExecute",
        "none",
        1800,
    )
    assert rule.purge.owner_kinds == ["StatefulSet", "ReplicaSet", "DaemonSet", "Job", "None"]
    assert (rule.purge.terminating, rule.purge.non_terminating) == (True, False)
    assert rule.purge.strip_finalizers == []
    assert rule.volume_attachment_cleanup is False
    assert policy.cluster.max_fenced_nodes == 1
    assert policy.cluster.min_ready_fraction == 0.51
    assert policy.cluster.control_plane_quorum is True
    assert policy.cluster.claim_timeout_seconds == 300


def test_empty_file_and_empty_rules_mean_defaults(tmp_path: Path) -> None:
    empty = tmp_path / "p.yaml"
    empty.write_text("")
    assert load_policy(empty) == Policy()
    empty.write_text("rules: []\n")
    assert load_policy(empty) == Policy()


def test_full_example_file() -> None:
    policy = load_policy(DATA / "policy-full.yaml")
    assert policy.dry_run is True
    assert policy.alerts.node_labels == ["node", "kubernetes_node", "instance"]
    cp, workers = policy.rules
    assert cp.match.node_selector == "node-role.kubernetes.io/control-plane"
    assert cp.match.alert_labels == {"severity": "critical"}
    assert (cp.approval, cp.require_new_boot_id, cp.approval_timeout_seconds) == (
        "slack",
        True,
        900,
    )
    assert cp.purge.strip_finalizers == ["kubernetes.io/pvc-protection"]
    assert cp.purge.only_with_pvc is True
    assert (workers.taint_effect, workers.fence_without_lease) == ("NoSchedule", True)
    assert policy.cluster.max_fenced_nodes == 2
    assert policy.rule_named("workers") is workers


def test_documented_example_is_valid_and_matches_defaults() -> None:
    assert load_policy(DOCS_EXAMPLE) == Policy()


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        (
            "rules:\n  - lease_staleness_seconds: 0\n",
            "rules[0].lease_staleness_seconds",
            "greater than 0",
        ),
        ("rules:\n  - taint_effect: PreferNoSchedule\n", "rules[0].taint_effect", "NoExecute"),
        (
            "rules:\n  - match: {node_selector: 'a in (b'}\n",
            "rules[0].match.node_selector",
            "unbalanced",
        ),
        (
            "cluster:\n  min_ready_fraction: 2\n",
            "cluster.min_ready_fraction",
            "less than or equal to 1",
        ),
        ("dry_rum: true\n", "dry_rum", "Extra inputs are not permitted"),
        ("rules:\n  - approval: email\n", "rules[0].approval", "'none' or 'slack'"),
        ("rules:\n  - name: a\n  - name: a\n", "rules", "unique"),
        ("alerts:\n  names: []\n", "alerts.names", "at least 1"),
        # A claim timeout shorter than a fence takes would roll back fences still at work.
        (
            "cluster:\n  claim_timeout_seconds: 5\n",
            "cluster.claim_timeout_seconds",
            "greater than or equal to 30",
        ),
    ],
)
def test_invalid_files_name_file_and_field(
    tmp_path: Path, text: str, field: str, message: str
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError) as caught:
        load_policy(path)
    assert str(path) in str(caught.value)
    assert f"{field}: " in str(caught.value)
    assert message in str(caught.value)


def test_unreadable_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read policy"):
        load_policy(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules: [\n")
    with pytest.raises(PolicyError, match="not valid YAML"):
        load_policy(bad)
    bad.write_text("- a\n- b\n")
    with pytest.raises(PolicyError, match="must be a mapping"):
        load_policy(bad)


def test_former_power_off_proof_keeps_working_or_names_its_replacement() -> None:
    """The former key keeps its meaning where it had one (external proof), and where it meant
    "no proof" (mode none) the check fails naming the explicit replacement."""
    converted = parse_policy(
        {"rules": [{"name": "r", "power_off_proof": {"mode": "http", "url": "http://x/{node}"}}]}
    )
    fencing = converted.rules[0].fencing
    assert fencing is not None
    assert (fencing.driver, fencing.url) == ("http", "http://x/{node}")
    with pytest.raises(PolicyError, match=r"fencing\.driver: none"):
        parse_policy({"rules": [{"name": "r", "power_off_proof": {"mode": "none"}}]})


def test_yaml_off_is_the_action_off() -> None:
    """YAML 1.1 reads a bare ``off`` as false; ``action: off`` must still mean power off."""
    policy = parse_policy(
        yaml.safe_load("rules:\n  - name: r\n    fencing: {driver: redfish, action: off}\n")
    )
    fencing = policy.rules[0].fencing
    assert fencing is not None
    assert fencing.action == "off"


@pytest.mark.invariant("S10")
def test_a_rule_without_fencing_never_fences_on_inference() -> None:
    """The safe default (S10): no fencing section means no proof, so no taint without a
    person's approval; the decision says what to configure."""
    decision = decide(event(), facts(), parse_policy({}), NOW)
    assert decision.verdict is Verdict.NOOP
    blocked = [r for r in decision.reasons if not r.passed]
    assert [r.guard for r in blocked] == ["power-off"]
    assert "fencing.driver" in blocked[0].message
