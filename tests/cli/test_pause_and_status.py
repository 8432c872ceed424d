"""``nodefence pause`` / ``resume`` write the pause switch with who, when (the API server's clock)
and why, with optimistic concurrency, idempotently; ``status`` shows the switch and the nodes
that are NotReady and not fenced, each with the guard that holds it back, and writes nothing.
Checked with the real kubectl against the simulated cluster."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest
from bench.processes import http

from .operator_support import INFERENCE_POLICY, KUBECTL, NAMESPACE, Cluster

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed"),
]

CONTROL = "nodefence-control"
READS = {"get", "list", "watch"}
# Asking the API server who the operator is (a SelfSubjectReview) is a POST that persists
# nothing: not a write.
WHO_AM_I = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
ENV = {"NODEFENCE_AUTH_DISABLED": "true"}


def _ok(cluster: Cluster, *args: str, env: dict[str, str] | None = None) -> str:
    result = cluster.nodefence(*args, env={**ENV, **(env or {})})
    assert result.returncode == 0, result.stderr
    return result.stdout


def _status(cluster: Cluster, env: dict[str, str] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = json.loads(_ok(cluster, "status", "-o", "json", env=env))
    return status


def _notes(cluster: Cluster) -> dict[str, str]:
    configmap = cluster.configmap(CONTROL)
    assert configmap is not None
    notes: dict[str, str] = configmap["metadata"].get("annotations") or {}
    return notes


def _writes(cluster: Cluster, since: int) -> list[tuple[str, str, int]]:
    return [
        (r["verb"], r["path"], r["status"])
        for r in cluster.requests(since)
        if r["verb"] not in READS and r["path"] != WHO_AM_I
    ]


def _control_events(cluster: Cluster) -> list[str]:
    items = cluster.kubectl_json("get", "events", "-n", NAMESPACE)["items"]
    return [
        f"{e['reason']}: {e['message']}"
        for e in sorted(items, key=lambda e: e["metadata"]["resourceVersion"])
        if e["involvedObject"].get("name") == CONTROL
    ]


def test_pause_records_who_when_and_why_and_status_shows_it(cluster: Cluster) -> None:
    assert cluster.configmap(CONTROL) is None

    out = _ok(cluster, "pause", "--reason", "storage maintenance", "--by", "alice")

    assert "paused by alice" in out
    notes = _notes(cluster)
    assert notes["nodefence.io/paused"] == "true"
    assert notes["nodefence.io/paused-reason"] == "storage maintenance"
    assert notes["nodefence.io/paused-by"] == "alice"
    status = _status(cluster)
    configmap = cluster.configmap(CONTROL)
    assert configmap is not None
    # Created by the pause: dated by the API server's stamp on that write.
    assert status["pause"] == {
        "paused": True,
        "reason": "storage maintenance",
        "by": "alice",
        "at": configmap["metadata"]["creationTimestamp"],
        "switch": "ConfigMap nodefence/nodefence-control, annotation nodefence.io/paused",
    }
    text = _ok(cluster, "status")
    assert text.splitlines()[0] == (
        f"Pause switch: PAUSED by alice at {configmap['metadata']['creationTimestamp']}: "
        "storage maintenance"
    )


def test_a_second_pause_needs_force_and_the_same_pause_writes_nothing(
    cluster: Cluster,
) -> None:
    _ok(cluster, "pause", "--reason", "storage maintenance", "--by", "alice")
    cursor = cluster.cursor()

    again = _ok(cluster, "pause", "--reason", "storage maintenance", "--by", "alice")

    assert again.startswith("already paused by alice")
    assert _writes(cluster, cursor) == []

    # Another pause over alice's would lose her who, when and why: refused, nothing written.
    refused = cluster.nodefence(
        "pause", "--reason", "storage maintenance, day 2", "--by", "bob", env=ENV
    )
    assert refused.returncode == 1
    assert refused.stderr.startswith("nodefence: nodefence is already paused by alice at ")
    assert "--force" in refused.stderr
    assert _writes(cluster, cursor) == []

    updated = json.loads(
        _ok(
            cluster,
            "pause",
            "--reason",
            "storage maintenance, day 2",
            "--by",
            "bob",
            "--force",
            "-o",
            "json",
        )
    )

    assert updated["changed"] is True
    notes = _notes(cluster)
    assert notes["nodefence.io/paused-reason"] == "storage maintenance, day 2"
    assert notes["nodefence.io/paused-by"] == "bob"
    # Dated by the Date of the API server's reply read just before the write.
    assert notes["nodefence.io/paused-at"] == updated["at"]
    assert _status(cluster)["pause"]["by"] == "bob"
    assert _control_events(cluster) == [
        "NodefencePaused: alice paused nodefence: storage maintenance",
        "NodefencePaused: bob updated the pause: storage maintenance, day 2",
    ]


def test_resume_clears_the_switch_and_is_idempotent(cluster: Cluster) -> None:
    _ok(cluster, "pause", "--reason", "storage maintenance", "--by", "alice")

    out = _ok(cluster, "resume", "--by", "carol")

    assert out.startswith("resumed by carol; it was paused by alice at ")
    assert out.strip().endswith(": storage maintenance")
    assert not [k for k in _notes(cluster) if k.startswith("nodefence.io/paused")]
    assert _status(cluster)["pause"]["paused"] is False
    assert _ok(cluster, "status").splitlines()[0] == "Pause switch: not paused"
    cursor = cluster.cursor()

    assert _ok(cluster, "resume").strip() == "nodefence is not paused (nothing written)"
    assert _writes(cluster, cursor) == []
    assert _control_events(cluster)[-1] == (
        "NodefenceResumed: carol resumed nodefence (it was paused by alice: storage maintenance)"
    )


def test_a_pause_holds_every_node_back_until_resumed(cluster: Cluster) -> None:
    policy = cluster.policy(INFERENCE_POLICY)
    env = {"NODEFENCE_POLICY_FILE": str(policy)}
    cluster.down("compute02", since_seconds=1200)
    _ok(cluster, "pause", "--reason", "network work in rack 4", "--by", "alice")

    paused = json.loads(_ok(cluster, "explain", "compute02", "-o", "json", env=env))
    held = _status(cluster, env)["notReadyNotFenced"]

    assert paused["heldBackBy"] == ["paused"]
    assert "network work in rack 4" in paused["decision"]["summary"]
    assert [(h["node"], h["heldBackBy"]) for h in held] == [("compute02", "paused")]

    _ok(cluster, "resume")
    resumed = json.loads(_ok(cluster, "explain", "compute02", "-o", "json", env=env))

    assert resumed["outcome"] == "would fence it"


def test_a_pause_set_by_hand_is_shown_dated_by_the_api_server(cluster: Cluster) -> None:
    created = cluster.kubectl("create", "configmap", "-n", NAMESPACE, CONTROL)
    assert created.returncode == 0, created.stderr
    annotated = cluster.kubectl(
        "annotate", "configmap", "-n", NAMESPACE, CONTROL,
        "nodefence.io/paused=true", "nodefence.io/paused-reason=by hand",
    )  # fmt: skip
    assert annotated.returncode == 0, annotated.stderr
    configmap = cluster.kubectl_json(
        "get", "configmap", "-n", NAMESPACE, CONTROL, "--show-managed-fields"
    )
    annotator = [
        e for e in configmap["metadata"]["managedFields"] if e["manager"] != "kubectl-create"
    ]
    stamped = max(e["time"] for e in annotator)

    pause = _status(cluster)["pause"]

    assert pause["paused"] is True
    assert pause["reason"] == "by hand"
    assert pause["by"] is None
    assert pause["at"] == stamped


def test_concurrent_writes_to_the_switch_are_read_again_and_retried(cluster: Cluster) -> None:
    _ok(cluster, "pause", "--reason", "first", "--by", "alice")
    rule = {
        "action": "conflict",
        "verbs": ["update"],
        "path": f"/api/v1/namespaces/{NAMESPACE}/configmaps/{CONTROL}",
        "count": 1,
    }
    status, body = http("POST", f"{cluster.url}/sim/v1/faults", {"rules": [rule]})
    assert status == 201, body
    cursor = cluster.cursor()

    _ok(cluster, "pause", "--reason", "second", "--by", "bob", "--force")

    updates = [s for verb, path, s in _writes(cluster, cursor) if path.endswith(CONTROL)]
    assert updates == [409, 200]
    assert _notes(cluster)["nodefence.io/paused-reason"] == "second"


def test_status_lists_not_ready_nodes_nodefence_holds_back_and_writes_nothing(
    cluster: Cluster,
) -> None:
    policy = cluster.policy(INFERENCE_POLICY)
    env = {"NODEFENCE_POLICY_FILE": str(policy)}
    cluster.down("compute02", since_seconds=1200)
    cluster.fence("compute02", policy)
    cluster.down("control02", since_seconds=1200)
    cursor = cluster.cursor()

    status = _status(cluster, env)
    text = _ok(cluster, "status", env=env)

    assert [f["node"] for f in status["fenced"]] == ["compute02"]
    held = {h["node"]: h for h in status["notReadyNotFenced"]}
    assert list(held) == ["control02"], "a fenced node is not listed as held back"
    assert held["control02"]["heldBackBy"] == "fence-budget"
    assert held["control02"]["notReadySince"] is not None
    # With no alert, the fallback judges it once NotReady for cluster.fallback_after_seconds.
    since = datetime.fromisoformat(held["control02"]["notReadySince"].replace("Z", "+00:00"))
    fallback_at = datetime.fromisoformat(held["control02"]["fallbackAt"].replace("Z", "+00:00"))
    assert fallback_at - since == timedelta(seconds=300)
    assert (
        f"if no alert arrives, the fallback judges it from {held['control02']['fallbackAt']}"
        in (text)
    )
    assert "NotReady, not fenced: 1" in text
    assert "control02  NotReady since" in text
    assert "held back: the fence budget is spent" in text
    assert "fence-budget" not in text.split("NotReady, not fenced")[1].split("\n")[1]
    assert _writes(cluster, cursor) == []
