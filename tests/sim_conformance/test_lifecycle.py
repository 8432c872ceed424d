"""Lifecycle semantics of the real control plane, seen through real kubectl, on both backends
(the node's NotReady Events on the simulator only: making a node silent on the shared real
cluster would disturb the seed the realcluster tier runs on; that tier shows it for real): namespace
finalization, the 403 for content in a Terminating namespace, controllers' Events in
``kubectl describe`` and ``kubectl events``, and immutable pod fields refused with the real 422.

Verified with kubectl:
- ``kubectl delete namespace X`` with a pod and a ConfigMap inside, each held by a finalizer:
  Terminating, the pods deleted first (from 1.33), the deleter's conditions naming what is left
  until the finalizers are removed, then ``kubectl get ns X`` NotFound
- ``kubectl create -f`` into a Terminating namespace: Forbidden, "unable to create new content
  in namespace X because it is being terminated"
- ``kubectl describe node`` and ``kubectl events --for node/X`` after ``POST
  /sim/v1/nodes/X/down``: NodeNotReady from node-controller
- ``kubectl describe pod``: Scheduled from default-scheduler
- ``kubectl patch pod`` of ``spec.nodeName``: exit 1, "spec: Forbidden: pod updates may not
  change fields other than ..."
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from nodefence_sim.testing import SimulatorHandle

from .support import BACKENDS, SIM_AS_REAL, Cluster, kubectl, until

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]


def manifest(tmp_path: Path, name: str, *objects: dict[str, Any]) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text("\n".join(json.dumps(o) for o in objects))
    return str(path)


def a_pod(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": "main", "image": "docker.io/library/busybox:1.36"}]},
    }


async def namespace_json(cluster: Cluster) -> dict[str, Any]:
    code, out = await kubectl(cluster, "get", "namespace", cluster.namespace, "-o", "json")
    assert code == 0, out
    result: dict[str, Any] = json.loads(out)
    return result


HOLD = "example.com/hold"
CONDITION_TYPES = {
    "NamespaceDeletionDiscoveryFailure",
    "NamespaceDeletionGroupVersionParsingFailure",
    "NamespaceDeletionContentFailure",
    "NamespaceContentRemaining",
    "NamespaceFinalizersRemaining",
}


async def server_minor(cluster: Cluster) -> int:
    _, version = await kubectl(cluster, "version", "-o", "json")
    # raw_decode: kubectl may follow the JSON with a version-skew warning.
    served, _ = json.JSONDecoder().raw_decode(version)
    return int(served["serverVersion"]["minor"].rstrip("+"))


def conditions_of(namespace: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in namespace.get("status", {}).get("conditions", [])}


async def deletion_timestamp(cluster: Cluster, kind: str, name: str) -> str | None:
    code, out = await kubectl(cluster, "get", kind, "-n", cluster.namespace, name, "-o", "json")
    assert code == 0, out
    stamp: str | None = json.loads(out)["metadata"].get("deletionTimestamp")
    return stamp


async def release(cluster: Cluster, kind: str, name: str) -> None:
    code, out = await kubectl(
        cluster, "patch", kind, "-n", cluster.namespace, name, "--type=merge", "-p",
        '{"metadata":{"finalizers":null}}',
    )  # fmt: skip
    assert code == 0, out


@pytest.mark.parametrize("cluster", [*BACKENDS, SIM_AS_REAL], indirect=True)
async def test_delete_namespace_waits_for_its_content_then_is_gone(
    cluster: Cluster, tmp_path: Path
) -> None:
    """A pod and a ConfigMap, each held by a finalizer. From Kubernetes 1.33
    (``OrderedNamespaceDeletion``) the namespace controller deletes the pods first and touches
    nothing else while one is left, reporting every condition in its "all is well" variant;
    before, it deletes everything at once and reports both. Either way, once the pod is gone the
    conditions name the held ConfigMap, and the namespace goes when it does."""
    ns = cluster.namespace
    held = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "held", "namespace": ns, "finalizers": [HOLD]},
        "data": {"key": "value"},
    }
    pod = a_pod("p1", ns)
    pod["metadata"]["finalizers"] = [HOLD]
    # A short grace period: the real namespace controller looks again after half of it.
    pod["spec"]["terminationGracePeriodSeconds"] = 2
    code, out = await kubectl(cluster, "create", "-f", manifest(tmp_path, "c", held, pod))
    assert code == 0, out

    async def running() -> bool:
        _, got = await kubectl(cluster, "get", "pod", "-n", ns, "p1", "-o", "json")
        return bool(json.loads(got)["status"].get("phase") == "Running")

    await until(running, "p1 running")
    pods_first = await server_minor(cluster) >= 33
    code, out = await kubectl(cluster, "delete", "namespace", ns, "--wait=false")
    assert (code, out.strip()) == (0, f'namespace "{ns}" deleted')

    async def first_pass() -> bool:
        return conditions_of(await namespace_json(cluster)).keys() >= CONDITION_TYPES

    # The namespace controller writes every condition on its first pass over the namespace.
    await until(first_pass, "the namespace's deletion conditions")
    conditions = conditions_of(await namespace_json(cluster))
    assert await deletion_timestamp(cluster, "pod", "p1")
    if pods_first:
        assert {c["status"] for c in conditions.values()} == {"False"}
        assert conditions["NamespaceContentRemaining"]["message"] == (
            "All content successfully removed"
        )
        assert await deletion_timestamp(cluster, "configmap", "held") is None
    else:
        assert conditions["NamespaceContentRemaining"]["message"] == (
            "Some resources are remaining: configmaps. has 1 resource instances, pods. has 1 "
            "resource instances"
        )
        assert conditions["NamespaceFinalizersRemaining"]["message"] == (
            f"Some content in the namespace has finalizers remaining: {HOLD} in 2 resource "
            "instances"
        )
        assert await deletion_timestamp(cluster, "configmap", "held")

    code, out = await kubectl(cluster, "create", "-f", manifest(tmp_path, "late", a_pod("p2", ns)))
    assert code == 1
    assert (
        f'pods "p2" is forbidden: unable to create new content in namespace {ns} because it '
        "is being terminated"
    ) in out

    await release(cluster, "pod", "p1")

    async def only_the_held_map_is_left() -> bool:
        remaining = conditions_of(await namespace_json(cluster))["NamespaceContentRemaining"]
        return bool(
            remaining["message"]
            == "Some resources are remaining: configmaps. has 1 resource instances"
        )

    await until(only_the_held_map_is_left, "the conditions to name the held ConfigMap alone")
    current = await namespace_json(cluster)
    assert current["metadata"]["deletionTimestamp"]
    assert current["spec"]["finalizers"] == ["kubernetes"]
    assert current["status"]["phase"] == "Terminating"
    conditions = conditions_of(current)
    assert conditions["NamespaceContentRemaining"]["reason"] == "SomeResourcesRemain"
    assert conditions["NamespaceFinalizersRemaining"]["message"] == (
        f"Some content in the namespace has finalizers remaining: {HOLD} in 1 resource instances"
    )
    assert conditions["NamespaceDeletionContentFailure"]["reason"] == "ContentDeleted"
    assert await deletion_timestamp(cluster, "configmap", "held")
    code, out = await kubectl(cluster, "get", "namespace", ns)
    assert code == 0, out
    assert "Terminating" in out, out

    await release(cluster, "configmap", "held")

    async def gone() -> bool:
        code, got = await kubectl(cluster, "get", "namespace", ns)
        return code == 1 and f'namespaces "{ns}" not found' in got

    await until(gone, "the namespace to be finalized")


async def test_node_not_ready_shows_in_describe_and_events(seed: SimulatorHandle) -> None:
    async with aiohttp.ClientSession() as session:
        url = f"{seed.url}/sim/v1/nodes/control02/down"
        async with session.post(url, json={"sinceSeconds": 600}) as response:
            assert response.status == 200
    code, described = await kubectl(seed, "describe", "node", "control02")
    assert code == 0, described
    events = described[described.index("Events:") :]
    line = next(ln for ln in events.splitlines() if "NodeNotReady" in ln)
    assert line.split()[0] == "Normal"
    assert "node-controller" in line
    assert "Node control02 status is now: NodeNotReady" in line
    code, listed = await kubectl(seed, "events", "--for", "node/control02")
    assert code == 0, listed
    assert any(
        "NodeNotReady" in ln and "Node/control02" in ln and "status is now: NodeNotReady" in ln
        for ln in listed.splitlines()
    ), listed


@pytest.mark.parametrize("cluster", [*BACKENDS, SIM_AS_REAL], indirect=True)
async def test_describe_pod_shows_scheduled_and_patching_its_node_is_refused(
    cluster: Cluster, tmp_path: Path
) -> None:
    ns = cluster.namespace
    code, out = await kubectl(cluster, "create", "-f", manifest(tmp_path, "p", a_pod("probe", ns)))
    assert code == 0, out

    async def scheduled() -> bool:
        _, got = await kubectl(cluster, "describe", "pod", "-n", ns, "probe")
        return f"Successfully assigned {ns}/probe to" in got

    await until(scheduled, "the Scheduled event")
    _, described = await kubectl(cluster, "describe", "pod", "-n", ns, "probe")
    line = next(ln for ln in described.splitlines() if "Successfully assigned" in ln)
    assert line.split()[:2] == ["Normal", "Scheduled"]
    assert "default-scheduler" in line

    code, out = await kubectl(
        cluster, "patch", "pod", "-n", ns, "probe", "--type=merge", "-p",
        '{"spec":{"nodeName":"control01","restartPolicy":"Never"}}',
    )  # fmt: skip
    assert code == 1
    # The list's punctuation changed in Kubernetes 1.27; the seed says 1.24.8, the real control
    # plane is newer.
    listed = (
        "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
        "`spec.tolerations` (only additions to existing tolerations),"
        if await server_minor(cluster) >= 27
        else "`spec.containers[*].image`, `spec.initContainers[*].image`, "
        "`spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to existing "
        "tolerations) or "
    )
    assert out.startswith(
        'The Pod "probe" is invalid: spec: Forbidden: pod updates may not change fields other '
        f"than {listed}`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it "
        "was previously negative)"
    ), out
    code, out = await kubectl(
        cluster, "patch", "pod", "-n", ns, "probe", "-p",
        '{"spec":{"containers":[{"name":"main","image":"docker.io/library/busybox:1.37"}]}}',
    )  # fmt: skip
    assert code == 0, out


async def test_create_without_an_image_is_invalid(cluster: Cluster, tmp_path: Path) -> None:
    pod = a_pod("noimage", cluster.namespace)
    pod["spec"]["containers"] = [{"name": "main"}]
    code, out = await kubectl(cluster, "create", "-f", manifest(tmp_path, "bad", pod))
    assert code == 1
    assert 'The Pod "noimage" is invalid: spec.containers[0].image: Required value' in out
