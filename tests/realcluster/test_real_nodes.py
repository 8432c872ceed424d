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
from collections.abc import Iterator
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

from .safety_support import bmc, nodefence_events, power_on
from .test_real_helm import placement
from .test_seed_story import oos_taints, post_alert, power_state, serve

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(900)]

REAL = ("real01", "real02")
KWOK = ("compute01", "compute02", "control01", "control02", "control03")
NAMESPACE = "default"
STEP_WITHIN = 180.0
CGROUP = re.compile(r"nodefence-sim-(real\d+)")
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
    boot = cluster.core.read_node(victim).status.node_info.boot_id
    nodefence = serve(procs, cluster, POLICY)

    assert cluster.control(victim, "down")["kubelet"] == "down"
    eventually(lambda: cluster.ready(victim) == "Unknown", within=STEP_WITHIN, what="NotReady")
    assert set(containers(marker).values()) == {victim}, "the container outlives its kubelet"

    def fenced() -> bool:
        decision = post_alert(nodefence, victim, "firing")
        return decision["verdict"] == "fence" and bool(oos_taints(cluster.core.read_node(victim)))

    eventually(fenced, within=STEP_WITHIN, interval=2.0, what=f"{victim} fenced")
    assert power_state(cluster, victim) == "Off"
    eventually(lambda: running_on(cluster.core, "db-0") == other, within=STEP_WITHIN, what="moved")
    # Only the new node runs the workload: the old container died with its machine.
    assert set(containers(marker).values()) == {other}

    power_on(cluster, victim)
    eventually(lambda: cluster.ready(victim) == "True", within=STEP_WITHIN, what="back")
    assert cluster.core.read_node(victim).status.node_info.boot_id != boot

    def unfenced() -> bool:
        post_alert(nodefence, victim, "resolved")
        return not oos_taints(cluster.core.read_node(victim))

    eventually(unfenced, within=STEP_WITHIN, interval=2.0, what=f"{victim} unfenced")
    assert set(containers(marker).values()) == {other}
    apps.delete_namespaced_stateful_set("db", NAMESPACE)


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


STORY_POLICY = {
    # No Alertmanager answers in this cluster: the receivers' fallback decides, 10 s after the
    # node turned NotReady without an alert. The claim timeout is the shipped 300 s: the replica
    # on the dying node, still running, leaves the fence to the other (guard own-node), so no
    # claim of a replica its own power-off stopped is waited out.
    "cluster": {"storm_cooldown_seconds": 0, "fallback_after_seconds": 10},
    "rules": [POLICY["rules"][0]],
}


