"""What the API server answers a path it serves nothing at, and an Event it finds invalid, on
both backends.

A group the server does not serve (Knative's, where Knative is not installed) is no API at
all: kube-apiserver's last handler answers Go's plain-text ``404 page not found``, not a
``Status``, for its resources and its discovery documents alike. Anything else under ``/api``
or a group it serves (a resource or a version that group lacks) is a ``Status`` 404.

A core/v1 Event without ``eventTime`` must be in its involved object's namespace, or, about an
object that has none (a Node), in ``default``: anything else is a 422 naming
``involvedObject.namespace``. One with ``eventTime`` must also name its reporting component
(a qualified name), its instance and its action.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from .support import Cluster

TEXT_404 = "404 page not found\n"


async def _get(cluster: Cluster, path: str) -> tuple[int, dict[str, str], str]:
    async with cluster.session() as session, session.get(cluster.url + path) as reply:
        return reply.status, dict(reply.headers), await reply.text()


@pytest.mark.parametrize(
    "path",
    [
        "/apis/serving.knative.dev/v1/namespaces/{ns}/services",
        "/apis/serving.knative.dev/v1/namespaces/{ns}/services/nodefence",
        "/apis/serving.knative.dev/v1",
        "/apis/serving.knative.dev",
    ],
)
async def test_a_path_under_a_group_not_served_is_plain_text_404(
    cluster: Cluster, path: str
) -> None:
    status, headers, body = await _get(cluster, path.format(ns=cluster.namespace))
    assert status == 404
    assert headers["Content-Type"] == "text/plain; charset=utf-8"
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert body == TEXT_404


@pytest.mark.parametrize(
    "path",
    [
        "/apis/apps/v1/namespaces/{ns}/gizmos",
        "/apis/apps/v1beta9/namespaces/{ns}/deployments",
        "/apis/apps/v1beta9",
        "/api/v1/namespaces/{ns}/gizmos",
        "/api/v2/nodes",
    ],
)
async def test_a_path_under_api_or_a_served_group_is_a_status_404(
    cluster: Cluster, path: str
) -> None:
    status, headers, raw = await _get(cluster, path.format(ns=cluster.namespace))
    assert status == 404
    assert headers["Content-Type"] == "application/json"
    body = json.loads(raw)
    assert (body["kind"], body["reason"], body["code"]) == ("Status", "NotFound", 404)
    assert body["message"] == "the server could not find the requested resource"


def _event(namespace: str, involved: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"conformance.{uuid.uuid4().hex[:12]}", "namespace": namespace},
        "involvedObject": involved,
        "reason": "ConformanceCheck",
        "message": "an Event of the conformance tests",
        "type": "Normal",
        "source": {"component": "nodefence"},
        "reportingComponent": "nodefence",
        "reportingInstance": "conformance",
        "firstTimestamp": "2026-01-01T00:00:00Z",
        "lastTimestamp": "2026-01-01T00:00:00Z",
        "count": 1,
    }


async def _post_event(cluster: Cluster, event: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    namespace = event["metadata"]["namespace"]
    path = f"{cluster.url}/api/v1/namespaces/{namespace}/events"
    async with cluster.session() as session, session.post(path, json=event) as reply:
        return reply.status, await reply.json()


async def _delete_event(cluster: Cluster, event: dict[str, Any]) -> None:
    meta = event["metadata"]
    path = f"{cluster.url}/api/v1/namespaces/{meta['namespace']}/events/{meta['name']}"
    async with cluster.session() as session, session.delete(path) as reply:
        assert reply.status == 200, await reply.text()


@pytest.mark.parametrize("involved_namespace", ["", "another-namespace"])
async def test_an_event_outside_its_involved_objects_namespace_is_refused(
    cluster: Cluster, involved_namespace: str
) -> None:
    involved = {"apiVersion": "v1", "kind": "ConfigMap", "name": "nodefence-fences"}
    if involved_namespace:
        involved["namespace"] = involved_namespace
    event = _event(cluster.namespace, involved)
    status, body = await _post_event(cluster, event)
    assert status == 422, body
    name = event["metadata"]["name"]
    said = f'Invalid value: "{involved_namespace}": does not match event.namespace'
    assert body["reason"] == "Invalid"
    assert body["message"] == f'Event "{name}" is invalid: involvedObject.namespace: {said}'
    assert body["details"] == {
        "name": name,
        "kind": "Event",
        "causes": [
            {"reason": "FieldValueInvalid", "message": said, "field": "involvedObject.namespace"}
        ],
    }


async def test_events_in_their_objects_namespace_or_about_a_node_in_default_are_created(
    cluster: Cluster,
) -> None:
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "nodefence-fences",
        "namespace": cluster.namespace,
    }
    status, body = await _post_event(cluster, _event(cluster.namespace, configmap))
    assert status == 201, body
    node = _event("default", {"apiVersion": "v1", "kind": "Node", "name": "compute01"})
    status, body = await _post_event(cluster, node)
    assert status == 201, body
    await _delete_event(cluster, node)


async def test_an_event_with_an_event_time_must_name_its_reporter_and_action(
    cluster: Cluster,
) -> None:
    involved = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "nodefence-fences",
        "namespace": cluster.namespace,
    }
    event = {
        **_event(cluster.namespace, involved),
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingComponent": "",
        "reportingInstance": "",
    }
    status, body = await _post_event(cluster, event)
    assert status == 422, body
    assert [(c["field"], c["reason"]) for c in body["details"]["causes"]] == [
        ("reportingComponent", "FieldValueRequired"),
        ("reportingComponent", "FieldValueInvalid"),
        ("reportingComponent", "FieldValueInvalid"),
        ("reportingInstance", "FieldValueRequired"),
        ("action", "FieldValueRequired"),
    ], body
