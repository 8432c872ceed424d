"""``nodefence release NODE --reason TEXT``: a fence nodefence applied (by ``nodefence serve`` on
a posted alert) is let go of completely, checked with the real kubectl: its exact taint, its
``nodefence.io/`` annotations, its fence record entry, an Event with who and why. A taint
nodefence did not apply is refused (S4) and left on; a node still NotReady needs ``--yes``."""

from __future__ import annotations

import json

import pytest
from bench.processes import http

from .operator_support import INFERENCE_POLICY, KUBECTL, NAMESPACE, OOS, Cluster

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed"),
]

NODE = "compute02"
RECORD = "nodefence-fences"
READS = {"get", "list", "watch"}
# Asking the API server who the operator is (a SelfSubjectReview) is a POST that persists
# nothing: not a write.
WHO_AM_I = "/apis/authentication.k8s.io/v1/selfsubjectreviews"


@pytest.fixture
def fenced(cluster: Cluster) -> Cluster:
    """``NODE`` down for 20 minutes and fenced by nodefence on inference alone."""
    cluster.down(NODE, since_seconds=1200)
    cluster.fence(NODE, cluster.policy(INFERENCE_POLICY))
    assert [(t["value"], t["effect"]) for t in cluster.oos_taints(NODE)] == [
        ("nodeshutdown", "NoExecute")
    ]
    assert "nodefence.io/fenced-by" in cluster.annotations(NODE)
    return cluster


def _release(cluster: Cluster, *args: str) -> tuple[int, str, str]:
    policy = cluster.workdir / "policy.yaml"
    result = cluster.nodefence(
        "release",
        *args,
        env={"NODEFENCE_AUTH_DISABLED": "true", "NODEFENCE_POLICY_FILE": str(policy)},
    )
    return result.returncode, result.stdout, result.stderr


def _entries(cluster: Cluster) -> dict[str, str]:
    record = cluster.configmap(RECORD)
    data: dict[str, str] = (record or {}).get("data") or {}
    return data


def _nodefence_annotations(cluster: Cluster) -> list[str]:
    return [k for k in cluster.annotations(NODE) if k.startswith("nodefence.io/")]


def test_a_fence_of_a_node_back_up_is_released_completely(fenced: Cluster) -> None:
    cluster = fenced
    cluster.up(NODE, since_seconds=30)

    code, out, err = _release(
        cluster, NODE, "--reason", "machine repaired, checked by hand", "--by", "alice"
    )

    assert code == 0, err
    assert f"Released node {NODE}" in out
    assert cluster.oos_taints(NODE) == []
    assert _nodefence_annotations(cluster) == []
    data = _entries(cluster)
    assert f"fence.{NODE}" not in data
    remembered = json.loads(data[f"released.{NODE}"])
    assert remembered["why"] == "released by alice: machine repaired, checked by hand"
    events = [e for e in cluster.node_events(NODE) if e["reason"] == "FenceReleased"]
    assert len(events) == 1
    assert "released by alice: machine repaired, checked by hand" in events[0]["message"]
    assert events[0]["type"] == "Normal"
    status = json.loads(
        cluster.nodefence("status", "-o", "json", env={"NODEFENCE_AUTH_DISABLED": "true"}).stdout
    )
    assert status["fenced"] == []
    assert [r["node"] for r in status["recentlyReleased"]] == [NODE]


def test_a_node_still_not_ready_needs_yes_and_is_told_what_it_means(fenced: Cluster) -> None:
    cluster = fenced
    cursor = cluster.cursor()

    code, out, err = _release(cluster, NODE, "--reason", "wrong node")

    assert code == 1
    assert out == ""
    assert f"node {NODE} is still NotReady" in err
    assert "Multi-Attach" in err
    assert "Terminating" in err
    assert "nodefence.io/exclude=true" in err
    assert "--yes" in err
    assert "Traceback" not in err
    wrote = [
        r for r in cluster.requests(cursor) if r["verb"] not in READS and r["path"] != WHO_AM_I
    ]
    assert not wrote, "it wrote"
    assert [t["effect"] for t in cluster.oos_taints(NODE)] == ["NoExecute"]
    assert f"fence.{NODE}" in _entries(cluster)

    code, out, err = _release(cluster, NODE, "--reason", "wrong node", "--yes", "-o", "json")

    assert code == 0, err
    report = json.loads(out)
    assert report["stillNotReady"] is True
    assert report["taintRemoved"]["effect"] == "NoExecute"
    assert "nodefence.io/fenced-by" in report["annotationsRemoved"]
    assert cluster.oos_taints(NODE) == []
    assert f"fence.{NODE}" not in _entries(cluster)
    event = next(e for e in cluster.node_events(NODE) if e["reason"] == "FenceReleased")
    assert event["type"] == "Warning"


def test_an_administrators_taint_is_refused_and_left_on(cluster: Cluster) -> None:
    cluster.policy(INFERENCE_POLICY)
    taint = cluster.kubectl("taint", "nodes", "compute01", f"{OOS}=nodeshutdown:NoExecute")
    assert taint.returncode == 0, taint.stderr

    code, _out, err = _release(cluster, "compute01", "--reason", "cleanup", "--yes")

    assert code == 1
    assert "was not applied by nodefence" in err
    assert f"kubectl taint nodes compute01 {OOS}-" in err
    assert [t["value"] for t in cluster.oos_taints("compute01")] == ["nodeshutdown"]


