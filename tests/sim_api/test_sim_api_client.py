"""The simulated API through the real kubernetes-asyncio client: the semantics the product's
cluster access relies on (conflicts, preconditions, patches, selectors, watches)."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from nodefence_sim.resources import NODES
from nodefence_sim.testing import SimulatorHandle

Obj = dict[str, object]


def _pod(name: str, labels: dict[str, str] | None = None, node: str | None = None) -> Obj:
    spec: dict[str, object] = {"containers": [{"name": "app", "image": "busybox"}]}
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
    }


def _status(exc: ApiException) -> Obj:
    body: Obj = json.loads(exc.body)
    return body


async def test_version_reports_simulated_git_version(sim_api: SimulatorHandle) -> None:
    async with aiohttp.ClientSession() as http, http.get(sim_api.url + "/version") as resp:
        info = await resp.json()
    assert info["gitVersion"] == "v1.24.8"
    assert (info["major"], info["minor"]) == ("1", "24")


async def test_discovery_lists_every_served_group(api_client: client.ApiClient) -> None:
    groups = await client.ApisApi(api_client).get_api_versions()
    names = {g.name for g in groups.groups}
    assert {"apps", "coordination.k8s.io", "storage.k8s.io"} <= names
    core = await client.CoreV1Api(api_client).get_api_resources()
    by_name = {r.name: r for r in core.resources}
    assert by_name["pods"].namespaced
    assert not by_name["nodes"].namespaced
    assert "pods/status" in by_name


async def test_create_get_list_with_selectors(api_client: client.ApiClient) -> None:
    core = client.CoreV1Api(api_client)
    await core.create_namespaced_pod("default", _pod("a", {"app": "web"}, "worker1"))
    await core.create_namespaced_pod("default", _pod("b", {"app": "db"}, "control02"))
    await core.create_namespaced_pod("default", _pod("c", {"app": "cache"}))
    got = await core.read_namespaced_pod("a", "default")
    assert got.metadata.uid
    assert got.status.phase == "Pending"

    on_worker = await core.list_pod_for_all_namespaces(field_selector="spec.nodeName=worker1")
    assert [p.metadata.name for p in on_worker.items] == ["a"]
    set_based = await core.list_namespaced_pod("default", label_selector="app in (web,db)")
    assert sorted(p.metadata.name for p in set_based.items) == ["a", "b"]
    negated = await core.list_namespaced_pod("default", label_selector="app notin (web),app")
    assert sorted(p.metadata.name for p in negated.items) == ["b", "c"]
    page = await core.list_namespaced_pod("default", limit=1)
    assert [p.metadata.name for p in page.items] == ["a"]
    assert page.metadata.remaining_item_count == 2
    rest = await core.list_namespaced_pod("default", limit=5, _continue=page.metadata._continue)
    assert [p.metadata.name for p in rest.items] == ["b", "c"]
    assert not rest.metadata._continue


async def test_create_in_missing_namespace_is_not_found(api_client: client.ApiClient) -> None:
    with pytest.raises(ApiException) as info:
        await client.CoreV1Api(api_client).create_namespaced_pod("nowhere", _pod("x"))
    assert info.value.status == 404
    assert _status(info.value)["reason"] == "NotFound"


async def test_update_with_stale_resource_version_conflicts(api_client: client.ApiClient) -> None:
    core = client.CoreV1Api(api_client)
    node = await core.read_node("worker1")
    node.metadata.labels["first"] = "yes"
    await core.replace_node("worker1", node)
    node.metadata.labels["second"] = "yes"
    with pytest.raises(ApiException) as info:
        await core.replace_node("worker1", node)
    assert info.value.status == 409
    assert _status(info.value)["reason"] == "Conflict"
    assert "second" not in (await core.read_node("worker1")).metadata.labels


async def test_json_patch_test_guards_on_resource_version(api_client: client.ApiClient) -> None:
    core = client.CoreV1Api(api_client)
    node = await core.read_node("control02")
    taint = {
        "key": "node.kubernetes.io/out-of-service",
        "value": "nodeshutdown",
        "effect": "NoExecute",
    }
    stale = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "1"},
        {"op": "add", "path": "/spec/taints", "value": [taint]},
    ]
    with pytest.raises(ApiException) as info:
        await core.patch_node("control02", stale)
    assert info.value.status == 422
    assert _status(info.value)["reason"] == "Invalid"
    assert (await core.read_node("control02")).spec.taints is None

    fresh = [
        {
            "op": "test",
            "path": "/metadata/resourceVersion",
            "value": node.metadata.resource_version,
        },
        {"op": "add", "path": "/spec/taints", "value": [taint]},
    ]
    patched = await core.patch_node("control02", fresh)
    assert [t.key for t in patched.spec.taints] == [taint["key"]]


async def test_strategic_merge_patch_merges_by_key(api_client: client.ApiClient) -> None:
    core = client.CoreV1Api(api_client)
    await core.patch_node_status(
        "worker1",
        {"status": {"conditions": [{"type": "MemoryPressure", "status": "False"}]}},
    )
    await core.patch_node_status(
        "worker1", {"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}
    )
    node = await core.read_node("worker1")
    assert {c.type: c.status for c in node.status.conditions} == {
        "Ready": "Unknown",
        "MemoryPressure": "False",
    }
    await core.create_namespaced_pod("default", _pod("f"))
    await core.patch_namespaced_pod("f", "default", {"metadata": {"finalizers": ["a/x"]}})
    pod = await core.patch_namespaced_pod("f", "default", {"metadata": {"finalizers": ["b/y"]}})
    assert pod.metadata.finalizers == ["a/x", "b/y"]
    # Taints carry no merge strategy: a patch replaces the whole list.
    first = {"key": "k1", "effect": "NoSchedule"}
    await core.patch_node("worker1", {"spec": {"taints": [first]}})
    node = await core.patch_node(
        "worker1", {"spec": {"taints": [{"key": "k2", "effect": "NoExecute"}]}}
    )
    assert [t.key for t in node.spec.taints] == ["k2"]


async def test_delete_with_uid_precondition_mismatch_conflicts(
    api_client: client.ApiClient,
) -> None:
    core = client.CoreV1Api(api_client)
    await core.create_namespaced_pod("default", _pod("p", node="worker1"))
    body = client.V1DeleteOptions(
        grace_period_seconds=0, preconditions=client.V1Preconditions(uid="not-the-uid")
    )
    with pytest.raises(ApiException) as info:
        await core.delete_namespaced_pod("p", "default", body=body)
    assert info.value.status == 409
    assert "Precondition failed" in _status(info.value)["message"]
    pod = await core.read_namespaced_pod("p", "default")
    body = client.V1DeleteOptions(
        grace_period_seconds=0, preconditions=client.V1Preconditions(uid=pod.metadata.uid)
    )
    deleted = await core.delete_namespaced_pod("p", "default", body=body)
    assert deleted.metadata.name == "p"
    with pytest.raises(ApiException) as gone:
        await core.read_namespaced_pod("p", "default")
    assert gone.value.status == 404


async def test_graceful_delete_of_bound_pod_leaves_it_terminating(
    api_client: client.ApiClient,
) -> None:
    core = client.CoreV1Api(api_client)
    await core.create_namespaced_pod("default", _pod("g", node="worker1"))
    await core.delete_namespaced_pod("g", "default")
    pod = await core.read_namespaced_pod("g", "default")
    assert pod.metadata.deletion_timestamp is not None
    assert pod.metadata.deletion_grace_period_seconds == 30


async def test_dry_run_writes_change_nothing(api_client: client.ApiClient) -> None:
    core = client.CoreV1Api(api_client)
    before = await core.read_node("worker1")
    await core.patch_node("worker1", {"spec": {"unschedulable": True}}, dry_run="All")
    await core.create_namespaced_pod("default", _pod("dry"), dry_run="All")
    await core.delete_node("worker1", dry_run="All")
    after = await core.read_node("worker1")
    assert after.metadata.resource_version == before.metadata.resource_version
    assert not after.spec.unschedulable
    assert (await core.list_namespaced_pod("default")).items == []


async def test_other_groups_are_served(api_client: client.ApiClient) -> None:
    await client.CoreV1Api(api_client).create_namespace({"metadata": {"name": "kube-node-lease"}})
    coordination = client.CoordinationV1Api(api_client)
    await coordination.create_namespaced_lease(
        "kube-node-lease",
        {"metadata": {"name": "worker1"}, "spec": {"holderIdentity": "worker1"}},
    )
    lease = await coordination.read_namespaced_lease("worker1", "kube-node-lease")
    assert lease.spec.holder_identity == "worker1"
    apps = client.AppsV1Api(api_client)
    template = {
        "metadata": {"labels": {"app": "db"}},
        "spec": {"containers": [{"name": "db", "image": "pg"}]},
    }
    await apps.create_namespaced_stateful_set(
        "default",
        {
            "metadata": {"name": "db"},
            "spec": {
                "serviceName": "db",
                "selector": {"matchLabels": {"app": "db"}},
                "template": template,
            },
        },
    )
    assert [s.metadata.name for s in (await apps.list_stateful_set_for_all_namespaces()).items] == [
        "db"
    ]
    storage = client.StorageV1Api(api_client)
    await storage.create_volume_attachment(
        {
            "metadata": {"name": "va-1"},
            "spec": {
                "attacher": "csi",
                "nodeName": "worker1",
                "source": {"persistentVolumeName": "pv1"},
            },
        }
    )
    vas = await storage.list_volume_attachment()
    assert [v.spec.node_name for v in vas.items] == ["worker1"]


async def test_unknown_type_is_a_404_status(sim_api: SimulatorHandle) -> None:
    async with (
        aiohttp.ClientSession() as http,
        http.get(sim_api.url + "/api/v1/namespaces/default/widgets") as resp,
    ):
        body = await resp.json()
    assert resp.status == 404
    assert body["kind"] == "Status"
    assert body["reason"] == "NotFound"


async def test_watch_replays_from_resource_version_then_streams(
    api_client: client.ApiClient,
) -> None:
    core = client.CoreV1Api(api_client)
    listed = await core.list_namespaced_pod("default")
    await core.create_namespaced_pod("default", _pod("w1", {"app": "web"}))
    await core.create_namespaced_pod("default", _pod("other", {"app": "db"}))
    seen: list[tuple[str, str]] = []
    stream = watch.Watch()

    async def consume() -> None:
        async for event in stream.stream(
            core.list_namespaced_pod,
            "default",
            label_selector="app=web",
            resource_version=listed.metadata.resource_version,
            timeout_seconds=60,
        ):
            seen.append((event["type"], event["object"].metadata.name))
            if len(seen) == 2:
                stream.stop()

    task = asyncio.create_task(consume())
    # The watch replays from the listed resourceVersion, so the patch may land before it opens.
    await core.patch_namespaced_pod("w1", "default", {"metadata": {"labels": {"x": "y"}}})
    await asyncio.wait_for(task, 60)
    assert seen == [("ADDED", "w1"), ("MODIFIED", "w1")]


async def test_watch_ends_after_timeout_seconds(sim_api: SimulatorHandle) -> None:
    """The server ends the stream itself once ``timeoutSeconds`` is up, cleanly (the client's
    generous limit would fail the test if it never did), and not at the end of the replay:
    a change made after the replay still arrives on it."""
    events: list[tuple[str, str]] = []
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http,
        http.get(
            sim_api.url + "/api/v1/nodes", params={"watch": "true", "timeoutSeconds": "2"}
        ) as resp,
    ):
        assert resp.status == 200
        async for line in resp.content:
            if not line.strip():
                continue
            event = json.loads(line)
            events.append((event["type"], event["object"]["metadata"]["name"]))
            if len(events) == 2:
                node = sim_api.sim.store.get(NODES, None, "worker1")
                node["metadata"]["labels"]["after-the-replay"] = "yes"
                sim_api.sim.store.update(NODES, None, "worker1", node)
        assert resp.content.at_eof()
    assert sorted(events[:2]) == [("ADDED", "control02"), ("ADDED", "worker1")]
    assert events[2:] == [("MODIFIED", "worker1")]
