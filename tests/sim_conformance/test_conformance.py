"""Real kubectl 1.32 and the official ``kubernetes`` Python client against the simulated seed
cluster, each step asserting what a real cluster answers.

Verified with kubectl:
- ``kubectl apply -k deploy/overlays/deployment`` (client-side, without the admission policies,
  as a cluster older than 1.30 takes it), then ``get`` of every object it made: namespace,
  serviceaccount, role, clusterrole, rolebinding, clusterrolebinding, configmap, service,
  deployment, poddisruptionbudget, networkpolicies, priorityclass
- ``kubectl get svc,sa,pdb,netpol,cronjob,rolebinding`` columns as the real printers
- ``kubectl get --raw /readyz?verbose``, ``/livez``, ``/healthz``
- ``kubectl scale deployment --replicas=N`` and ``kubectl get deployment`` reporting it
- ``kubectl drain NODE --ignore-daemonsets --delete-emptydir-data``: cordon, evictions
  through ``pods/eviction``, a PodDisruptionBudget refusal retried ("Cannot evict pod as it
  would violate the pod's disruption budget."), ``node/NAME drained``
- ``kubectl logs`` and ``kubectl exec``: refused with "the simulated cluster has no container
  runtime"
- ``kubectl get configmaps --chunk-size=2`` (limit/continue paging)

The health endpoints and paging run on both backends; the rest on the simulator only: they
apply the overlay's cluster-wide objects, drain a seed node, evict seed pods or read the
simulator's own store and messages, none of which the shared real cluster may see.

Verified with the ``kubernetes`` client: ``CoreV1Api.list_pod_for_all_namespaces(limit=,
_continue=)``, ``create_namespaced_secret`` (stringData), ``create_namespaced_service``,
``AppsV1Api.read_namespaced_deployment_scale`` / ``patch_namespaced_deployment_scale``,
``CoreV1Api.create_namespaced_pod_eviction``, ``AuthorizationV1Api
.create_self_subject_access_review`` (JSON; allowed, with the reason saying why),
``BatchV1Api.create_namespaced_job``.

Protobuf bodies (``kubectl create <kind>``, ``auth can-i``) are covered in test_protobuf.py,
field validation in test_field_validation.py.

``kubectl explain`` is covered in test_explain.py.

Still unsupported, with the error a user sees:
- ``kubectl explain --output=plaintext-openapiv2``: ``Error from server (NotFound)`` (no
  ``/openapi/v2``)
- Jobs and CronJobs are stored and defaulted, but no controller runs their pods
"""

from __future__ import annotations

import asyncio
import json
import shutil
from typing import Any

import aiohttp
import pytest
import yaml
from kubernetes import client, watch

from nodefence_sim.resources import CONFIGMAPS
from nodefence_sim.testing import SimulatorHandle

from .support import Cluster, api, kubectl, until

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]

# The Deployment overlay without the admission policies, as the seed (Kubernetes 1.24.8) takes it.
OVERLAY = "tests/sim_conformance/overlay-before-1.30"


async def test_apply_kustomize_overlay_creates_every_object(seed: SimulatorHandle) -> None:
    code, out = await kubectl(seed, "apply", "-k", OVERLAY)
    assert code == 0, out
    code, rendered = await kubectl(seed, "kustomize", OVERLAY)
    assert code == 0, rendered
    code, listing = await kubectl(
        seed,
        "get",
        "--all-namespaces",
        "namespace,serviceaccount,role,clusterrole,rolebinding,clusterrolebinding,configmap,"
        "service,deployment,cronjob,poddisruptionbudget,networkpolicy,priorityclass",
        "-o",
        "json",
    )
    assert code == 0, listing
    found = {
        (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])
        for o in json.loads(listing)["items"]
    }
    for doc in yaml.safe_load_all(rendered):
        if doc:
            key = (doc["kind"], doc["metadata"].get("namespace", ""), doc["metadata"]["name"])
            assert key in found, key
    # Applying again changes nothing, as on a real cluster.
    code, again = await kubectl(seed, "apply", "-k", OVERLAY)
    assert code == 0, again
    assert "deployment.apps/nodefence unchanged" in again


async def test_get_columns_of_the_new_kinds(seed: SimulatorHandle) -> None:
    await kubectl(seed, "apply", "-k", OVERLAY)
    # The Deployment's replicas reconcile themselves: the overlay ships no CronJob any more.
    code, out = await kubectl(
        seed, "-n", "nodefence", "create", "cronjob", "tick", "--image=busybox",
        "--schedule=*/5 * * * *",
    )  # fmt: skip
    assert code == 0, out
    code, out = await kubectl(seed, "get", "-n", "nodefence", "svc,sa,pdb,netpol,cronjob")
    assert code == 0, out
    lines = [" ".join(line.split()) for line in out.splitlines()]
    assert "NAME TYPE CLUSTER-IP EXTERNAL-IP PORT(S) AGE" in lines
    assert "NAME SECRETS AGE" in lines
    assert "NAME MIN AVAILABLE MAX UNAVAILABLE ALLOWED DISRUPTIONS AGE" in lines
    assert "NAME POD-SELECTOR AGE" in lines
    assert "NAME SCHEDULE SUSPEND ACTIVE LAST SCHEDULE AGE" in lines
    assert any(line.startswith("service/nodefence ClusterIP 10.96.") for line in lines)