@pytest.mark.invariant("S10")
def test_receivers_on_real_nodes_fence_the_node_one_of_them_ran_on(
    cluster: Any, product_image: tuple[str, Path], tmp_path: Path
) -> None:
    """The chart's two receivers run the built image on the two real nodes, with the BMC
    inventory as a Secret file and a policy; real02, which runs one receiver and the
    StatefulSet's pod, loses its kubelet (its containers run on); the receiver on real01 fences
    it with no alert (the one on real02 leaves it to the other), through its BMC from inside the
    cluster: the machine is off (the receiver and the pod's container on it die), the node
    tainted, and the pod runs again on real01; powered on, the node is unfenced."""
    victim, survivor, marker = "real02", "real01", f"nodefence-test-{secrets.token_hex(6)}"
    namespace, release = "nodefence-story", "story"
    bmcs = _inside(cluster)
    inventory = yaml.safe_load(Path(cluster.inventory).read_text())
    for entry in inventory["nodes"].values():
        entry["address"] = bmcs
    cluster.core.create_namespace({"metadata": {"name": namespace}})
    cluster.core.create_namespaced_secret(
        namespace,
        {
            "metadata": {"name": "nodefence-secrets"},
            "stringData": {"NODEFENCE_ALERT_TOKEN": secrets.token_urlsafe(16)},
        },
    )
    cluster.core.create_namespaced_secret(
        namespace,
        {
            "metadata": {"name": "nodefence-bmc-inventory"},
            "stringData": {"inventory.yaml": yaml.safe_dump(inventory)},
        },
    )
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(STORY_POLICY))
    install = install_on_real_nodes(
        cluster,
        product_image[0],
        release,
        namespace,
        tmp_path,
        "--set",
        "bmcInventory.enabled=true",
        "--set-json",
        f'networkPolicy.bmcNetworks=["{bmcs.split("//")[1].split(":")[0]}/32"]',
        "--set-json",
        # The kubernetes Service's address, and the API server's own.
        'networkPolicy.apiServerCIDRs=["10.96.0.1/32","127.0.0.1/32"]',
        "--set",
        "reconcileInterval=5",
        "--set",
        "alertmanager.url=http://alertmanager.invalid:9093",
        "--set-file",
        f"policy={policy}",
    )
    assert install.returncode == 0, f"{install.stderr}\n{placement(cluster.core, namespace)}"
    receivers = cluster.core.list_namespaced_pod(namespace).items
    assert sorted(p.spec.node_name for p in receivers) == list(REAL)

    apps = client.AppsV1Api(cluster.api)
    cluster.core.patch_node(survivor, {"spec": {"unschedulable": True}})
    apps.create_namespaced_stateful_set(NAMESPACE, _statefulset("story", marker))
    eventually(
        lambda: running_on(cluster.core, "story-0") == victim, within=STEP_WITHIN, what="story-0"
    )
    cluster.core.patch_node(survivor, {"spec": {"unschedulable": False}})
    fenced_before = nodefence_events(cluster, victim, "NodeFenced")

    assert cluster.control(victim, "down")["kubelet"] == "down"
    assert set(containers(marker).values()) == {victim}
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
    # The replica on the live node claimed it: the one on the victim never does.
    on_survivor = next(p.metadata.name for p in receivers if p.spec.node_name == survivor)
    record = cluster.core.read_namespaced_config_map("nodefence-fences", namespace).data
    assert json.loads(record[f"fence.{victim}"])["claimedBy"].startswith(on_survivor + "/")
    eventually(
        lambda: running_on(cluster.core, "story-0") == survivor, within=STEP_WITHIN, what="moved"
    )
    assert set(containers(marker).values()) == {survivor}
    # What an operator reads in kubectl describe node: nodefence's own Event.
    eventually(
        lambda: nodefence_events(cluster, victim, "NodeFenced") > fenced_before,
        within=STEP_WITHIN,
        what="the NodeFenced Event",
    )

    power_on(cluster, victim)
    eventually(lambda: cluster.ready(victim) == "True", within=STEP_WITHIN, what="back")
    eventually(
        lambda: not oos_taints(cluster.core.read_node(victim)),
        within=STEP_WITHIN,
        interval=1.0,
        what=f"{victim} unfenced by the receivers",
    )
    apps.delete_namespaced_stateful_set("story", NAMESPACE)
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


def _story(cluster: Any, node: str, namespace: str) -> str:
    """What a failed wait for the receivers saw: the Node's Events and the tail of each
    receiver's log, read from its machine's pod logs (the API server cannot reach a kubelet)."""
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
                    "containers": [busybox("main", marker)],
                },
            },
        },
    }


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


def test_stop_leaves_nothing_behind(cluster: Any) -> None:
    """The last of the module: the backend stops, and no namespace, cgroup, mount or process
    of its machines is left on this one."""
    pid = cluster.process.popen.pid
    netns = f"nodefence-sim-{pid}"
    assert netns in _namespaces()
    workdir = _run_directory(pid)
    cluster.process.stop(grace=60.0)
    assert netns not in _namespaces()
    left = [
        str(h / f"nodefence-sim-{node}")
        for h in Path("/sys/fs/cgroup").iterdir()
        for node in REAL
        if (h / f"nodefence-sim-{node}").exists()
    ]
    assert left == []
    assert not any(CGROUP.search(_cgroup(p)) for p in Path("/proc").iterdir() if p.name.isdigit())
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
