"""``kubectl explain`` against both backends (the simulator and the real kube-apiserver), and the
OpenAPI v3 schemas it reads.

Verified with kubectl 1.32 (each assertion is what a 1.32 cluster prints, descriptions aside:
the simulator's schemas carry only those of ``apiVersion`` and ``kind``): ``explain pods``,
``explain pod.spec.containers``, ``explain deployment.spec.replicas``, ``explain
nodes.spec.taints --recursive``, ``explain statefulsets --api-version=apps/v1``, ``explain
pods.spec.containers.resources`` (``map[string]Quantity``), ``explain
deploy.spec.strategy.rollingUpdate`` (``IntOrString``) and an unknown field.
"""

from __future__ import annotations

import json
import shutil
from typing import Any

import pytest

from nodefence_sim.api.openapi import served_documents
from nodefence_sim.api.openapi_schemas import REF_PREFIX, SUBRESOURCE_KINDS, refs
from nodefence_sim.resources import RESOURCE_TYPES

from .support import Cluster, kubectl

needs_kubectl = pytest.mark.skipif(
    shutil.which("kubectl") is None, reason="kubectl is not installed"
)
API_VERSION_LINE = "  apiVersion\t<string>"
KIND_LINE = "  kind\t<string>"


def _document(key: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(served_documents()[key].body)
    return doc


def _gv_key(api_version: str) -> str:
    return f"apis/{api_version}" if "/" in api_version else f"api/{api_version}"


def _schemas_with_gvk(doc: dict[str, Any], api_version: str, kind: str) -> list[str]:
    group, _, version = api_version.rpartition("/")
    gvk = {"group": group, "version": version, "kind": kind}
    return [
        name
        for name, schema in doc["components"]["schemas"].items()
        if gvk in schema.get("x-kubernetes-group-version-kind", [])
    ]


def test_every_served_kind_has_a_schema_with_its_gvk() -> None:
    for rt in RESOURCE_TYPES:
        doc = _document(_gv_key(rt.group_version))
        names = _schemas_with_gvk(doc, rt.group_version, rt.kind)
        assert len(names) == 1, (rt.kind, names)
        schema = doc["components"]["schemas"][names[0]]
        assert {"apiVersion", "kind", "metadata"} <= schema["properties"].keys(), rt.kind
        for sub in rt.subresources:
            if sub in SUBRESOURCE_KINDS:
                assert _schemas_with_gvk(doc, *SUBRESOURCE_KINDS[sub]), (rt.kind, sub)


def test_every_ref_resolves_within_its_document() -> None:
    for key in served_documents():
        schemas = _document(key)["components"]["schemas"]
        for name, schema in schemas.items():
            for target in refs(schema):
                assert target in schemas, (key, name, target)


def test_documents_hold_only_what_their_kinds_reach() -> None:
    coordination = _document("apis/coordination.k8s.io/v1")["components"]["schemas"]
    assert "io.k8s.api.coordination.v1.Lease" in coordination
    assert not any(name.startswith("io.k8s.api.core.") for name in coordination)
    apps = _document("apis/apps/v1")["components"]["schemas"]
    assert "io.k8s.api.core.v1.PodSpec" in apps
    assert "io.k8s.api.autoscaling.v1.Scale" in apps
    assert "io.k8s.api.core.v1.NodeSpec" not in apps


def test_schemas_take_the_shapes_of_the_real_documents() -> None:
    schemas = _document("api/v1")["components"]["schemas"]
    meta = "io.k8s.apimachinery.pkg.apis.meta.v1."
    assert schemas["io.k8s.api.core.v1.Pod"]["properties"]["spec"] == {
        "allOf": [{"$ref": REF_PREFIX + "io.k8s.api.core.v1.PodSpec"}],
        "default": {},
    }
    assert schemas[meta + "Time"]["format"] == "date-time"
    assert schemas["io.k8s.apimachinery.pkg.util.intstr.IntOrString"]["format"] == "int-or-string"
    assert schemas["io.k8s.api.core.v1.Taint"]["required"] == ["key", "effect"]
    container = schemas["io.k8s.api.core.v1.Container"]["properties"]
    assert container["ports"]["x-kubernetes-list-map-keys"] == ["containerPort", "protocol"]
    assert container["ports"]["x-kubernetes-patch-merge-key"] == "containerPort"
    assert container["args"]["x-kubernetes-list-type"] == "atomic"
    assert container["resources"]["allOf"] == [
        {"$ref": REF_PREFIX + "io.k8s.api.core.v1.ResourceRequirements"}
    ]
    limits = schemas["io.k8s.api.core.v1.ResourceRequirements"]["properties"]["limits"]
    assert limits["additionalProperties"] == {
        "$ref": REF_PREFIX + "io.k8s.apimachinery.pkg.api.resource.Quantity"
    }
    secret = schemas["io.k8s.api.core.v1.Secret"]["properties"]["data"]
    assert secret["additionalProperties"] == {"format": "byte", "type": "string"}
    finalizers = schemas[meta + "ObjectMeta"]["properties"]["finalizers"]
    assert finalizers["x-kubernetes-list-type"] == "set"
    assert schemas[meta + "LabelSelector"]["x-kubernetes-map-type"] == "atomic"
    generation = schemas[meta + "ObjectMeta"]["properties"]["generation"]
    assert generation == {"format": "int64", "type": "integer"}


async def test_index_names_each_document_by_its_hash(cluster: Cluster) -> None:
    async with cluster.session() as session:
        async with session.get(cluster.url + "/openapi/v3") as response:
            # Served as text/plain, as the real server's sniffed Content-Type says.
            index = json.loads(await response.text())
        url = index["paths"]["apis/apps/v1"]["serverRelativeURL"]
        digest = url.split("?hash=", 1)[1]
        async with session.get(cluster.url + url) as response:
            assert response.status == 200
            assert response.headers["ETag"] == f'"{digest}"'
            assert response.headers["Cache-Control"] == "public, immutable"
            body = await response.read()
        if cluster.sim is not None:
            assert body == served_documents()["apis/apps/v1"].body
        headers = {"If-None-Match": f'"{digest}"'}
        async with session.get(cluster.url + url, headers=headers) as response:
            assert response.status == 304
        stale = cluster.url + "/openapi/v3/apis/apps/v1?hash=0"
        async with session.get(stale, allow_redirects=False) as response:
            assert response.status == 301
            assert response.headers["Location"] == url


@pytest.mark.kubectl
@needs_kubectl
async def test_explain_a_kind(cluster: Cluster) -> None:
    code, out = await kubectl(cluster, "explain", "pods")
    assert code == 0, out
    lines = out.splitlines()
    assert lines[:3] == ["KIND:       Pod", "VERSION:    v1", ""]
    assert "DESCRIPTION:" in lines
    fields = [line for line in lines if line.startswith("  ") and "\t" in line]
    assert fields == [
        API_VERSION_LINE,
        KIND_LINE,
        "  metadata\t<ObjectMeta>",
        "  spec\t<PodSpec>",
        "  status\t<PodStatus>",
    ]
    assert (
        "    APIVersion defines the versioned schema of this representation of an object." in lines
    )


@pytest.mark.kubectl
@needs_kubectl
async def test_explain_a_list_of_structs(cluster: Cluster) -> None:
    code, out = await kubectl(cluster, "explain", "pod.spec.containers")
    assert code == 0, out
    lines = out.splitlines()
    assert lines[:4] == ["KIND:       Pod", "VERSION:    v1", "", "FIELD: containers <[]Container>"]
    for line in (
        "  image\t<string>",
        "  name\t<string> -required-",
        "  ports\t<[]ContainerPort>",
        "  env\t<[]EnvVar>",
        "  resources\t<ResourceRequirements>",
        "  stdin\t<boolean>",
        "  args\t<[]string>",
    ):
        assert line in lines, line
    code, out = await kubectl(cluster, "explain", "pods.spec.containers.resources")
    assert code == 0, out
    assert "  limits\t<map[string]Quantity>" in out.splitlines()


@pytest.mark.kubectl
@needs_kubectl
async def test_explain_a_scalar_of_a_grouped_kind(cluster: Cluster) -> None:
    code, out = await kubectl(cluster, "explain", "deployment.spec.replicas")
    assert code == 0, out
    assert out.splitlines()[:5] == [
        "GROUP:      apps",
        "KIND:       Deployment",
        "VERSION:    v1",
        "",
        "FIELD: replicas <integer>",
    ]
    code, out = await kubectl(cluster, "explain", "deploy.spec.strategy.rollingUpdate")
    assert code == 0, out
    lines = out.splitlines()
    assert "  maxSurge\t<IntOrString>" in lines
    assert "  maxUnavailable\t<IntOrString>" in lines


@pytest.mark.kubectl
@needs_kubectl
async def test_explain_recursive(cluster: Cluster) -> None:
    code, out = await kubectl(cluster, "explain", "nodes.spec.taints", "--recursive")
    assert code == 0, out
    lines = out.splitlines()
    assert lines[:4] == ["KIND:       Node", "VERSION:    v1", "", "FIELD: taints <[]Taint>"]
    fields = lines[lines.index("FIELDS:") + 1 :]
    # Field lines only: the real schemas add an ``enum:`` line under effect (see the README).
    assert [line for line in fields if "\t" in line] == [
        "  effect\t<string> -required-",
        "  key\t<string> -required-",
        "  timeAdded\t<string>",
        "  value\t<string>",
    ]


@pytest.mark.kubectl
@needs_kubectl
async def test_explain_with_an_api_version(cluster: Cluster) -> None:
    code, out = await kubectl(cluster, "explain", "statefulsets", "--api-version=apps/v1")
    assert code == 0, out
    lines = out.splitlines()
    assert lines[:4] == ["GROUP:      apps", "KIND:       StatefulSet", "VERSION:    v1", ""]
    assert "  spec\t<StatefulSetSpec>" in lines
    assert "  status\t<StatefulSetStatus>" in lines


@pytest.mark.kubectl
@needs_kubectl
async def test_explain_an_unknown_field(cluster: Cluster) -> None:
    code, out = await kubectl(cluster, "explain", "pods.spec.foo")
    assert code == 1
    assert out.splitlines()[-1] == 'error: field "foo" does not exist'
