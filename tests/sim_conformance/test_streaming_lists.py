"""Streaming lists (the WatchList feature, on in real servers from Kubernetes 1.34): a watch
with ``sendInitialEvents=true&resourceVersionMatch=NotOlderThan`` sends the current state as
``ADDED`` events, then the bookmark annotated ``k8s.io/initial-events-end``, then changes; and
the ``ListOptions`` combinations a real server refuses with its 422. Every test runs on both
backends, over the test's own namespace and the pods it makes there.

A watch from resourceVersion "" or "0" that names neither option is defaulted to a streaming
list, as a real server does. kubectl 1.37's reflectors list this way and time out waiting for
the bookmark when it never comes, so these show it end to end:
- ``kubectl delete pod X`` (``--wait`` is the default): exit 0 once the pod is gone
- ``kubectl rollout status statefulset/X``: exit 0 when its replicas are ready
- ``kubectl delete namespace X`` with a running pod inside: exit 0 once the namespace is gone
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from .support import DEADLINE, Cluster, kubectl, until

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]

MARIADB = "application=mariadb,component=server"
SERVERS = {"mariadb-server-0", "mariadb-server-1", "mariadb-server-2"}
STREAMING = {"watch": "true", "sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan"}
END = "k8s.io/initial-events-end"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"

Event = dict[str, Any]
NextEvent = Callable[[], Awaitable[Event]]


def pods(cluster: Cluster) -> str:
    return f"{cluster.url}/api/v1/namespaces/{cluster.namespace}/pods"


@pytest.fixture
async def servers(cluster: Cluster) -> Cluster:
    """Three labelled pods of the test's own, Running, so that nothing but the test changes
    them while it watches."""
    async with cluster.session() as session:
        for name in sorted(SERVERS):
            pod = a_pod(name, cluster.namespace)
            pod["metadata"]["labels"] = {"application": "mariadb", "component": "server"}
            async with session.post(pods(cluster), json=pod) as response:
                assert response.status == 201, await response.text()

    async def running() -> bool:
        async with cluster.session() as session, session.get(pods(cluster)) as response:
            items = (await response.json())["items"]
        return len(items) == len(SERVERS) and all(
            item["status"].get("phase") == "Running" for item in items
        )

    await until(running, "the three pods Running")
    return cluster


@contextlib.asynccontextmanager
async def watching(
    cluster: Cluster, params: dict[str, str], accept: str = "application/json"
) -> AsyncIterator[NextEvent]:
    """A watch of the namespace's pods; yields a coroutine function returning its next event."""
    query = {**params, "timeoutSeconds": str(int(DEADLINE))}
    async with (
        cluster.session() as session,
        session.get(pods(cluster), params=query, headers={"Accept": accept}) as response,
    ):
        assert response.status == 200, await response.text()

        async def next_event() -> Event:
            line = await asyncio.wait_for(response.content.readline(), DEADLINE)
            assert line, "the watch ended"
            event: Event = json.loads(line)
            return event

        yield next_event


async def listed(cluster: Cluster, params: dict[str, str]) -> tuple[set[str], int]:
    async with (
        cluster.session() as session,
        session.get(pods(cluster), params=params) as response,
    ):
        assert response.status == 200, await response.text()
        body = await response.json()
    names = {item["metadata"]["name"] for item in body["items"]}
    return names, int(body["metadata"]["resourceVersion"])


async def annotate(cluster: Cluster, pod: str) -> None:
    code, out = await kubectl(cluster, "annotate", "pod", "-n", cluster.namespace, pod, "probe=1")
    assert code == 0, out


async def change_of(next_event: NextEvent, pod: str) -> tuple[list[Event], Event]:
    """Events up to the one showing ``pod`` annotated: (those before it, that one)."""
    before: list[Event] = []
    while True:
        event = await next_event()
        meta = event["object"]["metadata"]
        if meta.get("name") == pod and (meta.get("annotations") or {}).get("probe") == "1":
            return before, event
        before.append(event)


def rv(event: Event) -> int:
    return int(event["object"]["metadata"]["resourceVersion"])


