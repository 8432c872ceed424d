"""Real kubelets on the real control plane (``simulate --backend real --real-nodes 2``): nodes
whose pods are real containers, whose machine a BMC really powers off, and whose kubelet can die
while its containers run on, which is the case the power-off proof exists for.

A module of its own, on a backend of its own: the session's backend keeps its kwok nodes only,
so no other test's pod lands on a node that would really have to run it. Containers are found
on this machine by a marker in their command line and told apart by the cgroup of their node.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from bench.processes import Processes, eventually, http
from kubernetes import client
from tests.deploy.test_helm import CHART, helm
from tests.image.conftest import build_image, running_daemon
from tests.real_backend import running_backend

from nodefence_sim.controllers.kubelet import system_uuid
from nodefence_sim.demo.payloads import node_alert
from nodefence_sim.real import prometheus_operator as po
from nodefence_sim.real.machines import HOST_IN_CLUSTER
from nodefence_sim.real.storage import DRIVER, STORAGE_CLASS

from .safety_support import bmc, nodefence_events, power_on
from .test_real_helm import placement
from .test_real_prometheus_operator import (
    ALERTMANAGER,
    MONITORING,
    VALUES,
    monitoring_stack,
    nodefence_route,
    run_alertmanager,
)
from .test_seed_story import oos_taints, post_alert, power_state, serve

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(900)]

REAL = ("real01", "real02")
KWOK = ("compute01", "compute02", "control01", "control02", "control03")
NAMESPACE = "default"
STEP_WITHIN = 180.0
# A real node's cgroup: nodefence-sim-<the backend's PID>-<node>.
CGROUP = re.compile(r"nodefence-sim-\d+-(real\d+)")
POLICY = {
    "cluster": {"storm_cooldown_seconds": 0},
    "rules": [
        {
            "name": "real-nodes",
            "min_not_ready_seconds": 0,
            "flap_window_seconds": 0,
            "lease_staleness_seconds": 15,
            "healthy_delay_seconds": 5,
            "fencing": {"driver": "redfish", "action": "off", "timeout_seconds": 60},
        }
    ],
}


@pytest.fixture(scope="module")
def product_image(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """The product image ``make image`` builds, saved as the archive every real node imports."""
    reference = build_image()
    archive = tmp_path_factory.mktemp("image") / "nodefence.tar"
    with running_daemon(reference) as docker:
        saved = docker.run("save", "--output", str(archive), reference, timeout=600)
    assert saved.returncode == 0, saved.stderr
    return reference, archive


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, product_image: tuple[str, Path]
) -> Iterator[Any]:
    workdir = tmp_path_factory.mktemp("real-nodes")
    extra = ("--real-nodes", "2", "--node-image", str(product_image[1]))
    with running_backend(workdir, *extra) as backend:
        yield backend


def containers(marker: str) -> dict[int, str]:
    """This machine's processes whose command line holds ``marker``: pid -> the real node
    whose cgroup holds it."""
    found: dict[int, str] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cgroups = (proc / "cgroup").read_text()
        except OSError:
            continue
        node = CGROUP.search(cgroups)
        if marker in cmdline and node is not None and not cmdline.startswith("pgrep"):
            found[int(proc.name)] = node.group(1)
    return found


def busybox(name: str, marker: str, **spec: Any) -> dict[str, Any]:
    return {
        "name": name,
        "image": "nodefence-sim/busybox:1",
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", f"while true; do date > /tmp/alive; sleep 1; done # {marker}"],
        **spec,
    }


def running_on(core: client.CoreV1Api, name: str) -> str | None:
    """The node ``name`` runs on, ready; None while it is absent, pending or not ready."""
    try:
        pod = core.read_namespaced_pod(name, NAMESPACE)
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise
    statuses = pod.status.container_statuses or []
    if pod.status.phase == "Running" and statuses and all(s.ready for s in statuses):
        return str(pod.spec.node_name)
    return None


def test_real_kubelets_join_beside_kwok_and_run_containers(cluster: Any) -> None:
    listed = subprocess.run(
        ["kubectl", "get", "nodes", "-o", "wide", "--no-headers"],
        env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = {line.split()[0]: line for line in listed.splitlines()}
    assert set(rows) == {*REAL, *KWOK}, listed
    for name in REAL:
        node = cluster.core.read_node(name)
        info = node.status.node_info
        assert info.container_runtime_version.startswith("containerd://"), info
        assert info.kubelet_version.startswith("v1."), info
        # The machine the BMC powers is the one the kubelet reports (identity binding).
        system, headers = bmc(cluster, name)
        code, raw = http("GET", system, headers=headers)
        assert code == 200, raw
        assert info.system_uuid == json.loads(raw)["UUID"]
        assert info.system_uuid.lower() == system_uuid(name).lower()
        assert " Ready " in rows[name], rows[name]
        assert "containerd://" in rows[name], rows[name]
    for name in KWOK:
        assert "kwok" in rows[name], rows[name]

    marker = f"nodefence-test-{secrets.token_hex(6)}"
    for node in REAL:
        cluster.core.create_namespaced_pod(
            NAMESPACE,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"busybox-{node}"},
                "spec": {"nodeName": node, "containers": [busybox("main", marker)]},
            },
        )
    for node in REAL:
        eventually(
            lambda node=node: running_on(cluster.core, f"busybox-{node}") == node,
            within=STEP_WITHIN,
            what=f"busybox Running on {node}",
        )
    assert sorted(set(containers(marker).values())) == list(REAL)
    for node in REAL:
        cluster.core.delete_namespaced_pod(f"busybox-{node}", NAMESPACE, grace_period_seconds=0)
    eventually(lambda: not containers(marker), within=STEP_WITHIN, what="busybox containers gone")


def test_down_kills_the_kubelet_and_force_off_the_machine(cluster: Any) -> None:
    node, marker = "real02", f"nodefence-test-{secrets.token_hex(6)}"
    cluster.core.create_namespaced_pod(
        NAMESPACE,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "survivor"},
            "spec": {"nodeName": node, "containers": [busybox("main", marker)]},
        },
    )
    eventually(lambda: running_on(cluster.core, "survivor") == node, within=STEP_WITHIN, what="up")
    boot = cluster.core.read_node(node).status.node_info.boot_id

    # The kubelet dies; the machine and its container run on.
    assert cluster.control(node, "down")["kubelet"] == "down"
    eventually(lambda: cluster.ready(node) == "Unknown", within=STEP_WITHIN, what="NotReady")
    assert set(containers(marker).values()) == {node}
    assert power_state(cluster, node) == "On"

    # The BMC's ForceOff: nothing of the machine runs any more.
    system, headers = bmc(cluster, node)
    code, raw = http(
        "POST",
        f"{system}/Actions/ComputerSystem.Reset",
        {"ResetType": "ForceOff"},
        headers=headers,
    )
    assert code in (200, 202, 204), raw
    eventually(lambda: not containers(marker), within=STEP_WITHIN, what="container killed")
    assert power_state(cluster, node) == "Off"

    # On: a new boot, the kubelet back, the pod's container started again by it.
    power_on(cluster, node)
    eventually(lambda: cluster.ready(node) == "True", within=STEP_WITHIN, what="Ready again")
    assert cluster.core.read_node(node).status.node_info.boot_id != boot
    eventually(lambda: containers(marker), within=STEP_WITHIN, what="container restarted")
    cluster.core.delete_namespaced_pod("survivor", NAMESPACE, grace_period_seconds=0)


@pytest.mark.invariant("S10")
def test_nodefence_powers_off_a_node_whose_containers_still_run(
    procs: Processes, cluster: Any
) -> None:
    """The kubelet of real01 dies while its StatefulSet pod's container runs on; nodefence
    powers the machine off through its BMC (the container dies), taints the node, and the
    StatefulSet's pod runs again on real02; the machine comes back with a new boot ID and the
    resolved alert unfences it."""
    victim, other, marker = "real01", "real02", f"nodefence-test-{secrets.token_hex(6)}"
    apps = client.AppsV1Api(cluster.api)
    # The pod starts on the victim: the other real node is cordoned until it is placed.
    cluster.core.patch_node(other, {"spec": {"unschedulable": True}})
    apps.create_namespaced_stateful_set(NAMESPACE, _statefulset("db", marker))
    eventually(lambda: running_on(cluster.core, "db-0") == victim, within=STEP_WITHIN, what="db-0")
    cluster.core.patch_node(other, {"spec": {"unschedulable": False}})
    # Provisioned by the external-provisioner, attached by the attacher, staged and published
    # by the victim's kubelet through the driver's node plugin.
    volume = Volume(cluster, "data-db-0")
    eventually(lambda: volume.attached() == {victim: True}, within=STEP_WITHIN, what="attached")
    assert volume.read("born-on") == volume.read("runs-on") == victim
    assert len(volume.mounted_in(victim)) == 2, "a staging mount and the pod's"
    boot = cluster.core.read_node(victim).status.node_info.boot_id
    nodefence = serve(procs, cluster, POLICY)

    assert cluster.control(victim, "down")["kubelet"] == "down"
    eventually(lambda: cluster.ready(victim) == "Unknown", within=STEP_WITHIN, what="NotReady")
    assert set(containers(marker).values()) == {victim}, "the container outlives its kubelet"
    # ... and still writes to its volume: what a second writer on another node would corrupt.
    written = volume.read("alive")
    eventually(lambda: volume.read("alive") != written, within=STEP_WITHIN, what="still writing")

    def fenced() -> bool:
        decision = post_alert(nodefence, victim, "firing")
        return decision["verdict"] == "fence" and bool(oos_taints(cluster.core.read_node(victim)))

    eventually(fenced, within=STEP_WITHIN, interval=2.0, what=f"{victim} fenced")
    assert power_state(cluster, victim) == "Off"
    eventually(lambda: running_on(cluster.core, "db-0") == other, within=STEP_WITHIN, what="moved")
    # Only the new node runs the workload: the old container died with its machine.
    assert set(containers(marker).values()) == {other}
    # The taint's force-detach let the attacher detach it from the dead node (the driver
    # refuses a second attachment), and the pod found its data on the new node.
    eventually(lambda: volume.attached() == {other: True}, within=STEP_WITHIN, what="reattached")
    assert (volume.read("born-on"), volume.read("runs-on")) == (victim, other)
    assert len(volume.mounted_in(other)) == 2

    power_on(cluster, victim)
    eventually(lambda: cluster.ready(victim) == "True", within=STEP_WITHIN, what="back")
    assert cluster.core.read_node(victim).status.node_info.boot_id != boot

    def unfenced() -> bool:
        post_alert(nodefence, victim, "resolved")
        return not oos_taints(cluster.core.read_node(victim))

    eventually(unfenced, within=STEP_WITHIN, interval=2.0, what=f"{victim} unfenced")
    assert set(containers(marker).values()) == {other}
    # The machine's mounts died with it; its new boot has none of the volume.
    assert volume.mounted_in(victim) == []
    assert volume.attached() == {other: True}
    apps.delete_namespaced_stateful_set("db", NAMESPACE)
    volume.delete()


def test_the_chart_runs_the_product_image_on_real_nodes(
    cluster: Any, product_image: tuple[str, Path], tmp_path: Path
) -> None:
    """``helm install --wait`` of the chart with the built image, on the two real nodes: both
    replicas Ready (their /readyz reached the API server with the in-cluster account), one on
    each node, each container running as 10001 on a read-only root filesystem."""
    namespace, release = "nodefence-real", "real"
    cluster.core.create_namespace(
        {
            "metadata": {
                "name": namespace,
                "labels": {"pod-security.kubernetes.io/enforce": "restricted"},
            }
        }
    )
    cluster.core.create_namespaced_secret(
        namespace,
        {"metadata": {"name": "nodefence-secrets"}, "stringData": {"NODEFENCE_ALERT_TOKEN": "t"}},
    )
    install = install_on_real_nodes(cluster, product_image[0], release, namespace, tmp_path)
    assert install.returncode == 0, f"{install.stderr}\n{placement(cluster.core, namespace)}"
    pods = cluster.core.list_namespaced_pod(namespace).items
    assert sorted(p.spec.node_name for p in pods) == list(REAL)
    for pod in pods:
        assert {c.type: c.status for c in pod.status.conditions}["Ready"] == "True"
    served = {
        pid: node
        for pid, node in containers("nodefence serve").items()
        if _status(pid).get("Uid", "").split()[:1] == ["10001"]
    }
    assert sorted(served.values()) == list(REAL), containers("nodefence serve")
    for pid in served:
        root = next(
            line.split()
            for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
            if line.split()[4] == "/"
        )
        assert "ro" in root[5].split(","), root
    uninstall(cluster, release, namespace, tmp_path)


STORY_POLICY = {
    # Alertmanager delivers the alert; the fallback (no alert 10 minutes after NotReady) is
    # there as in a user's policy, and does not come due in this story. The claim timeout is
    # the shipped 300 s: the replica on the dying node, still running, leaves the fence to the
    # other (guard own-node), so no claim of a replica its own power-off stopped is waited out.
    "cluster": {"storm_cooldown_seconds": 0, "fallback_after_seconds": 600},
    "rules": [POLICY["rules"][0]],
}
# Where Alertmanager listens, in the cluster's network: the receivers ask it for silences.
ALERTMANAGER_IN_CLUSTER = f"{HOST_IN_CLUSTER}:9093"


@pytest.mark.invariant("S10")
def test_the_seed_story_as_users_run_it(
    cluster: Any, product_image: tuple[str, Path], tmp_path: Path, procs: Processes
) -> None:
    """The chart's two receivers run the built image on the two real nodes, with the BMC
    inventory as a Secret file, a policy and kube-prometheus-stack's monitoring objects; the
    real Prometheus Operator generates Alertmanager's configuration from them, and Debian's
    Alertmanager runs it in the cluster's network, where the chart's Service name leads to its
    ClusterIP and kube-proxy to a ready receiver. real02 runs one receiver and a StatefulSet's
    pod with a CSI volume; its kubelet dies (its containers run on, writing). KubeNodeNotReady
    reaches the receiver on real01 through Alertmanager and the Service; it powers real02 off
    through its BMC from inside the cluster (the receiver and the pod's container there die),
    taints it; the pod runs again on real01 with its volume detached from real02 and attached
    there, its data found; powered on with a new boot ID, the kubelet removes the dead
    containers and the receivers unfence the node."""
    victim, survivor, marker = "real02", "real01", f"nodefence-test-{secrets.token_hex(6)}"
    namespace, release = "nodefence-story", "story"
    service_host = f"{release}-nodefence.{namespace}.svc"
    receiver = f"{MONITORING}/{release}-nodefence/nodefence"
    token = secrets.token_urlsafe(16)
    bmcs = _inside(cluster)
    inventory = yaml.safe_load(Path(cluster.inventory).read_text())
    for entry in inventory["nodes"].values():
        entry["address"] = bmcs
    with monitoring_stack(cluster, tmp_path / "operator", namespace, token) as (rest, operator):
        for name, data in (
            ("nodefence-secrets", {"NODEFENCE_ALERT_TOKEN": token}),
            ("nodefence-bmc-inventory", {"inventory.yaml": yaml.safe_dump(inventory)}),
        ):
            cluster.core.create_namespaced_secret(
                namespace, {"metadata": {"name": name}, "stringData": data}
            )
        policy = tmp_path / "policy.yaml"
        policy.write_text(yaml.safe_dump(STORY_POLICY))
        install = install_on_real_nodes(
            cluster,
            product_image[0],
            release,
            namespace,
            tmp_path,
            "-f",
            str(VALUES),
            "--set",
            "bmcInventory.enabled=true",
            "--set-json",
            f'networkPolicy.bmcNetworks=["{bmcs.split("//")[1].split(":")[0]}/32"]',
            "--set-json",
            # The kubernetes Service's address, and the API server's as kube-proxy sends to it.
            f'networkPolicy.apiServerCIDRs=["10.96.0.1/32","{HOST_IN_CLUSTER}/32"]',
            "--set",
            "reconcileInterval=5",
            "--set",
            # No cluster DNS here: the receivers reach Alertmanager by its address.
            f"alertmanager.url=http://{ALERTMANAGER_IN_CLUSTER}",
            "--set-file",
            f"policy={policy}",
        )
        assert install.returncode == 0, f"{install.stderr}\n{placement(cluster.core, namespace)}"
        receivers = cluster.core.list_namespaced_pod(namespace).items
        assert sorted(p.spec.node_name for p in receivers) == list(REAL)
        try:
            generated = po.generated_alertmanager_config(
                rest,
                MONITORING,
                ALERTMANAGER,
                until=lambda t: nodefence_route(yaml.safe_load(t), receiver) is not None,
                within=STEP_WITHIN,
            )
        except TimeoutError as exc:
            raise AssertionError(f"{exc}\nprometheus-operator:\n{operator.tail()}") from exc
        service_ip = cluster.core.read_namespaced_service(f"{release}-nodefence", namespace)
        alertmanager = run_alertmanager(
            procs,
            tmp_path / "alertmanager",
            generated,
            {service_host: service_ip.spec.cluster_ip},
            listen=ALERTMANAGER_IN_CLUSTER,
            netns=_netns(cluster),
        )
        eventually(
            lambda: _in_cluster(cluster, "GET", f"{alertmanager}/-/ready")[0] == 200,
            within=STEP_WITHIN,
            what="Alertmanager ready in the cluster's network",
        )
        _story_fenced_and_back(
            cluster, namespace, alertmanager, victim=victim, survivor=survivor, marker=marker
        )
        uninstall(cluster, release, namespace, tmp_path)


def _story_fenced_and_back(
    cluster: Any, namespace: str, alertmanager: str, *, victim: str, survivor: str, marker: str
) -> None:
    """The story's outage, from the StatefulSet placed on ``victim`` to its verified unfence."""
    apps = client.AppsV1Api(cluster.api)
    receivers = cluster.core.list_namespaced_pod(namespace).items
    cluster.core.patch_node(survivor, {"spec": {"unschedulable": True}})
    apps.create_namespaced_stateful_set(NAMESPACE, _statefulset("story", marker))
    eventually(
        lambda: running_on(cluster.core, "story-0") == victim, within=STEP_WITHIN, what="story-0"
    )
    cluster.core.patch_node(survivor, {"spec": {"unschedulable": False}})
    volume = Volume(cluster, "data-story-0")
    eventually(lambda: volume.attached() == {victim: True}, within=STEP_WITHIN, what="attached")
    fenced_before = nodefence_events(cluster, victim, "NodeFenced")
    boot = cluster.core.read_node(victim).status.node_info.boot_id
    on_victim = next(p.metadata.name for p in receivers if p.spec.node_name == victim)
    on_survivor = next(p.metadata.name for p in receivers if p.spec.node_name == survivor)

    assert cluster.control(victim, "down")["kubelet"] == "down"
    assert set(containers(marker).values()) == {victim}
    eventually(lambda: cluster.ready(victim) == "Unknown", within=STEP_WITHIN, what="NotReady")
    written = volume.read("alive")
    eventually(lambda: volume.read("alive") != written, within=STEP_WITHIN, what="still writing")
    # As the alert fires 15 minutes later in a cluster: once the Service no longer sends to the
    # receiver on the dead node (the node controller marked its pod not ready).
    eventually(
        lambda: _ready_endpoints(cluster, namespace) == {on_survivor},
        within=STEP_WITHIN,
        what="the Service's endpoints without the dead node's receiver",
    )
    started = datetime.now(UTC) - timedelta(minutes=15)
    alert = node_alert(victim, starts_at=started)
    code, raw = _in_cluster(
        cluster,
        "POST",
        f"{alertmanager}/api/v2/alerts",
        [
            {
                "labels": alert["labels"],
                "annotations": alert["annotations"],
                "startsAt": started.isoformat(),
            }
        ],
    )
    assert code == 200, raw
    try:
        eventually(
            lambda: oos_taints(cluster.core.read_node(victim)),
            within=STEP_WITHIN + 60,
            interval=1.0,
            what=f"{victim} fenced by the receivers",
        )
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n{_story(cluster, victim, namespace)}") from exc
    assert power_state(cluster, victim) == "Off"
    # The alert decided, at the receiver on the live node, which claimed the fence; the one on
    # the victim never does.
    fenced_on_alert = [
        d
        for d in _decisions(cluster, namespace, on_survivor)
        if d.get("node") == victim and d.get("alertname") == "KubeNodeNotReady" and d.get("actions")
    ]
    assert fenced_on_alert, _story(cluster, victim, namespace)
    assert fenced_on_alert[0]["status"] == "firing", fenced_on_alert[0]
    assert not [d for d in _decisions(cluster, namespace, on_victim) if d.get("actions")]
    record = cluster.core.read_namespaced_config_map("nodefence-fences", namespace).data
    assert json.loads(record[f"fence.{victim}"])["claimedBy"].startswith(on_survivor + "/")
    delivered = _in_cluster(cluster, "GET", f"{alertmanager}/metrics")[1]
    assert re.search(
        r'alertmanager_notifications_total\{integration="webhook"[^}]*\} [1-9]', delivered
    )
    assert not re.search(
        r'alertmanager_notifications_failed_total\{integration="webhook"[^}]*\} [1-9]', delivered
    )

    eventually(
        lambda: running_on(cluster.core, "story-0") == survivor, within=STEP_WITHIN, what="moved"
    )
    assert set(containers(marker).values()) == {survivor}
    eventually(lambda: volume.attached() == {survivor: True}, within=STEP_WITHIN, what="moved")
    assert (volume.read("born-on"), volume.read("runs-on")) == (victim, survivor)
    # What an operator reads in kubectl describe node: nodefence's own Event.
    eventually(
        lambda: nodefence_events(cluster, victim, "NodeFenced") > fenced_before,
        within=STEP_WITHIN,
        what="the NodeFenced Event",
    )

    power_on(cluster, victim)
    eventually(lambda: cluster.ready(victim) == "True", within=STEP_WITHIN, what="back")
    assert cluster.core.read_node(victim).status.node_info.boot_id != boot
    # The kubelet of the new boot removes the containers of the pod that left (dead since the
    # power-off): none of story-0 is left in the machine's containerd.
    eventually(
        lambda: "story-0" not in _containerd_pods(cluster, victim),
        within=STEP_WITHIN,
        interval=2.0,
        what="the old containers removed",
    )
    eventually(
        lambda: not oos_taints(cluster.core.read_node(victim)),
        within=STEP_WITHIN,
        interval=1.0,
        what=f"{victim} unfenced by the receivers",
    )
    assert volume.attached() == {survivor: True}
    apps.delete_namespaced_stateful_set("story", NAMESPACE)
    volume.delete()


def _ready_endpoints(cluster: Any, namespace: str) -> set[str]:
    """The pods the chart's Service sends to: its EndpointSlices' ready endpoints."""
    slices = client.DiscoveryV1Api(cluster.api).list_namespaced_endpoint_slice(namespace).items
    return {
        e.target_ref.name
        for s in slices
        for e in s.endpoints or []
        if e.conditions and e.conditions.ready and e.target_ref is not None
    }


def _decisions(cluster: Any, namespace: str, pod: str) -> list[dict[str, Any]]:
    """The decisions a receiver logged, read from its machine's pod log (which outlives a dead
    kubelet and a powered-off machine, when ``kubectl logs`` answers an error)."""
    run = _run_directory(cluster.process.popen.pid)
    found = []
    for log in run.glob(f"machines/*/var-log/pods/{namespace}_{pod}_*/*/*.log"):
        for line in log.read_text(errors="replace").splitlines():
            # CRI log lines: time, stream, tag, then the line the container wrote.
            parts = line.split(" ", 3)
            if len(parts) == 4 and parts[3].startswith("{"):
                entry = json.loads(parts[3])
                if entry.get("event") == "decision":
                    found.append(entry)
    return found


def _containerd_pods(cluster: Any, node: str) -> set[str]:
    """The pods whose containers the machine's containerd still holds (running or dead)."""
    run = _run_directory(cluster.process.popen.pid)
    listed = subprocess.run(
        [
            "ctr",
            f"--address={run / 'machines' / node / 'containerd.sock'}",
            "--namespace=k8s.io",
            "containers",
            "list",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    pods = set()
    for container in listed:
        info = subprocess.run(
            [
                "ctr",
                f"--address={run / 'machines' / node / 'containerd.sock'}",
                "--namespace=k8s.io",
                "containers",
                "info",
                container,
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        if info.returncode == 0:
            labels = json.loads(info.stdout).get("Labels") or {}
            pods.add(labels.get("io.kubernetes.pod.name", ""))
    return pods


IN_CLUSTER_HTTP = """
import json, sys, urllib.request as u, urllib.error as e
method, url, body = sys.argv[1], sys.argv[2], sys.argv[3]
request = u.Request(url, method=method, data=body.encode() if body else None,
                    headers={"Content-Type": "application/json"})
try:
    with u.urlopen(request, timeout=10) as answer:
        code, raw = answer.status, answer.read()
except e.HTTPError as exc:
    code, raw = exc.code, exc.read()
except OSError as exc:
    code, raw = 0, str(exc).encode()
sys.stdout.write(json.dumps([code, raw.decode(errors="replace")]))
"""


def _in_cluster(cluster: Any, method: str, url: str, body: Any = None) -> tuple[int, str]:
    """An HTTP request from inside the cluster's network (where Alertmanager runs)."""
    done = subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            _netns(cluster),
            sys.executable,
            "-c",
            IN_CLUSTER_HTTP,
            method,
            url,
            "" if body is None else json.dumps(body),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    code, raw = json.loads(done.stdout)
    return int(code), str(raw)


def _story(cluster: Any, node: str, namespace: str) -> str:
    """What a failed wait for the receivers saw: the Node's Events and the tail of each
    receiver's log, read from its machine's pod logs (which outlive a dead kubelet and a
    powered-off machine, when ``kubectl logs`` answers an error)."""
    events = cluster.core.list_event_for_all_namespaces(
        field_selector=f"involvedObject.kind=Node,involvedObject.name={node}"
    ).items
    lines = [f"event {e.reason}: {e.message}" for e in events if e.source.component == "nodefence"]
    run = _run_directory(cluster.process.popen.pid)
    for log in sorted(run.glob(f"machines/*/var-log/pods/{namespace}_*/*/*.log")):
        tail = log.read_text(errors="replace").splitlines()[-40:]
        lines += [f"--- {log.relative_to(run)}", *tail]
    return "\n".join(lines)


def _inside(cluster: Any) -> str:
    """The control surface's address for pods on real nodes, as ``simulate`` printed it."""
    said = cluster.process.output()
    found = re.search(r"pods on real nodes reach it at (http://[\d.]+:\d+)", said)
    assert found is not None, said[-2000:]
    return found.group(1)


def _statefulset(name: str, marker: str) -> dict[str, Any]:
    """One replica on a real node with a volume of the run's CSI driver: the pod writes, once,
    the node it was born on, at every start the node it runs on, and every second the time
    (from its container, which outlives a dead kubelet)."""
    script = (
        '[ -f /data/born-on ] || echo "$NODE" > /data/born-on; echo "$NODE" > /data/runs-on; '
        f"while true; do date > /data/alive; sleep 1; done # {marker}"
    )
    container = {
        **busybox("main", marker),
        "command": ["sh", "-c", script],
        "env": [{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 5,
                    "nodeSelector": {"sim.nodefence.io/kubelet": "real"},
                    "containers": [container],
                },
            },
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "storageClassName": STORAGE_CLASS,
                        "resources": {"requests": {"storage": "1Mi"}},
                    },
                }
            ],
        },
    }


class Volume:
    """The CSI volume of a StatefulSet pod's claim: its VolumeAttachments (made by the
    attach-detach controller, marked attached by the real external-attacher) and its data, in
    the driver's directory of the run."""

    def __init__(self, cluster: Any, claim: str) -> None:
        self.cluster = cluster
        bound = eventually(
            lambda: (
                cluster.core.read_namespaced_persistent_volume_claim(
                    claim, NAMESPACE
                ).spec.volume_name
            ),
            within=STEP_WITHIN,
            what=f"{claim} provisioned",
        )
        self.claim, self.pv = claim, str(bound)
        volume = cluster.core.read_persistent_volume(self.pv)
        assert volume.spec.csi.driver == DRIVER, volume.spec.csi
        run = _run_directory(cluster.process.popen.pid)
        self.data = run / "csi" / "volumes" / volume.spec.csi.volume_handle

    def attached(self) -> dict[str, bool]:
        """node -> whether the attacher reported the volume attached there."""
        listed = client.StorageV1Api(self.cluster.api).list_volume_attachment().items
        return {
            a.spec.node_name: bool(a.status and a.status.attached)
            for a in listed
            if a.spec.source.persistent_volume_name == self.pv
        }

    def read(self, name: str) -> str:
        try:
            return (self.data / name).read_text().strip()
        except FileNotFoundError:
            return ""

    def delete(self) -> None:
        self.cluster.core.delete_namespaced_persistent_volume_claim(self.claim, NAMESPACE)

    def mounted_in(self, node: str) -> list[str]:
        """Where the volume's data is mounted in the machine of ``node`` (its kubelet's staging
        mount and the pod's), read from the mount table of that machine's CSI node plugin;
        empty while the machine is off."""
        for proc in Path("/proc").iterdir():
            try:
                cmdline = (proc / "cmdline").read_bytes().split(b"\0")
                if b"node" not in cmdline or f"--node-id={node}".encode() not in cmdline:
                    continue
                table = (proc / "mountinfo").read_text().splitlines()
            except OSError:
                continue
            # A bind mount's root is the data directory, from the root of its file system.
            suffix = f"/csi/volumes/{self.data.name}"
            return [line.split()[4] for line in table if line.split()[3].endswith(suffix)]
        return []


def uninstall(cluster: Any, release: str, namespace: str, tmp_path: Path) -> None:
    """``helm uninstall --wait``: the release's pods gone before the next test places its own."""
    helm(
        "uninstall",
        release,
        "--namespace",
        namespace,
        "--wait",
        home=tmp_path / "helm",
        timeout=300,
        KUBECONFIG=str(cluster.kubeconfig),
    )


def install_on_real_nodes(
    cluster: Any, image: str, release: str, namespace: str, tmp_path: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    """``helm install --wait`` of the chart with the built ``image`` on the real nodes only."""
    repository, tag = image.rsplit(":", 1)
    return helm(
        "install",
        release,
        str(CHART),
        "--namespace",
        namespace,
        "--set",
        f"image.repository={repository}",
        "--set",
        f"image.tag={tag}",
        "--set",
        "image.pullPolicy=Never",
        "--set-string",
        "nodeSelector.sim\\.nodefence\\.io/kubelet=real",
        *extra,
        "--wait",
        "--timeout",
        "5m",
        home=tmp_path / "helm",
        timeout=420,
        check=False,
        KUBECONFIG=str(cluster.kubeconfig),
    )


def _status(pid: int) -> dict[str, str]:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


def test_pods_reach_a_service_through_kube_proxy(cluster: Any) -> None:
    """kube-proxy's rules in the cluster's network namespace: a ClusterIP Service in front of an
    HTTP server on real01 answers a pod on real02, a pod on real01 itself (the reply of a pod on
    the same bridge comes back through the namespace's routing only because kube-proxy
    masquerades it: no br_netfilter here) and a process of the namespace, which also reaches
    the API server through the ``kubernetes`` Service."""
    server, marker = "real01", f"nodefence-test-{secrets.token_hex(6)}"
    name = "kube-proxy-web"
    page = f"served by {server} for {marker}"
    httpd = {
        **busybox("httpd", marker),
        "command": [
            "sh",
            "-c",
            f'mkdir /tmp/www && echo "{page}" > /tmp/www/index.html'
            " && httpd -f -p 8080 -h /tmp/www",
        ],
        "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
    }
    cluster.core.create_namespaced_pod(
        NAMESPACE,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": name}},
            "spec": {"nodeName": server, "containers": [httpd]},
        },
    )
    service = cluster.core.create_namespaced_service(
        NAMESPACE,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name},
            "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": 8080}]},
        },
    )
    url = f"http://{service.spec.cluster_ip}/"
    eventually(lambda: running_on(cluster.core, name) == server, within=STEP_WITHIN, what="httpd")

    # What each client fetched is its termination message, which the API returns (the API
    # server reaches no kubelet for its logs). Busybox's wget -T crashes: a retry loop instead.
    fetch = (
        "for attempt in $(seq 30); do"
        f" wget -qO- {url} > /dev/termination-log 2>&1 && exit 0; sleep 1; done; exit 1"
    )
    clients = {node: f"kube-proxy-client-{node}" for node in REAL}
    for node, client_name in clients.items():
        cluster.core.create_namespaced_pod(
            NAMESPACE,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": client_name},
                "spec": {
                    "nodeName": node,
                    "restartPolicy": "Never",
                    "containers": [{**busybox("wget", marker), "command": ["sh", "-c", fetch]}],
                },
            },
        )

    def finished(pod_name: str) -> client.V1Pod | None:
        pod = cluster.core.read_namespaced_pod(pod_name, NAMESPACE)
        return pod if pod.status.phase in ("Succeeded", "Failed") else None

    for node, client_name in clients.items():
        pod = eventually(
            lambda client_name=client_name: finished(client_name),
            within=STEP_WITHIN,
            what=f"the client on {node} done",
        )
        terminated = pod.status.container_statuses[0].state.terminated
        assert (pod.status.phase, (terminated.message or "").strip()) == ("Succeeded", page), (
            node,
            terminated,
        )
        assert pod.status.pod_ip.startswith(f"10.201.{REAL.index(node) + 1}.")

    # A process of the namespace (not a pod): the Service, and the API server's readyz through
    # the kubernetes Service with the run's CA and token.
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    inside = subprocess.run(
        ["ip", "netns", "exec", _netns(cluster), sys.executable, "-c", IN_NETNS, url],
        env={
            **os.environ,
            "CA": config["clusters"][0]["cluster"]["certificate-authority-data"],
            "TOKEN": config["users"][0]["user"]["token"],
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert inside.returncode == 0, inside.stderr
    assert inside.stdout.splitlines() == [page, "ok"]

    for pod_name in [name, *clients.values()]:
        cluster.core.delete_namespaced_pod(pod_name, NAMESPACE, grace_period_seconds=0)
    cluster.core.delete_namespaced_service(name, NAMESPACE)


IN_NETNS = """
import base64, os, ssl, sys, urllib.request as u
print(u.urlopen(sys.argv[1], timeout=10).read().decode().strip())
context = ssl.create_default_context(cadata=base64.b64decode(os.environ["CA"]).decode())
token = {"Authorization": "Bearer " + os.environ["TOKEN"]}
readyz = u.Request("https://10.96.0.1/readyz", headers=token)
print(u.urlopen(readyz, timeout=10, context=context).read().decode().strip())
"""


def _netns(cluster: Any) -> str:
    """The cluster's network namespace: the backend's, named after its PID."""
    return f"nodefence-sim-{cluster.process.popen.pid}"


def _kube_proxies(workdir: Path) -> list[int]:
    """The PIDs of the run's kube-proxy (its configuration is in the run directory)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if "proxy" in argv and f"--config={workdir}/kube-proxy.yaml" in argv:
            found.append(int(proc.name))
    return found


def test_kubectl_logs_exec_and_port_forward_reach_the_kubelets(cluster: Any) -> None:
    """The API server dials a real node's kubelet by the node's name, with its client
    certificate of the run's CA: a container's log through the API, ``kubectl exec`` into it and
    ``kubectl port-forward`` to its port, on each real node."""
    marker = f"nodefence-test-{secrets.token_hex(6)}"
    kubeconfig = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    for node in REAL:
        script = (
            f"echo {marker} on {node}; mkdir /tmp/{marker}; echo {node} > /tmp/{marker}/index.html;"
            f" exec httpd -f -p 8080 -h /tmp/{marker}"
        )
        cluster.core.create_namespaced_pod(
            NAMESPACE,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"kubectl-{node}"},
                "spec": {
                    "nodeName": node,
                    "containers": [busybox("main", marker, command=["sh", "-c", script])],
                },
            },
        )
    for node in REAL:
        pod = f"kubectl-{node}"
        eventually(
            lambda pod=pod: running_on(cluster.core, pod),
            within=STEP_WITHIN,
            what=f"{pod} Running",
        )

        def logged(pod: str = pod, node: str = node) -> bool:
            said = cluster.core.read_namespaced_pod_log(pod, NAMESPACE)
            return f"{marker} on {node}" in said

        eventually(logged, within=30, what=f"{pod}'s log read through the API server")

        executed = subprocess.run(
            ["kubectl", "exec", pod, "--", "cat", "/proc/1/cmdline"],
            env=kubeconfig,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert executed.returncode == 0, executed.stderr
        assert executed.stdout.split("\0")[:4] == ["httpd", "-f", "-p", "8080"], executed.stdout
        assert marker in executed.stdout, executed.stdout

        forward = subprocess.Popen(
            ["kubectl", "port-forward", f"pod/{pod}", ":8080"],
            env=kubeconfig,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            assert forward.stdout is not None
            said = forward.stdout.readline()
            found = re.search(r"Forwarding from 127\.0\.0\.1:(\d+) -> 8080", said)
            assert found is not None, said
            code, body = http("GET", f"http://127.0.0.1:{found.group(1)}/index.html")
            assert (code, body.decode().strip()) == (200, node), (code, body)
        finally:
            forward.terminate()
            forward.wait(timeout=30)
    for node in REAL:
        cluster.core.delete_namespaced_pod(f"kubectl-{node}", NAMESPACE, grace_period_seconds=0)


def test_stop_leaves_nothing_behind(cluster: Any) -> None:
    """The last of the module: the backend stops, and no namespace, cgroup, mount or process
    of its machines is left on this one."""
    pid = cluster.process.popen.pid
    netns = f"nodefence-sim-{pid}"
    assert netns in _namespaces()
    workdir = _run_directory(pid)
    assert len(_kube_proxies(workdir)) == 1
    cluster.process.stop(grace=60.0)
    assert netns not in _namespaces()
    assert _kube_proxies(workdir) == []
    left = [
        str(h / f"{netns}-{node}")
        for h in Path("/sys/fs/cgroup").iterdir()
        for node in REAL
        if (h / f"{netns}-{node}").exists()
    ]
    assert left == []
    assert not any(f"/{netns}-" in _cgroup(p) for p in Path("/proc").iterdir() if p.name.isdigit())
    mounts = Path("/proc/mounts").read_text()
    assert netns not in mounts
    assert str(workdir) not in mounts
    assert not workdir.exists()


def _namespaces() -> str:
    return subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, check=True
    ).stdout


def _cgroup(proc: Path) -> str:
    try:
        return (proc / "cgroup").read_text()
    except OSError:
        return ""


def _run_directory(pid: int) -> Path:
    """The backend's run directory: where its children (the API server, the machines) run."""
    for proc in Path("/proc").iterdir():
        try:
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cwd = Path(os.readlink(proc / "cwd"))
        except (OSError, ValueError, IndexError):
            continue
        if parent == pid and cwd.name.startswith("nodefence-sim-real-"):
            return cwd
    raise AssertionError(f"no child of {pid} runs in a nodefence-sim-real- directory")
