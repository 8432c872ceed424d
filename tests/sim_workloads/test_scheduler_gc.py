"""The scheduler's filters and spread, and the garbage collector's propagation policies."""

from __future__ import annotations

from nodefence_sim.resources import DEPLOYMENTS, PODS, REPLICASETS, STATEFULSETS
from nodefence_sim.store import DeleteOptions, Obj

from ._cluster import (
    NS,
    add_node,
    deployment,
    make_sim,
    modify_node,
    pods,
    run_until,
    set_ready,
    settle,
    statefulset,
)


def _pod(name: str, **spec: object) -> Obj:
    return {
        "metadata": {"name": name, "namespace": NS},
        "spec": {"containers": [{"name": "c", "image": "img"}], **spec},
    }


def test_scheduler_avoids_not_ready_unschedulable_and_tainted_nodes() -> None:
    sim = make_sim()
    add_node(sim, "a-notready", ready=False)
    add_node(sim, "b-cordoned")
    modify_node(sim, "b-cordoned", lambda n: n["spec"].update(unschedulable=True))
    add_node(
        sim,
        "c-fenced",
        taints=[
            {
                "key": "node.kubernetes.io/out-of-service",
                "value": "nodeshutdown",
                "effect": "NoExecute",
            }
        ],
    )
    add_node(
        sim, "d-noschedule", taints=[{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]
    )
    add_node(sim, "e-prefer", taints=[{"key": "soft", "effect": "PreferNoSchedule"}])
    for i in range(3):
        sim.store.create(PODS, NS, _pod(f"p{i}"))
    settle(sim)
    assert {p["spec"]["nodeName"] for p in pods(sim, "p")} == {"e-prefer"}
    scheduled = sim.store.get(PODS, NS, "p0")["status"]["conditions"]
    assert {"type": "PodScheduled", "status": "True"}.items() <= scheduled[0].items()


def test_scheduler_honours_tolerations_and_node_selector_and_spreads() -> None:
    sim = make_sim()
    add_node(sim, "n1", labels={"zone": "a"})
    add_node(
        sim,
        "n2",
        labels={"zone": "a"},
        taints=[{"key": "dedicated", "value": "db", "effect": "NoSchedule"}],
    )
    add_node(sim, "n3", labels={"zone": "b"})
    tolerate = [{"key": "dedicated", "operator": "Equal", "value": "db", "effect": "NoSchedule"}]
    for i in range(4):
        sim.store.create(PODS, NS, _pod(f"db{i}", nodeSelector={"zone": "a"}, tolerations=tolerate))
    settle(sim)
    placed = [p["spec"]["nodeName"] for p in pods(sim, "db")]
    assert sorted(placed) == ["n1", "n1", "n2", "n2"]
    sim.store.create(PODS, NS, _pod("web"))
    settle(sim)
    assert sim.store.get(PODS, NS, "web")["spec"]["nodeName"] == "n3"


def test_unschedulable_pod_stays_pending_with_a_reason_until_a_node_is_ready() -> None:
    sim = make_sim()
    add_node(sim, "n1", ready=False)
    add_node(sim, "n2", ready=False)
    set_ready(sim, "n1", False)
    sim.store.create(PODS, NS, _pod("lonely"))
    settle(sim)
    pod = sim.store.get(PODS, NS, "lonely")
    assert "nodeName" not in pod["spec"]
    assert pod["status"]["phase"] == "Pending"
    condition = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
    assert condition["status"] == "False"
    assert condition["reason"] == "Unschedulable"
    assert condition["message"].startswith("0/2 nodes are available:")
    assert "untolerated taint {node.kubernetes.io/unreachable}" in condition["message"]
    set_ready(sim, "n2", True)
    run_until(sim, lambda: sim.store.get(PODS, NS, "lonely")["spec"].get("nodeName") == "n2")


def test_deleting_a_deployment_removes_its_replicaset_and_pods() -> None:
    sim = make_sim()
    add_node(sim, "n1")
    sim.store.create(DEPLOYMENTS, NS, deployment("grafana", 2))
    settle(sim)
    assert len(pods(sim, "grafana-")) == 2
    sim.store.delete(DEPLOYMENTS, NS, "grafana", DeleteOptions())
    settle(sim)
    assert sim.store.items(REPLICASETS, NS) == []
    assert pods(sim, "grafana-") == []


def test_foreground_deletion_waits_for_dependents_then_drops_the_finalizer() -> None:
    sim = make_sim()
    add_node(sim, "n1")
    add_node(sim, "n2")
    sim.store.create(STATEFULSETS, NS, statefulset("mariadb", 2, claims=False))
    settle(sim)
    set_ready(sim, "n2", False)
    sim.store.delete(STATEFULSETS, NS, "mariadb", DeleteOptions(propagation_policy="Foreground"))
    settle(sim)
    held = sim.store.get(STATEFULSETS, NS, "mariadb")
    assert held["metadata"]["finalizers"] == ["foregroundDeletion"]
    stuck = [p for p in pods(sim, "mariadb-") if p["spec"]["nodeName"] == "n2"]
    assert len(stuck) == 1
    assert stuck[0]["metadata"]["deletionTimestamp"]
    assert all(p["spec"]["nodeName"] == "n2" for p in pods(sim, "mariadb-"))
    set_ready(sim, "n2", True)
    run_until(sim, lambda: sim.store.peek(STATEFULSETS, NS, "mariadb") is None)
    assert pods(sim, "mariadb-") == []


def test_dependent_keeps_its_live_owner_and_loses_only_the_dangling_reference() -> None:
    sim = make_sim()
    add_node(sim, "n1")
    owner = sim.store.create(DEPLOYMENTS, NS, {**deployment("keep", 0)})
    pod = _pod("shared")
    pod["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": "keep",
            "uid": owner["metadata"]["uid"],
        },
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "gone", "uid": "0000"},
        {"apiVersion": "example.com/v1", "kind": "Widget", "name": "unserved", "uid": "1111"},
    ]
    sim.store.create(PODS, NS, pod)
    settle(sim)
    refs = sim.store.get(PODS, NS, "shared")["metadata"]["ownerReferences"]
    assert [r["name"] for r in refs] == ["keep", "unserved"]
