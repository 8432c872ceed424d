"""Label selectors, node-name extraction, wording and the rendered decision record."""

from __future__ import annotations

import json

import pytest
from engine_factories import (
    NOW,
    RECORD_VERSION,
    UID,
    entry,
    event,
    facts,
    fenced_node,
    pod,
    policy,
    recovered,
)

from nodefence.engine import mirror
from nodefence.engine.alerts import host_of_instance, node_from_labels
from nodefence.engine.decide import decide
from nodefence.engine.labels import SelectorError, parse_selector
from nodefence.engine.model import AlertStatus
from nodefence.engine.record import CONFIGMAP
from nodefence.engine.render import decision_to_dict, describe
from nodefence.engine.wording import duration

LABELS = {"tier": "compute", "zone": "a", "node-role.kubernetes.io/control-plane": ""}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("", True),
        ("tier=compute", True),
        ("tier==compute", True),
        ("tier!=compute", False),
        ("missing!=x", True),
        ("tier in (storage, compute)", True),
        ("tier notin (compute)", False),
        ("missing notin (x)", True),
        ("node-role.kubernetes.io/control-plane", True),
        ("!node-role.kubernetes.io/control-plane", False),
        ("!missing", True),
        ("tier=compute,zone in (a,b),!missing", True),
        ("tier=compute,zone=b", False),
    ],
)
def test_selector_matching(selector: str, expected: bool) -> None:
    assert parse_selector(selector).matches(LABELS) is expected


@pytest.mark.parametrize(
    "selector", ["tier in (a", "a=b)", "tier=compute,", "=x", "a in ()", "a b", "Example.COM/x"]
)
def test_invalid_selectors(selector: str) -> None:
    with pytest.raises(SelectorError):
        parse_selector(selector)


def test_node_from_labels() -> None:
    order = ["node", "kubernetes_node", "instance"]
    assert node_from_labels({"kubernetes_node": "n1", "instance": "x:9100"}, order) == "n1"
    assert node_from_labels({"instance": "n2:9100"}, order) == "n2"
    assert node_from_labels({"node": " "}, order) is None
    assert host_of_instance("[fe80::1]:9100") == "fe80::1"
    assert host_of_instance("fe80::1") == "fe80::1"
    # A blackbox probe's URL names its host, as the webhook's events read it.
    assert node_from_labels({"instance": "https://n3.example:443/x"}, order) == "n3.example"
    assert node_from_labels({"instance": ":9100", "node": "n4"}, ["instance", "node"]) == "n4"


def test_durations_read_like_kubectl() -> None:
    assert [duration(s) for s in (0, 45, 300, 1200, 3723)] == [
        "0s",
        "45s",
        "5m0s",
        "20m0s",
        "1h2m3s",
    ]


def test_decision_to_dict_is_json_ready() -> None:
    d = decide(event(), facts(pods=(pod("db-0", finalizers=("f/a",)),)), policy(dry_run=True), NOW)
    data = decision_to_dict(d)
    assert json.loads(json.dumps(data)) == data
    assert (data["verdict"], data["node"], data["dry_run"], data["rule"]) == (
        "fence",
        "worker-1",
        True,
        "default",
    )
    assert data["decided_at"] == "2026-11-30T08:20:00Z"
    assert {"guard": "lease", "passed": True}.items() <= next(
        r for r in data["reasons"] if r["guard"] == "lease"
    ).items()
    claim, fence, confirm, purge = data["actions"]
    assert (claim["type"], claim["node"], claim["record"], claim["record_version"]) == (
        "claim",
        "worker-1",
        CONFIGMAP,
        RECORD_VERSION,
    )
    assert (claim["entry"]["uid"], claim["entry"]["phase"]) == (UID, "claimed")
    assert (fence["type"], fence["effect"], fence["resource_version"]) == (
        "fence",
        "NoExecute",
        "41",
    )
    assert {"type": "confirm", "node": "worker-1", "node_uid": UID}.items() <= confirm.items()
    assert (purge["type"], purge["name"], purge["strip_finalizers"]) == ("purge-pod", "db-0", [])


def test_unfence_and_release_render_with_the_recorded_effect() -> None:
    d = decide(event(AlertStatus.RESOLVED), recovered(), policy(), NOW)
    unfence, release = decision_to_dict(d)["actions"]
    assert (unfence["type"], unfence["effect"], unfence["node_uid"]) == (
        "unfence",
        "NoExecute",
        UID,
    )
    assert mirror.FENCED_BY in unfence["remove_annotations"]
    assert (release["type"], release["node_uid"]) == ("release", UID)
    assert "healthy again" in release["why"]


def test_observe_ready_renders_when_it_was_seen() -> None:
    first_sight = facts(fenced_node(ready="True", since=900), lease_age=5, held=entry())
    d = decide(event(AlertStatus.RESOLVED), first_sight, policy(), NOW)
    (observe,) = decision_to_dict(d)["actions"]
    assert observe == {
        "type": "observe-ready",
        "node": "worker-1",
        "node_uid": UID,
        "seen_at": "2026-11-30T08:20:00Z",
    }
    text = describe(d)
    assert "  -> record that node worker-1 was seen Ready at 2026-11-30T08:20:00Z" in text


def test_describe_names_verdict_guards_and_actions() -> None:
    text = describe(decide(event(), facts(lease_age=10), policy(), NOW))
    first, *rest = text.splitlines()
    assert first.startswith(
        "noop worker-1 [KubeNodeNotReady]: Ready has been Unknown for 10s on the API server's clock"
    )
    assert any(line.startswith("  NO  not-ready-duration:") for line in rest)
    assert any(line.startswith("  NO  lease:") for line in rest)
    assert any(line.startswith("  ok  ready:") for line in rest)
    assert any(line.startswith("  ok  clock:") for line in rest)
    fenced = describe(decide(event(), facts(pods=(pod("db-0"),)), policy(), NOW))
    assert f"  -> claim a fence budget slot for node worker-1 in {CONFIGMAP}" in fenced
    assert "  -> taint node worker-1 out-of-service (NoExecute)" in fenced
    assert f"  -> record node worker-1 as fenced in {CONFIGMAP}" in fenced
    assert "  -> force-delete pod default/db-0" in fenced
    let_go = describe(decide(event(), facts(held=entry()), policy(), NOW))
    assert f"  -> release node worker-1 from {CONFIGMAP} (its out-of-service taint" in let_go
    unfenced = describe(decide(event(AlertStatus.RESOLVED), recovered(), policy(), NOW))
    assert "  -> remove the out-of-service taint from node worker-1 (NoExecute)" in unfenced