async def test_streaming_list_sends_the_state_then_the_end_bookmark_then_changes(
    servers: Cluster,
) -> None:
    names, list_rv = await listed(servers, {"labelSelector": MARIADB})
    assert names == SERVERS
    params = {**STREAMING, "allowWatchBookmarks": "true", "labelSelector": MARIADB}
    async with watching(servers, params) as next_event:
        initial = [await next_event() for _ in names]
        assert [e["type"] for e in initial] == ["ADDED"] * len(names)
        assert {e["object"]["metadata"]["name"] for e in initial} == names
        bookmark = await next_event()
        assert bookmark["type"] == "BOOKMARK"
        assert (bookmark["object"]["kind"], bookmark["object"]["apiVersion"]) == ("Pod", "v1")
        assert bookmark["object"]["metadata"] == {
            "resourceVersion": bookmark["object"]["metadata"]["resourceVersion"],
            "annotations": {END: "true"},
        }
        assert rv(bookmark) >= list_rv
        assert all(rv(e) <= rv(bookmark) for e in initial)
        await annotate(servers, "mariadb-server-1")
        between, change = await change_of(next_event, "mariadb-server-1")
    assert change["type"] == "MODIFIED"
    assert all(e["type"] != "BOOKMARK" for e in between)
    assert all(rv(e) > rv(bookmark) for e in [*between, change])
    assert {e["object"]["metadata"]["labels"]["component"] for e in between} <= {"server"}


async def test_a_watch_from_no_resource_version_is_defaulted_to_a_streaming_list(
    servers: Cluster,
) -> None:
    names, _ = await listed(servers, {"labelSelector": MARIADB})
    params = {"watch": "true", "allowWatchBookmarks": "true", "labelSelector": MARIADB}
    async with watching(servers, params) as next_event:
        initial = [await next_event() for _ in names]
        bookmark = await next_event()
    assert {(e["type"], e["object"]["metadata"]["name"]) for e in initial} == {
        ("ADDED", name) for name in names
    }
    assert bookmark["type"] == "BOOKMARK"
    assert bookmark["object"]["metadata"]["annotations"] == {END: "true"}


async def test_a_watch_from_a_listed_resource_version_sends_only_changes(
    servers: Cluster,
) -> None:
    _, list_rv = await listed(servers, {"labelSelector": MARIADB})
    params = {
        "watch": "true",
        "allowWatchBookmarks": "true",
        "labelSelector": MARIADB,
        "resourceVersion": str(list_rv),
    }
    async with watching(servers, params) as next_event:
        await annotate(servers, "mariadb-server-1")
        between, change = await change_of(next_event, "mariadb-server-1")
    assert change["type"] == "MODIFIED"
    assert all(e["type"] == "MODIFIED" and rv(e) > list_rv for e in between)


async def test_a_table_watch_ends_its_initial_rows_with_the_annotated_bookmark(
    servers: Cluster,
) -> None:
    """kubectl reads Tables; the bookmark is a row too, carrying its metadata even when the
    rows of objects carry none (``includeObject=None``)."""
    names, _ = await listed(servers, {"labelSelector": MARIADB})
    params = {
        **STREAMING,
        "allowWatchBookmarks": "true",
        "labelSelector": MARIADB,
        "includeObject": "None",
    }
    async with watching(servers, params, accept=TABLE) as next_event:
        initial = [await next_event() for _ in names]
        bookmark = await next_event()
    assert {e["object"]["rows"][0]["cells"][0] for e in initial} == names
    assert all(e["object"]["rows"][0]["object"] is None for e in initial)
    assert (bookmark["type"], bookmark["object"]["kind"]) == ("BOOKMARK", "Table")
    (row,) = bookmark["object"]["rows"]
    assert row["cells"][0] == ""
    assert row["object"]["kind"] == "PartialObjectMetadata"
    assert row["object"]["metadata"] == {
        "resourceVersion": bookmark["object"]["metadata"]["resourceVersion"],
        "annotations": {END: "true"},
    }


