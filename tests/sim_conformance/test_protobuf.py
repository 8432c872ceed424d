"""Protobuf request bodies: the decoder on hand-built wire bytes, then kubectl 1.32's generators,
``auth can-i`` and ``drain`` (which send protobuf and never fall back to JSON) against the seed
cluster, each object read back as a real cluster returns it.

Verified with kubectl: ``create namespace``, ``create configmap --from-literal``, ``create secret
generic --from-literal``, ``create deployment --image --replicas``, ``create job --image``,
``create cronjob --image --schedule``, ``create service clusterip --tcp``, ``create
serviceaccount``, ``create role --verb --resource``, ``create rolebinding --role --user``,
``create clusterrole``, ``create clusterrolebinding --clusterrole --group``, ``create
poddisruptionbudget --selector --min-available``, ``auth can-i create
pods`` (``yes``). kubectl 1.32's ``drain`` sends its evictions as JSON; client-go's typed
clients send them, and updates, as protobuf, which raw requests stand in for. Read back with the
official client: ``read_namespaced_secret`` (data as sent), ``read_namespaced_deployment``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from typing import Any

import aiohttp
import pytest
from kubernetes import client

from nodefence_sim.api.protobuf import (
    MAGIC,
    WireError,
    decode_body,
    decode_message,
    envelope,
    fields,
    read_varint,
    signed,
)
from nodefence_sim.api.protobuf import (
    MEDIA_TYPE as PROTOBUF,
)
from nodefence_sim.errors import ApiError
from nodefence_sim.resources import CONFIGMAPS, PODS
from nodefence_sim.testing import SimulatorHandle

from .support import api, kubectl

# ---------------------------------------------------------------- wire helpers


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def tag(number: int, wire: int) -> bytes:
    return varint(number << 3 | wire)


def vfield(number: int, value: int) -> bytes:
    return tag(number, 0) + varint(value)


def lfield(number: int, value: bytes | str) -> bytes:
    data = value.encode() if isinstance(value, str) else value
    return tag(number, 2) + varint(len(data)) + data


def entry(number: int, key: str, value: bytes | str) -> bytes:
    return lfield(number, lfield(1, key) + lfield(2, value))


def unknown(api_version: str, kind: str, raw: bytes) -> bytes:
    return MAGIC + lfield(1, lfield(1, api_version) + lfield(2, kind)) + lfield(2, raw)


# ------------------------------------------------------------------ unit tests


def test_varints_little_endian_seven_bits_at_a_time() -> None:
    assert read_varint(b"\x96\x01", 0) == (150, 2)
    assert read_varint(b"\x00", 0) == (0, 1)
    assert read_varint(varint(2**63), 0)[0] == 2**63
    with pytest.raises(WireError, match="unexpected EOF"):
        read_varint(b"\x96", 0)


def test_negative_ints_are_tens_complement_not_zigzag() -> None:
    # Kubernetes uses int32/int64, never sint: -1 is ten bytes of 0xff...01.
    encoded = varint(-1)
    assert len(encoded) == 10
    value, _ = read_varint(encoded, 0)
    assert signed(value, 32) == -1
    assert signed(value, 64) == -1
    assert signed(1, 32) == 1


def test_fields_splits_varint_length_delimited_and_fixed() -> None:
    buf = vfield(1, 7) + lfield(2, "ab") + tag(3, 1) + b"\x01" * 8 + tag(4, 5) + b"\x02" * 4
    assert list(fields(buf)) == [(1, 0, 7), (2, 2, b"ab"), (3, 1, b"\x01" * 8), (4, 5, b"\x02" * 4)]
    with pytest.raises(WireError, match="illegal wireType 3"):
        list(fields(tag(1, 3)))
    with pytest.raises(WireError, match="unexpected EOF"):
        list(fields(tag(1, 2) + varint(5) + b"ab"))


def test_envelope_gives_type_meta_and_raw() -> None:
    assert envelope(unknown("v1", "ConfigMap", b"xyz")) == ("v1", "ConfigMap", b"xyz")
    with pytest.raises(WireError, match="prefix"):
        envelope(b'{"kind": "ConfigMap"}')


def test_configmap_with_maps_nested_metadata_and_an_unknown_field() -> None:
    meta = lfield(1, "cfg") + lfield(3, "") + entry(11, "app", "web") + lfield(8, b"")
    raw = (
        lfield(1, meta)
        + entry(2, "k", "v")
        + entry(2, "empty", "")
        + entry(3, "bin", b"\x00\xff")
        + vfield(99, 1)  # a field number ConfigMap does not have: dropped, as Go drops it
    )
    assert decode_body(unknown("v1", "ConfigMap", raw)) == {
        "kind": "ConfigMap",
        "apiVersion": "v1",
        "metadata": {"name": "cfg", "labels": {"app": "web"}, "creationTimestamp": None},
        "data": {"k": "v", "empty": ""},
        "binaryData": {"bin": base64.b64encode(b"\x00\xff").decode()},
    }


def test_zeros_kept_only_where_go_json_keeps_them() -> None:
    # replicas is *int32 (0 means zero replicas); minReadySeconds an omitempty int32; paused
    # an omitempty bool. Go's protobuf marshaller writes all three.
    spec = vfield(1, 0) + vfield(5, 0) + vfield(7, 0)
    assert decode_message("apps.v1.DeploymentSpec", spec) == {"replicas": 0}
    # NodeAddress.address has no omitempty; its type has.
    assert decode_message("core.v1.NodeAddress", lfield(1, "") + lfield(2, "")) == {"address": ""}


def test_packed_and_unpacked_repeated_ints() -> None:
    unpacked = vfield(3, 3) + vfield(3, 4)
    packed = lfield(3, varint(3) + varint(4))
    for buf in (unpacked, packed):
        assert decode_message("batch.v1.PodFailurePolicyOnExitCodesRequirement", buf) == {
            "values": [3, 4]
        }


def test_wrappers_quantity_intorstring_time_and_inline_structs() -> None:
    resources = entry(1, "cpu", lfield(1, "250m")) + entry(2, "memory", lfield(1, "64Mi"))
    container = lfield(1, "c") + lfield(2, "busybox") + lfield(8, resources)
    volume = lfield(1, "data") + lfield(2, lfield(2, lfield(1, "Memory")))  # emptyDir, inline
    spec = lfield(1, volume) + lfield(2, container)
    assert decode_message("core.v1.PodSpec", spec) == {
        "volumes": [{"name": "data", "emptyDir": {"medium": "Memory"}}],
        "containers": [
            {
                "name": "c",
                "image": "busybox",
                "resources": {"limits": {"cpu": "250m"}, "requests": {"memory": "64Mi"}},
            }
        ],
    }
    port = vfield(3, 80) + lfield(4, vfield(1, 1) + lfield(3, "http"))
    assert decode_message("core.v1.ServicePort", port) == {"port": 80, "targetPort": "http"}
    numeric = vfield(3, 80) + lfield(4, vfield(1, 0) + vfield(2, 8080))
    assert decode_message("core.v1.ServicePort", numeric)["targetPort"] == 8080
    stamp = lfield(8, vfield(1, 1700000000) + vfield(2, 5))
    assert decode_message("meta.v1.ObjectMeta", stamp) == {
        "creationTimestamp": "2023-11-14T22:13:20Z"
    }
    renew = lfield(4, vfield(1, 1700000000) + vfield(2, 123456000))
    assert decode_message("coordination.v1.LeaseSpec", renew) == {
        "renewTime": "2023-11-14T22:13:20.123456Z"
    }


def test_unknown_kind_is_415_naming_it_and_garbage_is_400() -> None:
    with pytest.raises(ApiError) as refused:
        decode_body(unknown("example.com/v1", "Widget", b""))
    assert refused.value.code == 415
    assert refused.value.reason == "UnsupportedMediaType"
    assert "Widget" in refused.value.message
    with pytest.raises(ApiError) as garbage:
        decode_body(MAGIC + b"\xff")
    assert garbage.value.code == 400
    with pytest.raises(ApiError) as wrong_wire:
        decode_body(unknown("v1", "ConfigMap", vfield(1, 5)))  # metadata as a varint
    assert wrong_wire.value.code == 400
    assert "wrong wireType" in wrong_wire.value.message


# --------------------------------------------------------------------- kubectl


async def get_json(handle: SimulatorHandle, *args: str) -> Any:
    code, out = await kubectl(handle, "get", *args, "-o", "json")
    assert code == 0, out
    return json.loads(out)


@pytest.mark.kubectl
async def test_kubectl_generators_send_protobuf_that_is_stored(seed: SimulatorHandle) -> None:
    ns = ("-n", "demo")
    created = [
        ("create", "namespace", "demo"),
        ("create", *ns, "configmap", "cfg", "--from-literal=k=v", "--from-literal=a=b"),
        ("create", *ns, "secret", "generic", "creds", "--from-literal=password=s3cr3t"),
        ("create", *ns, "deployment", "web", "--image=nginx:1.27", "--replicas=3"),
        ("create", *ns, "job", "once", "--image=busybox"),
        ("create", *ns, "cronjob", "tick", "--image=busybox", "--schedule=*/5 * * * *"),
        ("create", *ns, "service", "clusterip", "web", "--tcp=80:8080"),
        ("create", *ns, "serviceaccount", "robot"),
        ("create", *ns, "role", "reader", "--verb=get,list", "--resource=pods"),
        ("create", *ns, "rolebinding", "read", "--role=reader", "--user=alice"),
        ("create", "clusterrole", "node-reader", "--verb=get", "--resource=nodes"),
        ("create", "clusterrolebinding", "nr", "--clusterrole=node-reader", "--group=ops"),
        ("create", *ns, "poddisruptionbudget", "web", "--selector=app=web", "--min-available=1"),
    ]
    for args in created:
        code, out = await kubectl(seed, *args)
        assert code == 0, (args, out)
        assert "created" in out, (args, out)

    namespace = await get_json(seed, "namespace", "demo")
    assert namespace["status"]["phase"] == "Active"
    configmap = await get_json(seed, *ns, "configmap", "cfg")
    assert configmap["data"] == {"k": "v", "a": "b"}
    secret = await get_json(seed, *ns, "secret", "creds")
    assert (secret["type"], secret["data"]) == ("Opaque", {"password": "czNjcjN0"})
    deployment = await get_json(seed, *ns, "deployment", "web")
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["selector"] == {"matchLabels": {"app": "web"}}
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert (container["name"], container["image"]) == ("nginx", "nginx:1.27")
    assert container["imagePullPolicy"] == "IfNotPresent"  # defaulted, as on create from JSON
    job = await get_json(seed, *ns, "job", "once")
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == "busybox"
    cronjob = await get_json(seed, *ns, "cronjob", "tick")
    assert cronjob["spec"]["schedule"] == "*/5 * * * *"
    job_template = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert job_template["restartPolicy"] == "OnFailure"
    service = await get_json(seed, *ns, "service", "web")
    assert service["spec"]["ports"] == [
        {"name": "80-8080", "port": 80, "protocol": "TCP", "targetPort": 8080}
    ]
    assert service["spec"]["clusterIP"].startswith("10.96.")
    assert service["spec"]["selector"] == {"app": "web"}
    await get_json(seed, *ns, "serviceaccount", "robot")
    role = await get_json(seed, *ns, "role", "reader")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]
    binding = await get_json(seed, *ns, "rolebinding", "read")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "reader",
    }
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}
    ]
    clusterrole = await get_json(seed, "clusterrole", "node-reader")
    assert clusterrole["rules"][0]["resources"] == ["nodes"]
    crb = await get_json(seed, "clusterrolebinding", "nr")
    assert crb["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "ops"}
    ]
    pdb = await get_json(seed, *ns, "poddisruptionbudget", "web")
    assert pdb["spec"] == {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}

    # Read back with the official client: what a typed client sees.
    def read() -> tuple[dict[str, str], int]:
        with api(seed) as api_client:
            got = client.CoreV1Api(api_client).read_namespaced_secret("creds", "demo")
            deploy = client.AppsV1Api(api_client).read_namespaced_deployment("web", "demo")
            return got.data, deploy.spec.replicas

    data, replicas = await asyncio.to_thread(read)
    assert base64.b64decode(data["password"]) == b"s3cr3t"
    assert replicas == 3


@pytest.mark.kubectl
async def test_zero_replicas_survive_protobuf(seed: SimulatorHandle) -> None:
    code, out = await kubectl(
        seed, "create", "-n", "openstack", "deployment", "idle", "--image=x", "--replicas=0"
    )
    assert code == 0, out
    deployment = await get_json(seed, "-n", "openstack", "deployment", "idle")
    assert deployment["spec"]["replicas"] == 0


@pytest.mark.kubectl
async def test_create_of_an_existing_name_is_409_after_decoding(seed: SimulatorHandle) -> None:
    assert (await kubectl(seed, "create", "namespace", "twice"))[0] == 0
    code, out = await kubectl(seed, "create", "namespace", "twice")
    assert code == 1
    assert 'namespaces "twice" already exists' in out


@pytest.mark.kubectl
async def test_auth_can_i_sends_a_protobuf_review(seed: SimulatorHandle) -> None:
    assert await kubectl(seed, "auth", "can-i", "create", "pods") == (0, "yes\n")
    code, out = await kubectl(seed, "auth", "can-i", "delete", "nodes", "--all-namespaces")
    assert (code, out) == (0, "yes\n")


async def post(handle: SimulatorHandle, method: str, path: str, body: bytes) -> tuple[int, Any]:
    """A raw request with a protobuf body, as a typed client-go client sends it."""
    headers = {
        "Content-Type": PROTOBUF,
        "Accept": f"{PROTOBUF}, application/json",
    }
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, handle.url + path, data=body, headers=headers) as response,
    ):
        assert response.content_type == "application/json"
        return response.status, await response.json()


async def test_protobuf_eviction_uses_its_delete_options(seed: SimulatorHandle) -> None:
    pods = seed.sim.store.items(PODS)
    victim = next(
        p
        for p in pods
        if (p["metadata"].get("ownerReferences") or [{}])[0].get("kind") == "ReplicaSet"
    )
    name = victim["metadata"]["name"]
    before = victim["metadata"]["resourceVersion"]
    meta = lfield(1, name) + lfield(3, "openstack")
    raw = lfield(1, meta) + lfield(2, vfield(1, 7))  # deleteOptions.gracePeriodSeconds = 7
    status, reply = await post(
        seed,
        "POST",
        f"/api/v1/namespaces/openstack/pods/{name}/eviction",
        unknown("policy/v1", "Eviction", raw),
    )
    assert (status, reply["status"]) == (201, "Success"), reply
    # The pod's kubelet may finish the graceful delete before the pod is read back: what the
    # eviction wrote is read from the pod's changes since before it (a watch from that
    # resourceVersion replays them), not from the pod, which may already be gone.
    changes = seed.sim.store.watch(PODS, "openstack", None, f"metadata.name={name}", before)

    async def marked_for_deletion() -> dict[str, Any]:
        async with contextlib.aclosing(changes):
            async for change in changes:
                if change.object["metadata"].get("deletionTimestamp"):
                    return change.object
        raise AssertionError(f"pod {name} was never marked for deletion")

    evicted = await asyncio.wait_for(marked_for_deletion(), 30)
    assert evicted["metadata"]["deletionGracePeriodSeconds"] == 7


async def test_protobuf_update_replaces_the_object(seed: SimulatorHandle) -> None:
    created = await post(
        seed,
        "POST",
        "/api/v1/namespaces/openstack/configmaps",
        unknown("v1", "ConfigMap", lfield(1, lfield(1, "pb")) + entry(2, "k", "v1")),
    )
    assert created[0] == 201, created
    rv = created[1]["metadata"]["resourceVersion"]
    meta = lfield(1, "pb") + lfield(3, "openstack") + lfield(6, rv)
    status, updated = await post(
        seed,
        "PUT",
        "/api/v1/namespaces/openstack/configmaps/pb",
        unknown("v1", "ConfigMap", lfield(1, meta) + entry(2, "k", "v2")),
    )
    assert status == 200, updated
    assert seed.sim.store.get(CONFIGMAPS, "openstack", "pb")["data"] == {"k": "v2"}
    # A stale resourceVersion is the usual 409, whatever the encoding.
    stale = await post(
        seed,
        "PUT",
        "/api/v1/namespaces/openstack/configmaps/pb",
        unknown("v1", "ConfigMap", lfield(1, meta) + entry(2, "k", "v3")),
    )
    assert (stale[0], stale[1]["reason"]) == (409, "Conflict")


async def test_protobuf_access_review_is_answered(seed: SimulatorHandle) -> None:
    attributes = lfield(2, "create") + lfield(5, "pods")
    raw = lfield(2, lfield(1, attributes))
    status, review = await post(
        seed,
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        unknown("authorization.k8s.io/v1", "SelfSubjectAccessReview", raw),
    )
    assert status == 201
    assert review["spec"] == {"resourceAttributes": {"verb": "create", "resource": "pods"}}
    assert review["status"]["allowed"] is True
