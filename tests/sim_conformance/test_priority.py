"""PriorityClasses and pod priority on both backends, through real kubectl: the system classes
every cluster has, a class of the test's own with its printed columns, and the Priority
admission plugin giving a pod its class's value, or refusing a class that does not exist.

Verified with kubectl:
- ``kubectl create -f`` of a PriorityClass, then ``kubectl get priorityclass X``: ``NAME VALUE
  GLOBAL-DEFAULT AGE PREEMPTIONPOLICY``, the policy defaulted to ``PreemptLowerPriority``
- ``kubectl get priorityclass system-node-critical system-cluster-critical -o json``
- a pod naming the class: ``spec.priority`` is the class's value; a pod naming none: 0
- a pod naming a missing class: ``Error from server (Forbidden): ... no PriorityClass with name
  X was found``
- a class above 1000000000, or a change of a class's value: the 422 ``value: Forbidden``
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from .support import Cluster, kubectl

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]


def write(tmp_path: Path, name: str, obj: dict[str, Any]) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(obj))
    return str(path)


def a_pod(name: str, namespace: str, priority_class: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "docker.io/library/busybox:1.36"}]
    }
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


@pytest.fixture
async def priority_class(cluster: Cluster, tmp_path: Path) -> AsyncIterator[str]:
    """A class of the test's own (cluster-wide, so deleted afterwards on the shared cluster)."""
    name = f"conformance-{uuid.uuid4().hex[:8]}"
    obj = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": 1000,
        "description": "conformance",
    }
    code, out = await kubectl(cluster, "create", "-f", write(tmp_path, "pc", obj))
    assert (code, out.strip()) == (0, f"priorityclass.scheduling.k8s.io/{name} created")
    try:
        yield name
    finally:
        await kubectl(cluster, "delete", "priorityclass", name, "--ignore-not-found")


async def test_the_system_classes_are_there(cluster: Cluster) -> None:
    code, out = await kubectl(
        cluster, "get", "priorityclass", "system-node-critical", "system-cluster-critical",
        "-o", "json",
    )  # fmt: skip
    assert code == 0, out
    classes = {o["metadata"]["name"]: o for o in json.loads(out)["items"]}
    assert classes["system-node-critical"]["value"] == 2000001000
    assert classes["system-cluster-critical"]["value"] == 2000000000
    assert classes["system-cluster-critical"]["description"] == (
        "Used for system critical pods that must run in the cluster, but can be moved to "
        "another node if necessary."
    )
    assert {o["preemptionPolicy"] for o in classes.values()} == {"PreemptLowerPriority"}
    assert not any(o.get("globalDefault") for o in classes.values())


async def test_a_class_is_printed_and_gives_its_pods_their_priority(
    cluster: Cluster, priority_class: str, tmp_path: Path
) -> None:
    code, out = await kubectl(cluster, "get", "priorityclass", priority_class)
    assert code == 0, out
    header, row = (line.split() for line in out.splitlines())
    assert header == ["NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"]
    assert row[:3] == [priority_class, "1000", "false"]
    assert row[-1] == "PreemptLowerPriority"

    ns = cluster.namespace
    for name, pc in (("ranked", priority_class), ("plain", None)):
        code, out = await kubectl(
            cluster, "create", "-f", write(tmp_path, name, a_pod(name, ns, pc))
        )
        assert code == 0, out
    pods = {}
    for name in ("ranked", "plain"):
        code, out = await kubectl(cluster, "get", "pod", "-n", ns, name, "-o", "json")
        assert code == 0, out
        pods[name] = json.loads(out)["spec"]
    assert pods["ranked"]["priority"] == 1000
    assert pods["ranked"]["priorityClassName"] == priority_class
    assert pods["plain"]["priority"] == 0
    assert "priorityClassName" not in pods["plain"]
    assert {s["preemptionPolicy"] for s in pods.values()} == {"PreemptLowerPriority"}


async def test_a_pod_naming_a_missing_class_is_forbidden(cluster: Cluster, tmp_path: Path) -> None:
    missing = f"missing-{uuid.uuid4().hex[:8]}"
    pod = a_pod("orphan", cluster.namespace, missing)
    code, out = await kubectl(cluster, "create", "-f", write(tmp_path, "orphan", pod))
    assert code == 1
    assert (
        f'Error from server (Forbidden): error when creating "{tmp_path / "orphan.json"}": '
        f'pods "orphan" is forbidden: no PriorityClass with name {missing} was found'
    ) in out, out
    code, out = await kubectl(cluster, "get", "pod", "-n", cluster.namespace, "orphan")
    assert code == 1
    assert 'pods "orphan" not found' in out, out


async def test_a_class_value_is_bounded_and_fixed(
    cluster: Cluster, priority_class: str, tmp_path: Path
) -> None:
    too_high = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": f"{priority_class}-high"},
        "value": 1_000_000_001,
    }
    code, out = await kubectl(cluster, "create", "-f", write(tmp_path, "high", too_high))
    assert code == 1
    assert (
        f'The PriorityClass "{priority_class}-high" is invalid: value: Forbidden: maximum allowed '
        "value of a user defined priority is 1000000000"
    ) in out, out
    code, out = await kubectl(
        cluster, "patch", "priorityclass", priority_class, "--type=merge", "-p", '{"value":2000}'
    )
    assert code == 1
    assert (
        f'The PriorityClass "{priority_class}" is invalid: value: Forbidden: may not be changed '
        "in an update."
    ) in out, out
    code, out = await kubectl(cluster, "get", "priorityclass", priority_class, "-o", "json")
    assert code == 0, out
    assert json.loads(out)["value"] == 1000