async def test_a_field_selector_applies_and_without_bookmarks_none_is_sent(
    servers: Cluster,
) -> None:
    params = {**STREAMING, "fieldSelector": "metadata.name=mariadb-server-2"}
    async with watching(servers, params) as next_event:
        first = await next_event()
        assert (first["type"], first["object"]["metadata"]["name"]) == ("ADDED", "mariadb-server-2")
        await annotate(servers, "mariadb-server-2")
        between, change = await change_of(next_event, "mariadb-server-2")
    assert change["type"] == "MODIFIED"
    assert {e["type"] for e in between} <= {"MODIFIED"}


async def test_without_initial_events_the_watch_starts_at_the_current_state(
    servers: Cluster,
) -> None:
    params = {
        "watch": "true",
        "sendInitialEvents": "false",
        "resourceVersionMatch": "NotOlderThan",
        "allowWatchBookmarks": "true",
        "fieldSelector": "metadata.name=mariadb-server-0",
    }
    async with watching(servers, params) as next_event:
        await annotate(servers, "mariadb-server-0")
        between, change = await change_of(next_event, "mariadb-server-0")
    assert change["type"] == "MODIFIED"
    assert {e["type"] for e in between} <= {"MODIFIED"}


SEND_NEEDS_MATCH = (
    "resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch "
    "to NotOlderThan"
)
ONLY_NOT_OLDER_THAN = (
    'resourceVersionMatch: Unsupported value: "Exact": supported values: "NotOlderThan"'
)
WITH_CONTINUE = (
    "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue is provided"
)
REFUSED = [
    pytest.param(
        {"sendInitialEvents": "true"},
        ["sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list"],
        id="initial-events-on-a-list",
    ),
    pytest.param(
        {"sendInitialEvents": "false"},
        ["sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list"],
        id="no-initial-events-on-a-list",
    ),
    pytest.param(
        {"watch": "true", "sendInitialEvents": "true", "allowWatchBookmarks": "true"},
        [SEND_NEEDS_MATCH],
        id="initial-events-without-match",
    ),
    pytest.param(
        {"watch": "true", "resourceVersionMatch": "NotOlderThan"},
        [
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless "
            "sendInitialEvents is provided"
        ],
        id="match-without-initial-events",
    ),
    pytest.param(
        {"watch": "true", "sendInitialEvents": "true", "resourceVersionMatch": "Exact"},
        [SEND_NEEDS_MATCH, ONLY_NOT_OLDER_THAN],
        id="watch-match-unsupported",
    ),
    pytest.param(
        {**STREAMING, "continue": "abc"},
        [WITH_CONTINUE],
        id="watch-match-with-continue",
    ),
    pytest.param(
        {"watch": "true", "continue": "abc"},
        [WITH_CONTINUE],
        id="defaulted-watch-with-continue",
    ),
    pytest.param(
        {"resourceVersionMatch": "NotOlderThan", "resourceVersion": "1", "continue": "abc"},
        [WITH_CONTINUE],
        id="list-match-with-continue",
    ),
    pytest.param(
        {"resourceVersionMatch": "Newest", "resourceVersion": "1"},
        [
            'resourceVersionMatch: Unsupported value: "Newest": supported values: "Exact", '
            '"NotOlderThan", ""'
        ],
        id="list-match-unsupported",
    ),
]


@pytest.mark.parametrize(("params", "errors"), REFUSED)
async def test_refused_list_options_are_the_real_422(
    cluster: Cluster, params: dict[str, str], errors: list[str]
) -> None:
    async with (
        cluster.session() as session,
        session.get(pods(cluster), params=params) as response,
    ):
        assert response.status == 422
        status = await response.json()
    listed_errors = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
    assert status["kind"] == "Status"
    assert status["reason"] == "Invalid"
    assert status["code"] == 422
    assert status["message"] == f'ListOptions.meta.k8s.io "" is invalid: {listed_errors}'
    assert status["details"]["group"] == "meta.k8s.io"
    assert status["details"]["kind"] == "ListOptions"
    causes = status["details"]["causes"]
    assert [f"{c['field']}: {c['message']}" for c in causes] == errors
    assert {c["reason"] for c in causes} <= {"FieldValueForbidden", "FieldValueNotSupported"}


