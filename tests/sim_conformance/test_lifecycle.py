"""Lifecycle semantics of the real control plane, seen through real kubectl 1.32: namespace
finalization, the 403 for content in a Terminating namespace, controllers' Events in
``kubectl describe`` and ``kubectl events``, and immutable pod fields refused with the real 422.

Verified with kubectl:
- ``kubectl delete namespace X`` with a pod and a held ConfigMap inside: Terminating with the
  deleter's conditions until the finalizer is removed, then ``kubectl get ns X`` NotFound
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

from .support import kubectl, until

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]

NS = "scratch"


def manifest(tmp_path: Path, name: str, *objects: dict[str, Any]) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text("\n".join(json.dumps(o) for o in objects))
    return str(path)


def a_pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"containers": [{"name": "main", "image": "docker.io/library/busybox:1.36"}]},
    }


async def namespace_json(handle: SimulatorHandle) -> dict[str, Any]:
    code, out = await kubectl(handle, "get", "namespace", NS, "-o", "json")
    assert code == 0, out
    result: dict[str, Any] = json.loads(out)
    return result


async def test_delete_namespace_waits_for_its_content_then_is_gone(
    seed: SimulatorHandle, tmp_path: Path
) -> None:
    held = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "held", "namespace": NS, "finalizers": ["example.com/hold"]},
        "data": {"key": "value"},
    }
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}
    code, out = await kubectl(seed, "create", "-f", manifest(tmp_path, "ns", namespace))
    assert code == 0, out
    code, out = await kubectl(seed, "create", "-f", manifest(tmp_path, "c", held, a_pod("p1")))
    assert code == 0, out

    async def running() -> bool:
        _, got = await kubectl(seed, "get", "pod", "-n", NS, "p1", "-o", "json")
        return bool(json.loads(got)["status"].get("phase") == "Running")

    await until(running, "p1 running")
    code, out = await kubectl(seed, "delete", "namespace", NS, "--wait=false")
    assert (code, out.strip()) == (0, f'namespace "{NS}" deleted')

    async def only_the_held_map_is_left() -> bool:
        _, got = await kubectl(seed, "get", "pods", "-n", NS, "-o", "name")
        return got.strip() == ""

    await until(only_the_held_map_is_left, "the pod to terminate through its kubelet")
    current = await namespace_json(seed)
    assert current["metadata"]["deletionTimestamp"]
    assert current["spec"]["finalizers"] == ["kubernetes"]
    assert current["status"]["phase"] == "Terminating"
    conditions = {c["type"]: c for c in current["status"]["conditions"]}
    assert conditions["NamespaceContentRemaining"]["message"] == (
        "Some resources are remaining: configmaps. has 1 resource instances"
    )
    assert conditions["NamespaceFinalizersRemaining"]["message"] == (
        "Some content in the namespace has finalizers remaining: example.com/hold in 1 "
        "resource instances"
    )
    assert conditions["NamespaceDeletionContentFailure"]["reason"] == "ContentDeleted"
    code, out = await kubectl(seed, "get", "namespace", NS)
    assert code == 0, out
    assert "Terminating" in out, out

    code, out = await kubectl(seed, "create", "-f", manifest(tmp_path, "late", a_pod("p2")))
    assert code == 1
    assert (
        f'pods "p2" is forbidden: unable to create new content in namespace {NS} because it '
        "is being terminated"
    ) in out

    code, out = await kubectl(
        seed, "patch", "configmap", "-n", NS, "held", "--type=merge", "-p",
        '{"metadata":{"finalizers":null}}',
    )  # fmt: skip
    assert code == 0, out

    async def gone() -> bool:
        code, got = await kubectl(seed, "get", "namespace", NS)
        return code == 1 and f'namespaces "{NS}" not found' in got

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


async def test_describe_pod_shows_scheduled_and_patching_its_node_is_refused(
    seed: SimulatorHandle, tmp_path: Path
) -> None:
    code, out = await kubectl(seed, "create", "-n", "openstack", "-f", manifest(tmp_path, "p", {
        **a_pod("probe"), "metadata": {"name": "probe", "namespace": "openstack"}
    }))  # fmt: skip
    assert code == 0, out

    async def scheduled() -> bool:
        _, got = await kubectl(seed, "describe", "pod", "-n", "openstack", "probe")
        return "Successfully assigned openstack/probe to" in got

    await until(scheduled, "the Scheduled event")
    _, described = await kubectl(seed, "describe", "pod", "-n", "openstack", "probe")
    line = next(ln for ln in described.splitlines() if "Successfully assigned" in ln)
    assert line.split()[:2] == ["Normal", "Scheduled"]
    assert "default-scheduler" in line

    code, out = await kubectl(
        seed, "patch", "pod", "-n", "openstack", "probe", "--type=merge", "-p",
        '{"spec":{"nodeName":"control01","restartPolicy":"Never"}}',
    )  # fmt: skip
    assert code == 1
    assert out.startswith(
        'The Pod "probe" is invalid: spec: Forbidden: pod updates may not change fields other '
        "than `spec.containers[*].image`, `spec.initContainers[*].image`, "
        "`spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to existing "
        "tolerations) or `spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it "
        "was previously negative)"
    ), out
    code, out = await kubectl(
        seed, "patch", "pod", "-n", "openstack", "probe", "--type=merge", "-p",
        '{"spec":{"containers":[{"name":"main","image":"docker.io/library/busybox:1.37"}]}}',
    )  # fmt: skip
    assert code == 0, out


async def test_create_without_an_image_is_invalid(seed: SimulatorHandle, tmp_path: Path) -> None:
    pod = a_pod("noimage")
    pod["metadata"]["namespace"] = "openstack"
    pod["spec"]["containers"] = [{"name": "main"}]
    code, out = await kubectl(seed, "create", "-f", manifest(tmp_path, "bad", pod))
    assert code == 1
    assert 'The Pod "noimage" is invalid: spec.containers[0].image: Required value' in out