def test_a_node_nodefence_holds_no_fence_of_is_refused(cluster: Cluster) -> None:
    cluster.policy(INFERENCE_POLICY)

    code, _out, err = _release(cluster, "compute01", "--reason", "cleanup")

    assert code == 1
    assert "nodefence holds no fence of node compute01" in err


def test_only_nodefences_own_taint_goes_an_administrators_beside_it_stays(
    fenced: Cluster,
) -> None:
    cluster = fenced
    cluster.up(NODE, since_seconds=30)
    added = cluster.kubectl("taint", "nodes", NODE, f"{OOS}=nodeshutdown:NoSchedule")
    assert added.returncode == 0, added.stderr
    excluded = cluster.kubectl("annotate", "node", NODE, "nodefence.io/exclude=true")
    assert excluded.returncode == 0, excluded.stderr

    code, _out, err = _release(cluster, NODE, "--reason", "done")

    assert code == 0, err
    assert [t["effect"] for t in cluster.oos_taints(NODE)] == ["NoSchedule"]
    assert _nodefence_annotations(cluster) == ["nodefence.io/exclude"]


def test_a_taint_someone_took_over_is_refused(fenced: Cluster) -> None:
    cluster = fenced
    off = cluster.kubectl("taint", "nodes", NODE, f"{OOS}:NoExecute-")
    assert off.returncode == 0, off.stderr
    on = cluster.kubectl("taint", "nodes", NODE, f"{OOS}=manual:NoExecute")
    assert on.returncode == 0, on.stderr

    code, _out, err = _release(cluster, NODE, "--reason", "done", "--yes")

    assert code == 1
    assert "someone changed it" in err
    assert [t["value"] for t in cluster.oos_taints(NODE)] == ["manual"]


def test_a_taint_removed_by_hand_leaves_nothing_behind_after_release(fenced: Cluster) -> None:
    cluster = fenced
    off = cluster.kubectl("taint", "nodes", NODE, f"{OOS}-")
    assert off.returncode == 0, off.stderr
    assert "nodefence.io/fenced-by" in cluster.annotations(NODE)

    code, out, err = _release(cluster, NODE, "--reason", "taken off by hand earlier")

    assert code == 0, err
    assert "already removed" in out
    assert _nodefence_annotations(cluster) == []
    assert f"fence.{NODE}" not in _entries(cluster)


def test_conflicting_writes_are_read_again_and_retried(fenced: Cluster) -> None:
    cluster = fenced
    cluster.up(NODE, since_seconds=30)
    rules = [
        {"action": "conflict", "verbs": ["patch"], "path": f"/api/v1/nodes/{NODE}", "count": 1},
        {
            "action": "conflict",
            "verbs": ["update"],
            "path": f"/api/v1/namespaces/{NAMESPACE}/configmaps/{RECORD}",
            "count": 1,
        },
    ]
    status, body = http("POST", f"{cluster.url}/sim/v1/faults", {"rules": rules})
    assert status == 201, body
    cursor = cluster.cursor()

    code, _out, err = _release(cluster, NODE, "--reason", "done")

    assert code == 0, err
    writes = [(r["verb"], r["status"]) for r in cluster.requests(cursor) if r["verb"] not in READS]
    assert ("patch", 409) in writes
    assert ("patch", 200) in writes
    assert ("update", 409) in writes
    assert ("update", 200) in writes
    assert cluster.oos_taints(NODE) == []
    assert f"fence.{NODE}" not in _entries(cluster)


def test_the_entry_of_a_deleted_node_is_dropped_and_nothing_else_touched(
    fenced: Cluster,
) -> None:
    cluster = fenced
    deleted = cluster.kubectl("delete", "node", NODE)
    assert deleted.returncode == 0, deleted.stderr

    code, out, err = _release(cluster, NODE, "--reason", "node removed from the cluster")

    assert code == 0, err
    assert f"node {NODE} no longer exists; only the record entry is dropped" in out
    assert f"fence.{NODE}" not in _entries(cluster)
    assert all(e["reason"] != "FenceReleased" for e in cluster.node_events(NODE))


@pytest.mark.invariant("S4")
def test_a_lookalike_taint_an_administrator_reapplied_is_refused(fenced: Cluster) -> None:
    """S4: the administrator took nodefence's taint off and put the same one back by hand;
    it looks the same, but the API server's record of the write says it is theirs."""
    cluster = fenced
    off = cluster.kubectl("taint", "nodes", NODE, f"{OOS}-")
    assert off.returncode == 0, off.stderr
    again = cluster.kubectl("taint", "nodes", NODE, f"{OOS}=nodeshutdown:NoExecute")
    assert again.returncode == 0, again.stderr

    code, _out, err = _release(cluster, NODE, "--reason", "done", "--yes")

    assert code == 1
    assert "looks like the one nodefence applied but is not" in err
    assert [(t["value"], t["effect"]) for t in cluster.oos_taints(NODE)] == [
        ("nodeshutdown", "NoExecute")
    ]
    assert f"fence.{NODE}" in _entries(cluster)
