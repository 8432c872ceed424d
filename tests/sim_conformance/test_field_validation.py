"""Server-side field validation against the seed cluster, as a 1.27+ API server does it.

Verified with kubectl 1.32: ``create -f`` (``fieldValidation=Strict``, kubectl's default once the
OpenAPI document declares the parameter) refused with ``strict decoding error: unknown field
"spec.foo"``; ``create --validate=warn -f`` stored without the field and printed ``Warning:
unknown field "spec.foo"``; ``create --validate=false -f`` stored silently; ``patch`` with an
unknown field warned about (kubectl sends no directive, so the default Warn applies); raw
strategic and merge patches under Strict refused with the real 422. With the official client:
``ApiClient.call_api`` of a ConfigMap with ``fieldValidation=Strict`` (400) and ``Warn`` (201,
a ``Warning: 299`` header, the unknown field not stored), ``read_namespaced_config_map``.
Raw requests: duplicate fields, a bool for a container name (Go's ``cannot unmarshal`` text).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes import client

from nodefence_sim.resources import CONFIGMAPS, DEPLOYMENTS
from nodefence_sim.testing import SimulatorHandle

from .support import api, kubectl

pytestmark = pytest.mark.kubectl

DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "typo", "namespace": "openstack"},
    "spec": {
        "foo": 1,
        "selector": {"matchLabels": {"app": "typo"}},
        "template": {
            "metadata": {"labels": {"app": "typo"}},
            "spec": {"containers": [{"name": "c", "image": "busybox", "imagePullPolice": "x"}]},
        },
    },
}
UNKNOWN = (
    'unknown field "spec.foo", unknown field "spec.template.spec.containers[0].imagePullPolice"'
)


def manifest(tmp_path: Path, obj: dict[str, Any]) -> str:
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(obj))
    return str(path)


async def raw(
    handle: SimulatorHandle, method: str, path: str, body: str, content_type: str
) -> tuple[int, Any, list[str]]:
    async with (
        aiohttp.ClientSession() as session,
        session.request(
            method, handle.url + path, data=body, headers={"Content-Type": content_type}
        ) as response,
    ):
        return response.status, await response.json(), response.headers.getall("Warning", [])


async def test_kubectl_create_is_strict_by_default(seed: SimulatorHandle, tmp_path: Path) -> None:
    code, out = await kubectl(seed, "create", "-f", manifest(tmp_path, DEPLOYMENT))
    assert code == 1
    assert 'Error from server (BadRequest): error when creating "' in out
    expected = 'Deployment in version "v1" cannot be handled as a Deployment: strict decoding'
    assert f"{expected} error: {UNKNOWN}" in out, out
    assert seed.sim.store.peek(DEPLOYMENTS, "openstack", "typo") is None


async def test_kubectl_warn_stores_without_the_unknown_fields(
    seed: SimulatorHandle, tmp_path: Path
) -> None:
    code, out = await kubectl(
        seed, "create", "--validate=warn", "-f", manifest(tmp_path, DEPLOYMENT)
    )
    assert code == 0, out
    assert 'Warning: unknown field "spec.foo"' in out
    assert 'Warning: unknown field "spec.template.spec.containers[0].imagePullPolice"' in out
    stored = seed.sim.store.get(DEPLOYMENTS, "openstack", "typo")
    assert "foo" not in stored["spec"]
    container = stored["spec"]["template"]["spec"]["containers"][0]
    assert "imagePullPolice" not in container
    assert container["imagePullPolicy"] == "Always"


async def test_kubectl_ignore_stores_silently(seed: SimulatorHandle, tmp_path: Path) -> None:
    code, out = await kubectl(
        seed, "create", "--validate=false", "-f", manifest(tmp_path, DEPLOYMENT)
    )
    assert (code, out.strip()) == (0, "deployment.apps/typo created")
    assert "foo" not in seed.sim.store.get(DEPLOYMENTS, "openstack", "typo")["spec"]


async def test_patches_warn_by_default_and_strict_is_the_real_422(
    seed: SimulatorHandle,
) -> None:
    assert (await kubectl(seed, "create", "-n", "openstack", "configmap", "p"))[0] == 0
    # kubectl patch sends no fieldValidation: the server's default, Warn, applies.
    code, out = await kubectl(
        seed, "patch", "-n", "openstack", "configmap", "p", "-p", '{"data":{"a":"b"},"foo":1}'
    )
    assert code == 0, out
    assert 'Warning: unknown field "foo"' in out
    stored = seed.sim.store.get(CONFIGMAPS, "openstack", "p")
    assert stored["data"] == {"a": "b"}
    assert "foo" not in stored
    path = "/api/v1/namespaces/openstack/configmaps/p?fieldValidation=Strict"
    status, reply, _ = await raw(
        seed,
        "PATCH",
        path,
        '{"data":{"a":"c"},"foo":{"bar":[1,true]}}',
        "application/strategic-merge-patch+json",
    )
    assert (status, reply["reason"]) == (422, "Invalid")
    detail = (
        'Invalid value: "map[data:map[a:c] foo:map[bar:[1 true]]]": strict decoding error: '
        'unknown field "foo"'
    )
    assert reply["message"] == f' "" is invalid: patch: {detail}'
    assert reply["details"]["causes"] == [
        {"reason": "FieldValueInvalid", "message": detail, "field": "patch"}
    ]
    status, reply, _ = await raw(
        seed, "PATCH", path, '{"data":{"a":"d"},"foo":1}', "application/merge-patch+json"
    )
    assert status == 422
    assert reply["message"].endswith('strict decoding error: unknown field "foo"')
    assert seed.sim.store.get(CONFIGMAPS, "openstack", "p")["data"] == {"a": "b"}


async def test_duplicate_fields_and_wrong_types(seed: SimulatorHandle) -> None:
    path = "/api/v1/namespaces/openstack/configmaps"
    duplicated = '{"metadata": {"name": "d", "name": "e"}, "data": {"k": "1", "k": "2"}}'
    status, reply, _ = await raw(
        seed, "POST", path + "?fieldValidation=Strict", duplicated, "application/json"
    )
    assert (status, reply["reason"]) == (400, "BadRequest")
    assert reply["message"] == (
        'ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: '
        'duplicate field "metadata.name", duplicate field "data.k"'
    )
    # Without a directive the default is Warn: the last value wins, and the reply says so.
    status, reply, warnings = await raw(seed, "POST", path, duplicated, "application/json")
    assert status == 201
    assert (reply["metadata"]["name"], reply["data"]) == ("e", {"k": "2"})
    assert warnings == [
        '299 - "duplicate field \\"metadata.name\\""',
        '299 - "duplicate field \\"data.k\\""',
    ]
    pod = {
        "metadata": {"name": "bad"},
        "spec": {"containers": [{"name": True, "image": "busybox"}]},
    }
    status, reply, _ = await raw(
        seed,
        "POST",
        "/api/v1/namespaces/openstack/pods?fieldValidation=Ignore",
        json.dumps(pod),
        "application/json",
    )
    assert status == 400
    assert reply["message"] == (
        'Pod in version "v1" cannot be handled as a Pod: json: cannot unmarshal bool into Go '
        "struct field Container.spec.containers.name of type string"
    )
    replicas = {"metadata": {"name": "r"}, "spec": {"replicas": "3"}}
    status, reply, _ = await raw(
        seed,
        "POST",
        "/apis/apps/v1/namespaces/openstack/deployments",
        json.dumps(replicas),
        "application/json",
    )
    assert status == 400
    assert reply["message"].endswith(
        "json: cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas "
        "of type int32"
    )


def _client_calls(handle: SimulatorHandle) -> dict[str, Any]:
    """The typed calls validate their models client-side, so a body with a field the model
    lacks goes through the client's generic ``call_api``, as a dict."""
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "from-client", "labelz": {"a": "b"}},
        "data": {"k": "v"},
    }
    with api(handle) as api_client:

        def create(validation: str) -> Any:
            request = api_client.param_serialize(
                "POST",
                "/api/v1/namespaces/{namespace}/configmaps",
                path_params={"namespace": "openstack"},
                query_params=[("fieldValidation", validation)],
                header_params={"Content-Type": "application/json"},
                body=body,
                auth_settings=["BearerToken"],
            )
            response = api_client.call_api(*request)
            response.read()
            return response

        refused = create("Strict")
        warned = create("Warn")
        stored = client.CoreV1Api(api_client).read_namespaced_config_map("from-client", "openstack")
        return {
            "refused": (refused.status, json.loads(refused.data)["message"]),
            "created": (warned.status, stored.data, stored.metadata.labels),
            "warning": warned.getheader("Warning"),
        }


async def test_the_official_client_strict_and_warn(seed: SimulatorHandle) -> None:
    got = await asyncio.to_thread(_client_calls, seed)
    assert got["refused"] == (
        400,
        'ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: '
        'unknown field "metadata.labelz"',
    )
    assert got["created"] == (201, {"k": "v"}, None)
    assert got["warning"] == '299 - "unknown field \\"metadata.labelz\\""'
