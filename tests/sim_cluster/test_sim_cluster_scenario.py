"""Settings, scenario files and the built-in seed scenario."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from nodefence_sim.resources import (
    DAEMONSETS,
    DEPLOYMENTS,
    LEASES,
    NAMESPACES,
    NODES,
    PODS,
    STATEFULSETS,
)
from nodefence_sim.scenario import ScenarioError, creation_order, load_scenario, parse_scenario
from nodefence_sim.simulation import SimSettings, Simulation, parse_version
from nodefence_sim.store import Obj

from .support import FakeClock, cond, node_sim

SCENARIO = """
simulation:
  k8s_version: v1.28.3
  lease_renew_seconds: 5
  node_monitor_grace_seconds: 20
  pod_eviction_toleration_seconds: 60
objects:
- apiVersion: v1
  kind: Pod
  metadata: {name: web-0, namespace: shop}
  spec:
    nodeName: worker01
    containers: [{name: web, image: nginx:1.25}]
- apiVersion: v1
  kind: Node
  metadata: {name: worker01}
"""


@pytest.mark.parametrize(
    ("version", "gate"),
    [("1.24.8", False), ("1.25.16", False), ("1.26.0", True), ("1.28.3", True), ("1.30", True)],
)
def test_out_of_service_gate_defaults_by_version(version: str, gate: bool) -> None:
    assert SimSettings(k8s_version=version).gate_enabled("NodeOutOfServiceVolumeDetach") is gate


def test_gate_settings() -> None:
    on = SimSettings(feature_gates={"NodeOutOfServiceVolumeDetach": True})
    assert on.gate_enabled("NodeOutOfServiceVolumeDetach")
    assert not SimSettings().gate_enabled("SomethingElse")
    with pytest.raises(ValueError, match="locked"):
        SimSettings(k8s_version="1.28.3", feature_gates={"NodeOutOfServiceVolumeDetach": False})


def test_defaults() -> None:
    settings = SimSettings()
    assert (settings.k8s_version, settings.lease_duration_seconds) == ("1.24.8", 40)
    assert (settings.lease_renew_seconds, settings.node_monitor_grace_seconds) == (2.0, 40.0)
    assert settings.pod_eviction_toleration_seconds == 300


def test_version_parsing() -> None:
    assert parse_version("v1.28.3") == (1, 28, 3)
    assert parse_version("1.24") == (1, 24, 0)
    with pytest.raises(ValueError, match="invalid"):
        parse_version("latest")


@pytest.mark.parametrize(
    "values",
    [
        {"k8s_versoin": "1.24.8"},
        {"lease_duration_seconds": "forty"},
        {"tick_seconds": -1},
        {"feature_gates": {"NodeOutOfServiceVolumeDetach": "yes"}},
        {"k8s_version": "one"},
    ],
)
def test_bad_settings_are_rejected(values: dict[str, object]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - each case has its own message
        SimSettings.from_mapping(values)


def test_scenario_file_settings_and_objects(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "small.yaml"
    path.write_text(SCENARIO)
    scenario = load_scenario(str(path))
    settings = SimSettings.from_mapping(scenario.settings)
    assert settings.k8s_version == "1.28.3"
    assert settings.pod_eviction_toleration_seconds == 60
    assert settings.lease_duration_seconds == 40

    sim = Simulation(settings, clock=clock)
    sim.load_objects(scenario.objects)
    namespaces = {n["metadata"]["name"] for n in sim.store.items(NAMESPACES)}
    assert {"shop", "default", "kube-system", "kube-node-lease"} <= namespaces
    web = sim.store.peek(PODS, "shop", "web-0")
    assert web is not None
    assert {t.get("tolerationSeconds") for t in web["spec"]["tolerations"]} == {60}


def test_creation_order_puts_namespaces_and_nodes_first() -> None:
    scenario = parse_scenario(SCENARIO)
    kinds = [obj["kind"] for _, obj in creation_order(scenario.objects)]
    assert kinds.index("Node") < kinds.index("Pod")
    assert kinds[0] == "Namespace"


def test_multi_document_scenario(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "objects.yaml"
    path.write_text(
        "apiVersion: v1\nkind: Node\nmetadata: {name: a}\n---\n"
        "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Node, metadata: {name: b}}\n"
    )
    scenario = load_scenario(str(path))
    assert scenario.settings == {}
    sim = node_sim(clock)
    sim.load_objects(scenario.objects)
    sim.settle()
    assert sorted(n["metadata"]["name"] for n in sim.store.items(NODES)) == ["a", "b"]
    assert all(cond(n, "Ready")["status"] == "True" for n in sim.store.items(NODES))
    assert len(sim.store.items(LEASES, "kube-node-lease")) == 2


@pytest.mark.parametrize(
    "text",
    [
        "simulation: {}\nobjects:\n- {kind: Widget, metadata: {name: x}}\n",
        "simulation: {}\nobjects: []\nextra: 1\n",
        "objects:\n- {kind: Node, metadata: {}}\n",
        "- just\n- a list\n",
        "objects: [\n",
    ],
)
def test_bad_scenarios_are_rejected(text: str) -> None:
    with pytest.raises(ScenarioError):
        parse_scenario(text)


def test_missing_scenario_file_names_the_builtins() -> None:
    with pytest.raises(FileNotFoundError, match="seed"):
        load_scenario("/nonexistent/scenario.yaml")


# ------------------------------------------------------------------------- the seed
@pytest.fixture(scope="module")
def seed() -> Simulation:
    return Simulation.from_scenario("seed")


def pods_on(sim: Simulation, node_name: str) -> dict[str, Obj]:
    return {
        p["metadata"]["name"]: p
        for p in sim.store.items(PODS, "openstack")
        if p["spec"].get("nodeName") == node_name
    }


def test_seed_nodes_and_workloads(seed: Simulation) -> None:
    assert seed.settings.k8s_version == "1.24.8"
    assert not seed.settings.gate_enabled("NodeOutOfServiceVolumeDetach")
    nodes = {n["metadata"]["name"]: n for n in seed.store.items(NODES)}
    assert sorted(nodes) == ["compute01", "compute02", "control01", "control02", "control03"]
    for name, found in nodes.items():
        labels = found["metadata"]["labels"]
        assert labels["kubernetes.io/hostname"] == name
        assert ("node-role.kubernetes.io/control-plane" in labels) == name.startswith("control")
        assert cond(found, "Ready")["status"] == "True"
        assert found["status"]["nodeInfo"]["kubeletVersion"] == "v1.24.8"
    assert seed.store.peek(NAMESPACES, None, "openstack") is not None
    statefulsets = {s["metadata"]["name"] for s in seed.store.items(STATEFULSETS, "openstack")}
    assert {"mariadb-server", "rabbitmq-rabbitmq", "ingress"} <= statefulsets
    deployments = {d["metadata"]["name"] for d in seed.store.items(DEPLOYMENTS, "openstack")}
    assert {"keystone-api", "nova-api-osapi", "cinder-volume", "glance-api", "horizon"} <= (
        deployments
    )
    daemonsets = {d["metadata"]["name"] for d in seed.store.items(DAEMONSETS, "openstack")}
    assert {"neutron-ovs-agent-default", "openvswitch-db", "openvswitch-vswitchd"} <= daemonsets
    assert len(seed.store.items(PODS)) < 150


def test_seed_pods_run_where_the_seed_shows_them(seed: Simulation) -> None:
    on_control02 = pods_on(seed, "control02")
    for name in ("mariadb-server-1", "rabbitmq-rabbitmq-2", "ingress-0"):
        assert name in on_control02, f"{name} is not on control02"
    prefixes = Counter(
        prefix
        for name in on_control02
        for prefix in ("neutron-", "openvswitch-", "keystone-api-", "nova-")
        if name.startswith(prefix)
    )
    assert prefixes["openvswitch-"] == 2
    assert prefixes["neutron-"] >= 5
    assert prefixes["keystone-api-"] == 1
    assert all(p["status"]["phase"] == "Running" for p in seed.store.items(PODS))
    assert seed.store.peek(PODS, "openstack", "mariadb-server-0")["spec"]["nodeName"] == (  # type: ignore[index]
        "control03"
    )


def test_seed_story_on_1_24_and_1_28() -> None:
    old = Simulation.from_scenario("seed")
    old.node_down("control02", since_seconds=1200)
    stuck = pods_on(old, "control02")
    assert stuck["mariadb-server-1"]["metadata"]["deletionTimestamp"]
    assert stuck["rabbitmq-rabbitmq-2"]["metadata"]["deletionTimestamp"]
    daemon = [p for n, p in stuck.items() if n.startswith("openvswitch-")]
    assert daemon
    assert not any(p["metadata"].get("deletionTimestamp") for p in daemon)

    new = Simulation.from_scenario("seed", k8s_version="1.28.3")
    assert new.settings.gate_enabled("NodeOutOfServiceVolumeDetach")
    new.node_down("control02", since_seconds=1200)
    fenced = new.store.get(NODES, None, "control02")
    fenced["spec"]["taints"].append(
        {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}
    )
    new.store.update(NODES, None, "control02", fenced)
    new.settle()
    assert pods_on(new, "control02") == {}
    moved = new.store.peek(PODS, "openstack", "mariadb-server-1")
    assert moved is not None
    assert moved["spec"]["nodeName"] != "control02"
