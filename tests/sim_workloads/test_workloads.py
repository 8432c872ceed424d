"""StatefulSet, Deployment/ReplicaSet and DaemonSet controllers."""

from __future__ import annotations

import json

from nodefence_sim.resources import DAEMONSETS, DEPLOYMENTS, PODS, PVCS, REPLICASETS, STATEFULSETS
from nodefence_sim.simulation import Simulation
from nodefence_sim.store import DeleteOptions

from ._cluster import (
    NS,
    add_node,
    container_template,
    deployment,
    force_delete,
    make_sim,
    pods,
    run_until,
    set_out_of_service,
    set_ready,
    settle,
    statefulset,
)


def _three_nodes() -> Simulation:
    sim = make_sim()
    for name in ("control01", "control02", "control03"):
        add_node(sim, name)
    return sim


def test_statefulset_creates_named_pods_with_claims_and_status() -> None:
    sim = _three_nodes()
    sts = sim.store.create(STATEFULSETS, NS, statefulset("mariadb-server", 3))
    settle(sim)

    created = pods(sim, "mariadb-server-")
    assert [p["metadata"]["name"] for p in created] == [f"mariadb-server-{i}" for i in range(3)]
    for ordinal, pod in enumerate(created):
        meta, spec = pod["metadata"], pod["spec"]
        assert meta["ownerReferences"] == [
            {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "name": "mariadb-server",
                "uid": sts["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        assert meta["labels"]["app"] == "mariadb-server"
        assert meta["labels"]["statefulset.kubernetes.io/pod-name"] == f"mariadb-server-{ordinal}"
        assert meta["labels"]["controller-revision-hash"].startswith("mariadb-server-")
        assert spec["hostname"] == f"mariadb-server-{ordinal}"
        assert spec["subdomain"] == "mariadb-server"
        assert {
            "name": "data",
            "persistentVolumeClaim": {"claimName": f"data-mariadb-server-{ordinal}"},
        } in spec["volumes"]
        assert pod["status"]["phase"] == "Running"
    # Spread over the three nodes.
    assert sorted(p["spec"]["nodeName"] for p in created) == ["control01", "control02", "control03"]
    claims = sorted(c["metadata"]["name"] for c in sim.store.items(PVCS, NS))
    assert claims == [f"data-mariadb-server-{i}" for i in range(3)]
    assert all(sim.store.get(PVCS, NS, c)["status"]["phase"] == "Bound" for c in claims)
    status = sim.store.get(STATEFULSETS, NS, "mariadb-server")["status"]
    assert status["replicas"] == 3
    assert status["readyReplicas"] == 3
    assert status["currentReplicas"] == 3
    assert status["currentRevision"] == created[0]["metadata"]["labels"]["controller-revision-hash"]


def test_statefulset_replacement_waits_until_the_terminating_pod_is_gone() -> None:
    sim = _three_nodes()
    sim.store.create(STATEFULSETS, NS, statefulset("rabbitmq", 3, claims=False))
    settle(sim)
    victim = next(p for p in pods(sim, "rabbitmq-") if p["spec"]["nodeName"] == "control02")
    set_ready(sim, "control02", False)
    sim.store.delete(PODS, NS, victim["metadata"]["name"], DeleteOptions())
    for _ in range(20):
        sim.step()
    stuck = sim.store.get(PODS, NS, victim["metadata"]["name"])
    assert stuck["metadata"]["uid"] == victim["metadata"]["uid"]
    assert stuck["metadata"]["deletionTimestamp"]
    assert len(pods(sim, "rabbitmq-")) == 3

    force_delete(sim, stuck)

    def replaced() -> bool:
        pod = sim.store.peek(PODS, NS, victim["metadata"]["name"])
        return pod is not None and pod["status"].get("phase") == "Running"

    run_until(sim, replaced)
    new = sim.store.get(PODS, NS, victim["metadata"]["name"])
    assert new["metadata"]["uid"] != victim["metadata"]["uid"]
    assert new["spec"]["nodeName"] != "control02"


def test_statefulset_claims_outlive_pods_and_scale_down_keeps_them() -> None:
    sim = _three_nodes()
    sim.store.create(STATEFULSETS, NS, statefulset("db", 2))
    settle(sim)
    claim_uid = sim.store.get(PVCS, NS, "data-db-1")["metadata"]["uid"]
    sts = sim.store.get(STATEFULSETS, NS, "db")
    sts["spec"]["replicas"] = 1
    sim.store.update(STATEFULSETS, NS, "db", sts)
    run_until(sim, lambda: sim.store.peek(PODS, NS, "db-1") is None)
    assert sim.store.get(PVCS, NS, "data-db-1")["metadata"]["uid"] == claim_uid
    sts = sim.store.get(STATEFULSETS, NS, "db")
    sts["spec"]["replicas"] = 2
    sim.store.update(STATEFULSETS, NS, "db", sts)
    run_until(sim, lambda: sim.store.peek(PODS, NS, "db-1") is not None)
    assert sim.store.get(PVCS, NS, "data-db-1")["metadata"]["uid"] == claim_uid


def test_statefulset_initial_node_pins_first_placement_only_on_eligible_nodes() -> None:
    sim = _three_nodes()
    set_ready(sim, "control01", False)
    pins = {"0": "control03", "1": "control03", "2": "control01"}
    sim.store.create(
        STATEFULSETS,
        NS,
        statefulset(
            "ingress",
            3,
            claims=False,
            annotations={"sim.nodefence.io/initial-node": json.dumps(pins)},
        ),
    )
    settle(sim)
    placed = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods(sim, "ingress-")}
    assert placed["ingress-0"] == "control03"
    assert placed["ingress-1"] == "control03"
    # control01 is not Ready: the pin is ignored and the pod is spread instead.
    assert placed["ingress-2"] == "control02"


def test_deployment_creates_one_replicaset_and_its_pods() -> None:
    sim = _three_nodes()
    deploy = sim.store.create(DEPLOYMENTS, NS, deployment("keystone-api", 2))
    settle(sim)
    sets = sim.store.items(REPLICASETS, NS)
    assert len(sets) == 1
    rs = sets[0]
    template_hash = rs["metadata"]["labels"]["pod-template-hash"]
    assert rs["metadata"]["name"] == f"keystone-api-{template_hash}"
    assert rs["metadata"]["ownerReferences"][0]["uid"] == deploy["metadata"]["uid"]
    assert rs["spec"]["selector"]["matchLabels"] == {
        "app": "keystone-api",
        "pod-template-hash": template_hash,
    }
    created = pods(sim, "keystone-api-")
    assert len(created) == 2
    for pod in created:
        suffix = pod["metadata"]["name"].removeprefix(rs["metadata"]["name"] + "-")
        assert len(suffix) == 5
        assert pod["metadata"]["labels"]["pod-template-hash"] == template_hash
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
    assert sim.store.get(REPLICASETS, NS, rs["metadata"]["name"])["status"]["readyReplicas"] == 2
    status = sim.store.get(DEPLOYMENTS, NS, "keystone-api")["status"]
    assert (status["replicas"], status["readyReplicas"], status["availableReplicas"]) == (2, 2, 2)
    assert {c["type"]: c["status"] for c in status["conditions"]}["Available"] == "True"


def test_replicaset_replaces_a_terminating_pod_at_once() -> None:
    sim = _three_nodes()
    sim.store.create(DEPLOYMENTS, NS, deployment("nova-api", 3))
    settle(sim)
    victim = next(p for p in pods(sim, "nova-api-") if p["spec"]["nodeName"] == "control01")
    set_ready(sim, "control01", False)
    sim.store.delete(PODS, NS, victim["metadata"]["name"], DeleteOptions())
    settle(sim)
    current = pods(sim, "nova-api-")
    assert len(current) == 4
    assert sim.store.get(PODS, NS, victim["metadata"]["name"])["metadata"]["deletionTimestamp"]
    live = [p for p in current if not p["metadata"].get("deletionTimestamp")]
    assert len(live) == 3
    assert all(p["spec"]["nodeName"] != "control01" for p in live)
    rs = sim.store.items(REPLICASETS, NS)[0]
    assert rs["status"]["replicas"] == 3


def test_deployment_scale_down_and_initial_node_list() -> None:
    sim = _three_nodes()
    pins = json.dumps(["control02", "control02"])
    sim.store.create(
        DEPLOYMENTS, NS, deployment("horizon", 2, {"sim.nodefence.io/initial-node": pins})
    )
    settle(sim)
    assert [p["spec"]["nodeName"] for p in pods(sim, "horizon-")] == ["control02", "control02"]
    deploy = sim.store.get(DEPLOYMENTS, NS, "horizon")
    deploy["spec"]["replicas"] = 1
    sim.store.update(DEPLOYMENTS, NS, "horizon", deploy)
    settle(sim)
    assert len(pods(sim, "horizon-")) == 1
    assert sim.store.items(REPLICASETS, NS)[0]["spec"]["replicas"] == 1


def _daemonset(**spec: object) -> dict[str, object]:
    labels = {"app": "neutron-ovs-agent"}
    return {
        "metadata": {"name": "neutron-ovs-agent", "namespace": NS},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": container_template(labels, **spec),
        },
    }


def test_daemonset_runs_one_pod_per_eligible_node_bound_directly() -> None:
    sim = make_sim()
    add_node(sim, "control01", labels={"openstack-control-plane": "enabled"})
    add_node(sim, "control02", labels={"openstack-control-plane": "enabled"})
    add_node(
        sim,
        "control03",
        labels={"openstack-control-plane": "enabled"},
        taints=[{"key": "dedicated", "value": "db", "effect": "NoSchedule"}],
    )
    add_node(sim, "compute01")
    sim.store.create(
        DAEMONSETS,
        NS,
        _daemonset(nodeSelector={"openstack-control-plane": "enabled"}, hostNetwork=True),
    )
    settle(sim)
    created = pods(sim, "neutron-ovs-agent-")
    assert sorted(p["spec"]["nodeName"] for p in created) == ["control01", "control02"]
    pod = created[0]
    node_name = pod["spec"]["nodeName"]
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert terms["nodeSelectorTerms"][0]["matchFields"] == [
        {"key": "metadata.name", "operator": "In", "values": [node_name]}
    ]
    tolerations = {(t["key"], t["effect"]) for t in pod["spec"]["tolerations"]}
    assert {
        ("node.kubernetes.io/not-ready", "NoExecute"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
        ("node.kubernetes.io/disk-pressure", "NoSchedule"),
        ("node.kubernetes.io/memory-pressure", "NoSchedule"),
        ("node.kubernetes.io/pid-pressure", "NoSchedule"),
        ("node.kubernetes.io/unschedulable", "NoSchedule"),
        ("node.kubernetes.io/network-unavailable", "NoSchedule"),
    } <= tolerations
    assert not any(
        t["key"] == "node.kubernetes.io/out-of-service" for t in pod["spec"]["tolerations"]
    )
    unreachable = [
        t for t in pod["spec"]["tolerations"] if t["key"] == "node.kubernetes.io/unreachable"
    ]
    assert "tolerationSeconds" not in unreachable[0]
    status = sim.store.get(DAEMONSETS, NS, "neutron-ovs-agent")["status"]
    assert (
        status["desiredNumberScheduled"],
        status["currentNumberScheduled"],
        status["numberReady"],
    ) == (2, 2, 2)


def test_daemonset_pod_stays_on_a_dead_node_and_returns_only_after_out_of_service_is_removed() -> (
    None
):
    sim = make_sim()
    add_node(sim, "control01")
    add_node(sim, "control02")
    sim.store.create(DAEMONSETS, NS, _daemonset())
    settle(sim)
    original = next(p for p in pods(sim) if p["spec"]["nodeName"] == "control02")

    set_ready(sim, "control02", False)
    settle(sim)
    kept = sim.store.get(PODS, NS, original["metadata"]["name"])
    assert not kept["metadata"].get("deletionTimestamp")

    set_out_of_service(sim, "control02", True)
    settle(sim)
    assert sim.store.get(PODS, NS, original["metadata"]["name"])["metadata"]["deletionTimestamp"]
    force_delete(sim, sim.store.get(PODS, NS, original["metadata"]["name"]))
    set_ready(sim, "control02", True)
    settle(sim)
    assert [p["spec"]["nodeName"] for p in pods(sim)] == ["control01"]

    set_out_of_service(sim, "control02", False)
    settle(sim)
    back = [p for p in pods(sim) if p["spec"]["nodeName"] == "control02"]
    assert len(back) == 1
    assert back[0]["metadata"]["uid"] != original["metadata"]["uid"]
    assert back[0]["status"]["phase"] == "Running"