async def test_health_endpoints(cluster: Cluster) -> None:
    code, out = await kubectl(cluster, "get", "--raw", "/readyz?verbose")
    assert code == 0
    assert out.splitlines()[-1] == "readyz check passed"
    for path in ("/livez", "/healthz"):
        assert await kubectl(cluster, "get", "--raw", path) == (0, "ok")


async def test_scale_and_drain_with_a_disruption_budget(seed: SimulatorHandle) -> None:
    await kubectl(seed, "apply", "-k", OVERLAY)
    code, out = await kubectl(seed, "-n", "nodefence", "scale", "deploy/nodefence", "--replicas=1")
    assert (code, out.strip()) == (0, "deployment.apps/nodefence scaled")

    async def one_ready() -> bool:
        _, got = await kubectl(seed, "-n", "nodefence", "get", "deploy/nodefence", "-o", "json")
        status = json.loads(got)["status"]
        return bool(status.get("readyReplicas") == 1 and status.get("replicas") == 1)

    await until(one_ready, "one replica")
    _, pods = await kubectl(
        seed,
        "-n",
        "nodefence",
        "get",
        "pods",
        "-l",
        "app.kubernetes.io/name=nodefence",
        "-o",
        "json",
    )
    node = next(
        p["spec"]["nodeName"]
        for p in json.loads(pods)["items"]
        if not p["metadata"].get("deletionTimestamp")
    )
    # minAvailable 1 with one replica: the budget refuses, drain retries until its timeout.
    code, out = await kubectl(
        seed, "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=3s"
    )
    assert code != 0
    assert "Cannot evict pod as it would violate the pod's disruption budget." in out
    await kubectl(seed, "uncordon", node)
    await kubectl(seed, "-n", "nodefence", "scale", "deploy/nodefence", "--replicas=3")
    code, out = await kubectl(
        seed, "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=30s"
    )
    assert code == 0, out
    assert f"node/{node} drained" in out


async def test_logs_and_exec_say_there_is_no_runtime(seed: SimulatorHandle) -> None:
    _, pods = await kubectl(seed, "-n", "openstack", "get", "pods", "-o", "name")
    name = pods.split()[0]
    for args in (("logs", name), ("exec", name, "--", "true")):
        code, out = await kubectl(seed, "-n", "openstack", *args)
        assert code == 1
        assert "the simulated cluster has no container runtime" in out


async def test_chunked_get_pages_through_every_object(cluster: Cluster) -> None:
    ns = cluster.namespace
    for name in ("a", "b", "c", "d", "e"):
        assert (await kubectl(cluster, "create", "-n", ns, "configmap", name))[0] == 0
    _, whole = await kubectl(cluster, "get", "configmaps", "-n", ns, "-o", "name")
    _, chunked = await kubectl(
        cluster, "get", "configmaps", "-n", ns, "-o", "name", "--chunk-size=2"
    )
    assert chunked.split() == whole.split()
    assert {f"configmap/{name}" for name in "abcde"} <= set(whole.split())


async def test_protobuf_of_an_undecodable_kind_is_a_clear_415(seed: SimulatorHandle) -> None:
    """A kind without a protobuf field table is refused naming it; bytes that are not
    protobuf are a 400; neither stores anything."""
    type_meta = b"\x0a\x02v1" + b"\x12\x09PodBinder"  # apiVersion (1), kind (2)
    envelope = b"k8s\x00\x0a" + bytes([len(type_meta)]) + type_meta + b"\x12\x00"
    garbage = b"k8s\x00\x0a\xff"
    async with aiohttp.ClientSession() as session:
        replies = []
        for body in (envelope, garbage):
            async with session.post(
                seed.url + "/api/v1/namespaces/openstack/configmaps",
                data=body,
                headers={"Content-Type": "application/vnd.kubernetes.protobuf"},
            ) as response:
                replies.append((response.status, await response.json()))
    (refused, status), (bad, garbled) = replies
    assert (refused, status["reason"]) == (415, "UnsupportedMediaType")
    assert "no protobuf field table for PodBinder in v1" in status["message"]
    assert (bad, garbled["reason"]) == (400, "BadRequest")
    assert "could not be decoded as protobuf" in garbled["message"]
    code, out = await kubectl(seed, "get", "-n", "openstack", "configmaps", "-o", "name")
    assert code == 0
    assert len(out.split()) == len(seed.sim.store.items(CONFIGMAPS, "openstack"))


