"""Server-side apply against the simulated seed cluster with real kubectl 1.32 and the official
``kubernetes`` Python client, each step asserting what a real cluster answers.

Verified with kubectl:
- ``kubectl apply --server-side -k deploy/overlays/deployment``: every object created, owned by
  ``kubectl`` with operation Apply; again: nothing changes (no resourceVersion moves);
  ``--dry-run=server`` stores nothing
- ``kubectl create -f`` then ``kubectl apply --server-side`` of a changed value: exit 1,
  ``Apply failed with 1 conflict: conflict with "kubectl-create" using v1: .data.key``;
  ``--force-conflicts``: applied, the ownership moves
- ``kubectl apply -f`` (client-side) then ``kubectl apply --server-side --field-manager=ops``:
  the conflict names ``kubectl-client-side-apply``; ``kubectl apply --server-side`` (manager
  ``kubectl``) takes the fields over without a conflict and rewrites the last-applied annotation
- the same value applied by a second manager: no conflict, both own it
- a field left out of the next apply is removed; one another manager also owns, or only another
  manager owns (``kubectl label``), stays
- two managers applying different containers, env entries, labels and finalizers to one object:
  each keeps its own (``k:{"name":...}``, ``v:"..."`` in managedFields)

Verified with the ``kubernetes`` client: ``CoreV1Api.patch_node_status`` (an apply to the status
subresource conflicting with the kubelet's status updates, then forced),
``CoreV1Api.patch_namespaced_config_map(...,
field_manager=, force=, _content_type="application/apply-patch+yaml")`` creating (201) and then
updating, its 409 with ``FieldManagerConflict`` causes, and ``ApiClient.call_api`` of an apply
without ``fieldManager``: 422 ``PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required
value: is required for apply patch``.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from nodefence_sim.resources import CONFIGMAPS
from nodefence_sim.testing import SimulatorHandle

from .support import api, kubectl

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]

NS = "openstack"
APPLY = "application/apply-patch+yaml"
# The Deployment overlay without the admission policies, as the seed (Kubernetes 1.24.8) takes it.
OVERLAY = "tests/sim_conformance/overlay-before-1.30"
KINDS = (
    "namespace,serviceaccount,role,clusterrole,rolebinding,clusterrolebinding,configmap,"
    "service,deployment,cronjob,poddisruptionbudget,networkpolicy,priorityclass"
)
# Kinds whose status a controller of the simulator writes: their resourceVersion may move
# between two reads for reasons of its own.
STATUS_WRITTEN = frozenset({"Deployment", "PodDisruptionBudget"})


def configmap(name: str, data: dict[str, str], **meta: Any) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": NS, **meta},
            "data": data,
        }
    )


async def get(handle: SimulatorHandle, *args: str) -> Any:
    code, out = await kubectl(handle, "get", *args, "-o", "json", "--show-managed-fields")
    assert code == 0, out
    return json.loads(out)


Key = tuple[str, str, str]  # kind, namespace ("" when cluster-wide), name


def rendered_keys(rendered: str) -> list[Key]:
    """The objects ``kubectl kustomize`` rendered."""
    return [
        (doc["kind"], doc["metadata"].get("namespace", ""), doc["metadata"]["name"])
        for doc in yaml.safe_load_all(rendered)
        if doc
    ]


def keyed(listing: Any) -> dict[Key, Any]:
    return {
        (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o
        for o in listing["items"]
    }


def entries(obj: Any) -> dict[tuple[str, str], Any]:
    """managedFields by (manager, operation)."""
    return {(e["manager"], e["operation"]): e for e in obj["metadata"]["managedFields"]}


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


async def test_overlay_server_side_apply_creates_everything_once(seed: SimulatorHandle) -> None:
    code, out = await kubectl(seed, "apply", "--server-side", "-k", OVERLAY)
    assert code == 0, out
    assert "deployment.apps/nodefence serverside-applied" in out
    code, rendered = await kubectl(seed, "kustomize", OVERLAY)
    assert code == 0, rendered
    made = rendered_keys(rendered)
    found = keyed(await get(seed, "--all-namespaces", KINDS))
    for key in made:
        obj = found[key]
        apply_entry = entries(obj)[("kubectl", "Apply")]
        assert apply_entry["fieldsType"] == "FieldsV1"
        assert apply_entry["apiVersion"] == obj["apiVersion"]
    deployment = found[("Deployment", "nodefence", "nodefence")]
    owned = entries(deployment)[("kubectl", "Apply")]["fieldsV1"]
    container = owned["f:spec"]["f:template"]["f:spec"]["f:containers"]['k:{"name":"nodefence"}']
    assert container["."] == {}
    assert 'k:{"containerPort":8080,"protocol":"TCP"}' in container["f:ports"]
    assert owned["f:spec"]["f:selector"] == {}
    # Defaults the server filled in are nobody's.
    assert "f:progressDeadlineSeconds" not in owned["f:spec"]

    code, again = await kubectl(seed, "apply", "--server-side", "-k", OVERLAY)
    assert code == 0, again
    after = keyed(await get(seed, "--all-namespaces", KINDS))
    for key in made:
        obj, before = after[key], found[key]
        if obj["kind"] in STATUS_WRITTEN:
            assert obj["metadata"]["generation"] == before["metadata"]["generation"]
            assert entries(obj)[("kubectl", "Apply")] == entries(before)[("kubectl", "Apply")]
        else:
            assert obj["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


async def test_server_dry_run_stores_nothing(seed: SimulatorHandle, tmp_path: Path) -> None:
    manifest = write(tmp_path, "cm.json", configmap("dry", {"key": "one"}))
    code, out = await kubectl(seed, "apply", "--server-side", "--dry-run=server", "-f", manifest)
    assert code == 0, out
    assert "configmap/dry serverside-applied (server dry run)" in out
    code, out = await kubectl(seed, "get", "configmap", "dry", "-n", NS)
    assert code == 1
    assert 'configmaps "dry" not found' in out
    code, out = await kubectl(seed, "apply", "--server-side", "-f", manifest)
    assert code == 0, out
    stored = await get(seed, "configmap", "dry", "-n", NS)
    changed = write(tmp_path, "cm2.json", configmap("dry", {"key": "two"}))
    code, out = await kubectl(seed, "apply", "--server-side", "--dry-run=server", "-f", changed)
    assert code == 0, out
    assert await get(seed, "configmap", "dry", "-n", NS) == stored


async def test_conflict_with_kubectl_create_and_force(
    seed: SimulatorHandle, tmp_path: Path
) -> None:
    original = write(tmp_path, "cm.json", configmap("cc", {"key": "one", "other": "x"}))
    code, out = await kubectl(seed, "create", "-f", original)
    assert code == 0, out
    changed = write(tmp_path, "cm2.json", configmap("cc", {"key": "two"}))
    code, out = await kubectl(seed, "apply", "--server-side", "-f", changed)
    assert code == 1
    assert 'Apply failed with 1 conflict: conflict with "kubectl-create" using v1: .data.key' in out
    assert (await get(seed, "configmap", "cc", "-n", NS))["data"]["key"] == "one"

    code, out = await kubectl(seed, "apply", "--server-side", "--force-conflicts", "-f", changed)
    assert code == 0, out
    obj = await get(seed, "configmap", "cc", "-n", NS)
    assert obj["data"] == {"key": "two", "other": "x"}
    owners = entries(obj)
    assert owners[("kubectl", "Apply")]["fieldsV1"] == {"f:data": {"f:key": {}}}
    assert owners[("kubectl-create", "Update")]["fieldsV1"]["f:data"] == {
        ".": {},
        "f:other": {},
    }


async def test_client_side_apply_then_server_side(seed: SimulatorHandle, tmp_path: Path) -> None:
    original = write(tmp_path, "cm.json", configmap("csa", {"key": "one"}))
    code, out = await kubectl(seed, "apply", "-f", original)
    assert code == 0, out
    changed = write(tmp_path, "cm2.json", configmap("csa", {"key": "two"}))
    code, out = await kubectl(seed, "apply", "--server-side", "--field-manager=ops", "-f", changed)
    assert code == 1
    assert (
        "Apply failed with 1 conflict: conflict with "
        '"kubectl-client-side-apply" using v1: .data.key' in out
    )
    # kubectl itself upgrades from client-side apply: the fields its last-applied annotation
    # still describes are taken over without a conflict, and the annotation follows.
    code, out = await kubectl(seed, "apply", "--server-side", "-f", changed)
    assert code == 0, out
    obj = await get(seed, "configmap", "csa", "-n", NS)
    assert obj["data"] == {"key": "two"}
    # kubectl then hands what client-side apply owned to its own managers and re-applies.
    owners = entries(obj)
    assert set(owners) == {("kubectl", "Apply"), ("kubectl-last-applied", "Apply")}
    assert owners[("kubectl", "Apply")]["fieldsV1"] == {"f:data": {"f:key": {}}}
    assert owners[("kubectl-last-applied", "Apply")]["fieldsV1"] == {
        "f:metadata": {"f:annotations": {"f:kubectl.kubernetes.io/last-applied-configuration": {}}}
    }
    annotation = obj["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
    assert json.loads(annotation)["data"] == {"key": "two"}


async def test_same_value_is_shared_not_a_conflict(seed: SimulatorHandle, tmp_path: Path) -> None:
    original = write(tmp_path, "cm.json", configmap("shared", {"key": "one"}))
    code, out = await kubectl(seed, "create", "-f", original)
    assert code == 0, out
    code, out = await kubectl(seed, "apply", "--server-side", "--field-manager=ops", "-f", original)
    assert code == 0, out
    owners = entries(await get(seed, "configmap", "shared", "-n", NS))
    assert "f:key" in owners[("kubectl-create", "Update")]["fieldsV1"]["f:data"]
    assert owners[("ops", "Apply")]["fieldsV1"] == {"f:data": {"f:key": {}}}


async def test_fields_left_out_are_removed_unless_owned(
    seed: SimulatorHandle, tmp_path: Path
) -> None:
    full = configmap(
        "prune", {"a": "1", "b": "2", "shared": "s"}, labels={"mine": "x", "also": "y"}
    )
    code, out = await kubectl(
        seed, "apply", "--server-side", "--field-manager=app", "-f", write(tmp_path, "a", full)
    )
    assert code == 0, out
    code, out = await kubectl(seed, "label", "configmap", "prune", "-n", NS, "theirs=z")
    assert code == 0, out
    other = configmap("prune", {"shared": "s"})
    code, out = await kubectl(
        seed, "apply", "--server-side", "--field-manager=ops", "-f", write(tmp_path, "b", other)
    )
    assert code == 0, out
    less = configmap("prune", {"a": "1"}, labels={"also": "y"})
    code, out = await kubectl(
        seed, "apply", "--server-side", "--field-manager=app", "-f", write(tmp_path, "c", less)
    )
    assert code == 0, out
    obj = await get(seed, "configmap", "prune", "-n", NS)
    assert obj["data"] == {"a": "1", "shared": "s"}
    assert obj["metadata"]["labels"] == {"also": "y", "theirs": "z"}
    assert entries(obj)[("app", "Apply")]["fieldsV1"] == {
        "f:data": {"f:a": {}},
        "f:metadata": {"f:labels": {"f:also": {}}},
    }


DEPLOYMENT_ONE = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "merge", "namespace": NS, "labels": {"one": "1"}},
    "spec": {
        "replicas": 1,
        "selector": {"matchLabels": {"app": "merge"}},
        "template": {
            "metadata": {"labels": {"app": "merge"}},
            "spec": {
                "containers": [
                    {"name": "a", "image": "a:1", "env": [{"name": "FROM_ONE", "value": "1"}]}
                ]
            },
        },
    },
}
DEPLOYMENT_TWO = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "merge", "namespace": NS, "labels": {"two": "2"}},
    "spec": {
        "template": {
            "spec": {
                "containers": [
                    {"name": "a", "env": [{"name": "FROM_TWO", "value": "2"}]},
                    {"name": "b", "image": "b:1"},
                ]
            }
        }
    },
}


async def test_two_managers_merge_lists_and_maps(seed: SimulatorHandle, tmp_path: Path) -> None:
    for manager, doc in (("one", DEPLOYMENT_ONE), ("two", DEPLOYMENT_TWO)):
        path = write(tmp_path, manager, json.dumps(doc))
        code, out = await kubectl(
            seed, "apply", "--server-side", f"--field-manager={manager}", "-f", path
        )
        assert code == 0, out
    obj = await get(seed, "deployment", "merge", "-n", NS)
    containers = {c["name"]: c for c in obj["spec"]["template"]["spec"]["containers"]}
    assert list(containers) == ["a", "b"]
    assert [e["name"] for e in containers["a"]["env"]] == ["FROM_ONE", "FROM_TWO"]
    assert containers["a"]["image"] == "a:1"
    assert obj["metadata"]["labels"] == {"one": "1", "two": "2"}
    two = entries(obj)[("two", "Apply")]["fieldsV1"]
    assert two["f:spec"]["f:template"]["f:spec"]["f:containers"] == {
        'k:{"name":"a"}': {
            ".": {},
            "f:env": {'k:{"name":"FROM_TWO"}': {".": {}, "f:name": {}, "f:value": {}}},
            "f:name": {},
        },
        'k:{"name":"b"}': {".": {}, "f:image": {}, "f:name": {}},
    }
    # One manager dropping its container leaves the other's.
    path = write(tmp_path, "two-less", json.dumps(DEPLOYMENT_TWO | {"spec": {}}))
    code, out = await kubectl(seed, "apply", "--server-side", "--field-manager=two", "-f", path)
    assert code == 0, out
    obj = await get(seed, "deployment", "merge", "-n", NS)
    (container,) = obj["spec"]["template"]["spec"]["containers"]
    assert container["name"] == "a"
    assert [e["name"] for e in container["env"]] == ["FROM_ONE"]


async def test_finalizers_are_a_set(seed: SimulatorHandle, tmp_path: Path) -> None:
    for manager in ("one", "two"):
        doc = configmap("fin", {}, finalizers=[f"example.com/{manager}"])
        code, out = await kubectl(
            seed,
            "apply",
            "--server-side",
            f"--field-manager={manager}",
            "-f",
            write(tmp_path, manager, doc),
        )
        assert code == 0, out
    obj = await get(seed, "configmap", "fin", "-n", NS)
    assert obj["metadata"]["finalizers"] == ["example.com/one", "example.com/two"]
    assert entries(obj)[("two", "Apply")]["fieldsV1"]["f:metadata"] == {
        "f:finalizers": {'v:"example.com/two"': {}}
    }


def _python_client(handle: SimulatorHandle) -> dict[str, Any]:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "py"}, "data": {"k": "1"}}
    with api(handle) as api_client:
        core = client.CoreV1Api(api_client)
        created = core.patch_namespaced_config_map_with_http_info(
            "py", NS, body, field_manager="py", _content_type=APPLY
        )
        body["data"] = {"k": "2"}
        try:
            core.patch_namespaced_config_map(
                "py", NS, body, field_manager="other", _content_type=APPLY
            )
        except ApiException as exc:
            conflict = (exc.status, json.loads(exc.body))
        forced = core.patch_namespaced_config_map(
            "py", NS, body, field_manager="other", force=True, _content_type=APPLY
        )
        request = api_client.param_serialize(
            "PATCH",
            f"/api/v1/namespaces/{NS}/configmaps/py",
            header_params={"Content-Type": APPLY, "Accept": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
        )
        response = api_client.call_api(*request[:4])
        response.read()
        missing = (response.status, json.loads(response.data))
        return {
            "created": (created[1], created[0].data),
            "conflict": conflict,
            "forced": (
                forced.data,
                [(e.manager, e.operation) for e in forced.metadata.managed_fields],
            ),
            "missing": missing,
        }


async def test_the_python_client_applies(seed: SimulatorHandle) -> None:
    got = await asyncio.to_thread(_python_client, seed)
    assert got["created"] == (201, {"k": "1"})
    status, body = got["conflict"]
    assert status == 409
    assert body["reason"] == "Conflict"
    assert body["message"] == 'Apply failed with 1 conflict: conflict with "py": .data.k'
    assert body["details"]["causes"] == [
        {"type": "FieldManagerConflict", "message": 'conflict with "py"', "field": ".data.k"}
    ]
    data, managers = got["forced"]
    assert data == {"k": "2"}
    assert managers == [("other", "Apply")]
    status, body = got["missing"]
    assert status == 422
    assert body["message"] == (
        'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
        "is required for apply patch"
    )


def _status_apply(handle: SimulatorHandle) -> dict[str, Any]:
    with api(handle) as api_client:
        core = client.CoreV1Api(api_client)
        node = core.list_node().items[0].metadata.name
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node},
            "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Probe"}]},
        }
        try:
            core.patch_node_status(node, body, field_manager="prober", _content_type=APPLY)
        except ApiException as exc:
            conflict = (exc.status, json.loads(exc.body)["message"])
        forced = core.patch_node_status(
            node, body, field_manager="prober", force=True, _content_type=APPLY
        )
        return {
            "conflict": conflict,
            "ready": next(
                (c.status, c.reason) for c in forced.status.conditions if c.type == "Ready"
            ),
            "entry": next(
                e.fields_v1
                for e in forced.metadata.managed_fields
                if (e.manager, e.operation, e.subresource) == ("prober", "Apply", "status")
            ),
        }


async def test_apply_to_the_status_subresource(seed: SimulatorHandle) -> None:
    got = await asyncio.to_thread(_status_apply, seed)
    status, message = got["conflict"]
    assert status == 409
    assert message == (
        'Apply failed with 2 conflicts: conflicts with "kubelet" with subresource "status" '
        'using v1:\n- .status.conditions[type="Ready"].reason\n'
        '- .status.conditions[type="Ready"].status'
    )
    assert got["ready"] == ("False", "Probe")
    assert got["entry"] == {
        "f:status": {
            "f:conditions": {
                'k:{"type":"Ready"}': {".": {}, "f:reason": {}, "f:status": {}, "f:type": {}}
            }
        }
    }


async def test_the_seeds_policy_configmap_is_the_one_deploy_base_generates(
    seed: SimulatorHandle,
) -> None:
    """The seed has nodefence installed as deploy/base leaves it: its policy ConfigMap has the
    name and the content deploy/base's generator gives, so applying the overlay again owns the
    same value instead of conflicting with it (or silently replacing the policy)."""
    code, rendered = await kubectl(seed, "kustomize", "deploy/base")
    assert code == 0, rendered
    [generated] = [
        doc
        for doc in yaml.safe_load_all(rendered)
        if doc
        and doc["kind"] == "ConfigMap"
        and doc["metadata"]["name"].startswith("nodefence-")
        and "policy.yaml" in (doc.get("data") or {})
    ]
    held = seed.sim.store.peek(CONFIGMAPS, "nodefence", generated["metadata"]["name"])
    assert held is not None, f"the seed has no {generated['metadata']['name']}"
    assert held["data"] == generated["data"]