async def test_a_collection_delete_checks_its_list_options_before_deleting(
    servers: Cluster,
) -> None:
    names, _ = await listed(servers, {"labelSelector": MARIADB})
    params = {"labelSelector": MARIADB, "sendInitialEvents": "true"}
    async with (
        servers.session() as session,
        session.delete(pods(servers), params=params) as response,
    ):
        assert response.status == 422
        status = await response.json()
    assert status["details"]["causes"] == [
        {
            "reason": "FieldValueForbidden",
            "message": "Forbidden: sendInitialEvents is forbidden for list",
            "field": "sendInitialEvents",
        }
    ]
    assert (await listed(servers, {"labelSelector": MARIADB}))[0] == names


async def test_a_list_with_a_valid_match_is_served(servers: Cluster) -> None:
    names, _ = await listed(
        servers, {"resourceVersionMatch": "NotOlderThan", "resourceVersion": "0", "limit": "500"}
    )
    assert "mariadb-server-0" in names


# ------------------------------------------------------------------ kubectl 1.37
def write(tmp_path: Path, *objects: dict[str, Any]) -> str:
    path = tmp_path / "objects.json"
    path.write_text("\n".join(json.dumps(o) for o in objects))
    return str(path)


def a_pod(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": "main", "image": "docker.io/library/busybox:1.36"}]},
    }


async def create(cluster: Cluster, tmp_path: Path, *objects: dict[str, Any]) -> None:
    code, out = await kubectl(cluster, "create", "-f", write(tmp_path, *objects))
    assert code == 0, out


async def running_pod(cluster: Cluster, tmp_path: Path, name: str) -> None:
    """Pod ``name`` Running on a kubelet in the test's namespace: deleting either takes a
    graceful termination, so kubectl has to watch for the end."""
    await create(cluster, tmp_path, a_pod(name, cluster.namespace))

    async def running() -> bool:
        _, got = await kubectl(cluster, "get", "pod", "-n", cluster.namespace, name, "-o", "json")
        return bool(json.loads(got)["status"].get("phase") == "Running")

    await until(running, f"{name} running")


async def test_kubectl_delete_pod_waits_until_it_is_gone(cluster: Cluster, tmp_path: Path) -> None:
    await running_pod(cluster, tmp_path, "p1")
    code, out = await kubectl(
        cluster, "delete", "pod", "-n", cluster.namespace, "p1", "--timeout=45s"
    )
    assert code == 0, out
    assert 'pod "p1" deleted' in out, out
    code, out = await kubectl(cluster, "get", "pod", "-n", cluster.namespace, "p1")
    assert code == 1
    assert 'pods "p1" not found' in out, out


async def test_kubectl_rollout_status_of_a_statefulset_completes(
    cluster: Cluster, tmp_path: Path
) -> None:
    labels = {"app": "db"}
    statefulset = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": cluster.namespace},
        "spec": {
            "replicas": 2,
            "serviceName": "db",
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": a_pod("x", cluster.namespace)["spec"],
            },
        },
    }
    await create(cluster, tmp_path, statefulset)
    code, out = await kubectl(
        cluster, "rollout", "status", "statefulset/db", "-n", cluster.namespace, "--timeout=45s"
    )
    assert code == 0, out
    assert "roll out complete" in out, out
    code, out = await kubectl(
        cluster, "get", "statefulset", "-n", cluster.namespace, "db", "-o", "json"
    )
    assert code == 0, out
    assert json.loads(out)["status"]["readyReplicas"] == 2


async def test_kubectl_delete_namespace_waits_until_it_is_gone(
    cluster: Cluster, tmp_path: Path
) -> None:
    await running_pod(cluster, tmp_path, "p1")
    code, out = await kubectl(cluster, "delete", "namespace", cluster.namespace, "--timeout=45s")
    assert code == 0, out
    assert f'namespace "{cluster.namespace}" deleted' in out, out
    code, out = await kubectl(cluster, "get", "namespace", cluster.namespace)
    assert code == 1
    assert f'namespaces "{cluster.namespace}" not found' in out, out