def _client_calls(handle: SimulatorHandle) -> dict[str, Any]:
    """The official client's calls, run in a thread (the client blocks)."""
    with api(handle) as api_client:
        core = client.CoreV1Api(api_client)
        apps = client.AppsV1Api(api_client)
        first = core.list_pod_for_all_namespaces(limit=3)
        rest = core.list_pod_for_all_namespaces(limit=1000, _continue=first.metadata._continue)
        # A list at the first page's resourceVersion: what the pages must add up to.
        total = len(
            core.list_pod_for_all_namespaces(
                resource_version=first.metadata.resource_version,
                resource_version_match="NotOlderThan",
            ).items
        )
        secret = core.create_namespaced_secret(
            "openstack",
            client.V1Secret(metadata=client.V1ObjectMeta(name="s"), string_data={"k": "v"}),
        )
        service = core.create_namespaced_service(
            "openstack",
            client.V1Service(
                metadata=client.V1ObjectMeta(name="web"),
                spec=client.V1ServiceSpec(
                    selector={"app": "web"}, ports=[client.V1ServicePort(port=80)]
                ),
            ),
        )
        deployments = apps.list_namespaced_deployment("openstack").items
        target = deployments[0].metadata.name
        scale = apps.read_namespaced_deployment_scale(target, "openstack")
        scaled = apps.patch_namespaced_deployment_scale(
            target, "openstack", {"spec": {"replicas": scale.spec.replicas + 1}}
        )
        review = client.AuthorizationV1Api(api_client).create_self_subject_access_review(
            client.V1SelfSubjectAccessReview(
                spec=client.V1SelfSubjectAccessReviewSpec(
                    resource_attributes=client.V1ResourceAttributes(verb="delete", resource="nodes")
                )
            )
        )
        job = client.BatchV1Api(api_client).create_namespaced_job(
            "openstack",
            client.V1Job(
                metadata=client.V1ObjectMeta(name="once"),
                spec=client.V1JobSpec(
                    template=client.V1PodTemplateSpec(
                        spec=client.V1PodSpec(
                            restart_policy="Never",
                            containers=[client.V1Container(name="c", image="busybox")],
                        )
                    )
                ),
            ),
        )
        # A running pod: one the scale-up just created may not be bound yet, and an unbound pod
        # is deleted at once, with no grace period to see.
        pods = core.list_namespaced_pod("openstack")
        victim = next(
            p
            for p in pods.items
            if p.metadata.owner_references
            and p.metadata.owner_references[0].kind == "ReplicaSet"
            and p.spec.node_name
            and p.status.phase == "Running"
            and not p.metadata.deletion_timestamp
        )
        core.create_namespaced_pod_eviction(
            victim.metadata.name,
            "openstack",
            client.V1Eviction(
                metadata=client.V1ObjectMeta(name=victim.metadata.name, namespace="openstack"),
                delete_options=client.V1DeleteOptions(grace_period_seconds=5),
            ),
        )
        # The kubelet confirms a graceful deletion about a second later, so a read after the
        # eviction may find the pod gone; the watch from before it sees the graceful step.
        after = next(
            event["object"]
            for event in watch.Watch().stream(
                core.list_namespaced_pod,
                "openstack",
                field_selector=f"metadata.name={victim.metadata.name}",
                resource_version=pods.metadata.resource_version,
                timeout_seconds=30,
            )
            if event["object"].metadata.deletion_timestamp
        )
        return {
            "pages": (len(first.items), first.metadata.remaining_item_count, len(rest.items)),
            "total": total,
            "secret": secret.data,
            "service": service.spec.cluster_ip,
            "scale": (scale.spec.replicas, scaled.spec.replicas, scaled.status.selector),
            "review": (review.status.allowed, review.status.reason),
            "job": job.spec.selector.match_labels,
            "evicted": (
                bool(after.metadata.deletion_timestamp),
                after.metadata.deletion_grace_period_seconds,
            ),
        }


async def test_the_official_python_client(seed: SimulatorHandle) -> None:
    got = await asyncio.to_thread(_client_calls, seed)
    shown, remaining, rest = got["pages"]
    assert (shown, shown + remaining, shown + rest) == (3, got["total"], got["total"])
    assert got["secret"] == {"k": "dg=="}
    assert got["service"].startswith("10.96.")
    before, after, selector = got["scale"]
    assert after == before + 1
    assert selector
    allowed, reason = got["review"]
    assert allowed is True
    assert "no authorization" in reason
    assert set(got["job"]) == {"controller-uid"}
    assert got["evicted"] == (True, 5)
