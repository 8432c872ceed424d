"""Load a simulator scenario into the real cluster: the same files, the same creation order
(``nodefence_sim.scenario``), each object POSTed to the path its ``resources.BY_KIND`` type gives.

What the simulator fakes and the real cluster needs is added here: Nodes become kwok nodes (a
``providerID``, a bootID, the machine's ``systemUUID`` that its BMC reports, capacity for the
workloads), the StatefulSets' volume claims get pre-bound PersistentVolumes of a CSI driver so
their pods can schedule, and the ``sim.nodefence.io/*`` placement hints are dropped: the real
scheduler places the pods.

A scenario's nodes each get a kwok of their own (:func:`load`), so that one node's kubelet can
die alone. A cluster of thousands (``python -m nodefence_sim.scale --backend real``) is loaded
by :func:`load_shared` instead: one kwok holds every node, and the objects of each kind are
created several at a time.
"""

from __future__ import annotations

import copy
import functools
import itertools
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from nodefence_sim.controllers.kubelet import system_uuid
from nodefence_sim.errors import ApiError
from nodefence_sim.real.components import KUBELET_LABEL, KUBELET_UP
from nodefence_sim.real.rest import JSON, Rest
from nodefence_sim.resources import ResourceType
from nodefence_sim.scenario import ALWAYS_PRESENT_NAMESPACES, Scenario, creation_order
from nodefence_sim.store import Obj

SIM_ANNOTATIONS = "sim.nodefence.io/"
# Set by the API server on every object; a create that carries them is refused.
SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation")
NODE_ANNOTATIONS = {
    "volumes.kubernetes.io/controller-managed-attach-detach": "true",
    "node.alpha.kubernetes.io/ttl": "0",
}
NODE_RESOURCES = {"cpu": "32", "memory": "256Gi", "pods": "110"}
# The CSI driver of the StatefulSets' volumes. It needs no attach (no external-attacher runs
# here), so pods start as soon as their claims are bound.
CSI_DRIVER = "csi.sim.nodefence.io"
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet")
READY_TIMEOUT = 300.0
# Creates in flight at once when loading a large cluster: the API server and etcd on two cores
# take about this many before a create waits on another.
PARALLEL_CREATES = 8
# Objects per page when listing the nodes or pods of a large cluster (as kubectl pages).
PAGE = 500
# The API server's Table form of a list (what kubectl get prints), without the objects.
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


@dataclass
class Loaded:
    """What the cluster was loaded with: each Node's manifest (registered again by
    ``recreate``) and its kwok's pod CIDR and node IP."""

    nodes: dict[str, Obj] = field(default_factory=dict)
    kwok: dict[str, tuple[str, str]] = field(default_factory=dict)


def collection_path(rt: ResourceType, namespace: str | None) -> str:
    prefix = f"/apis/{rt.group}/{rt.version}" if rt.group else f"/api/{rt.version}"
    if rt.namespaced:
        return f"{prefix}/namespaces/{namespace or 'default'}/{rt.plural}"
    return f"{prefix}/{rt.plural}"


def _without_sim_annotations(meta: dict[str, Any]) -> None:
    annotations = meta.get("annotations")
    if isinstance(annotations, dict):
        for key in [k for k in annotations if k.startswith(SIM_ANNOTATIONS)]:
            del annotations[key]
        if not annotations:
            del meta["annotations"]


def cleaned(obj: Obj) -> Obj:
    """The scenario object as a create request: no server-set fields, no simulator hints."""
    result = copy.deepcopy(obj)
    meta = result.setdefault("metadata", {})
    for key in SERVER_FIELDS:
        meta.pop(key, None)
    _without_sim_annotations(meta)
    template = (result.get("spec") or {}).get("template")
    if isinstance(template, dict) and isinstance(template.get("metadata"), dict):
        _without_sim_annotations(template["metadata"])
    return result


def node_manifest(obj: Obj) -> Obj:
    """A scenario Node as a kwok node registers: a fresh bootID, the machine's systemUUID."""
    node = cleaned(obj)
    name = str(node["metadata"]["name"])
    node["metadata"].setdefault("annotations", {}).update(NODE_ANNOTATIONS)
    node.setdefault("spec", {})["providerID"] = f"kwok://{name}"
    status = node.setdefault("status", {})
    status.pop("conditions", None)
    info = status.setdefault("nodeInfo", {})
    info["bootID"] = str(uuid.uuid4())
    info["systemUUID"] = system_uuid(name)
    status["capacity"] = dict(NODE_RESOURCES)
    status["allocatable"] = dict(NODE_RESOURCES)
    return node


def shared_node_manifest(obj: Obj, index: int) -> Obj:
    """A scenario Node for the one kwok of a large cluster: labelled as that kwok's, with its
    own pod CIDR and InternalIP (a kwok of its own would have been told them on its command
    line), so that pods on different nodes get different IPs."""
    node = node_manifest(obj)
    cidr, node_ip = _kwok_addresses(node, index)
    node["metadata"].setdefault("labels", {})[KUBELET_LABEL] = KUBELET_UP
    node["spec"]["podCIDR"] = cidr
    node["spec"]["podCIDRs"] = [cidr]
    status = node["status"]
    if not any(a.get("type") == "InternalIP" for a in status.get("addresses") or []):
        status["addresses"] = [
            *(status.get("addresses") or []),
            {"type": "InternalIP", "address": node_ip},
        ]
    return node


def _kwok_addresses(node: Obj, index: int) -> tuple[str, str]:
    """The pod CIDR and node IP kwok is given for ``node``: the scenario's own where it has
    them, else distinct ones per node."""
    spec, status = node.get("spec") or {}, node.get("status") or {}
    cidr = spec.get("podCIDR") or f"10.{100 + index // 250}.{index % 250}.0/24"
    internal = [
        a.get("address") for a in status.get("addresses") or [] if a.get("type") == "InternalIP"
    ]
    node_ip = internal[0] if internal else f"10.99.{index // 250}.{index % 250 + 1}"
    return str(cidr), str(node_ip)


def volume_objects(objects: Iterable[Obj]) -> list[tuple[str, Obj]]:
    """(collection path, object) for what the scenario's claims need: the CSIDriver, a
    StorageClass per class name used, and a PersistentVolume pre-bound to each claim a
    StatefulSet's volumeClaimTemplates will make."""
    classes: set[str] = set()
    volumes: list[Obj] = []
    for obj in objects:
        if obj.get("kind") == "PersistentVolumeClaim":
            name = (obj.get("spec") or {}).get("storageClassName")
            if name:
                classes.add(str(name))
        if obj.get("kind") != "StatefulSet":
            continue
        namespace = obj["metadata"].get("namespace") or "default"
        sts = obj["metadata"]["name"]
        spec = obj.get("spec") or {}
        for template in spec.get("volumeClaimTemplates") or []:
            claim_spec = template.get("spec") or {}
            storage_class = claim_spec.get("storageClassName") or ""
            if storage_class:
                classes.add(str(storage_class))
            size = ((claim_spec.get("resources") or {}).get("requests") or {}).get("storage")
            for ordinal in range(int(spec.get("replicas", 1))):
                claim = f"{template['metadata']['name']}-{sts}-{ordinal}"
                volumes.append(
                    {
                        "apiVersion": "v1",
                        "kind": "PersistentVolume",
                        "metadata": {"name": f"{namespace}-{claim}"},
                        "spec": {
                            "capacity": {"storage": size or "1Gi"},
                            "accessModes": claim_spec.get("accessModes") or ["ReadWriteOnce"],
                            "storageClassName": storage_class,
                            "persistentVolumeReclaimPolicy": "Retain",
                            "claimRef": {
                                "apiVersion": "v1",
                                "kind": "PersistentVolumeClaim",
                                "namespace": namespace,
                                "name": claim,
                            },
                            "csi": {"driver": CSI_DRIVER, "volumeHandle": f"{namespace}-{claim}"},
                        },
                    }
                )
    if not volumes and not classes:
        return []
    found: list[tuple[str, Obj]] = [
        (
            "/apis/storage.k8s.io/v1/csidrivers",
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "CSIDriver",
                "metadata": {"name": CSI_DRIVER},
                "spec": {"attachRequired": False, "podInfoOnMount": False},
            },
        )
    ]
    found += [
        (
            "/apis/storage.k8s.io/v1/storageclasses",
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": name},
                "provisioner": "kubernetes.io/no-provisioner",
                "volumeBindingMode": "Immediate",
                "reclaimPolicy": "Retain",
            },
        )
        for name in sorted(classes)
    ]
    found += [("/api/v1/persistentvolumes", volume) for volume in volumes]
    return found


def wait_for(probe: Callable[[], object], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    last: object = None
    while True:
        try:
            last = probe()
        except ApiError as exc:
            last = f"{exc.code} {exc.message}"
        else:
            if last is True:
                return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {within:.0f}s (last: {last!r})")
        time.sleep(0.5)


def load(rest: Rest, scenario: Scenario, start_kwok: Callable[[str, str, str], None]) -> Loaded:
    """Create the scenario's objects, start each Node's kwok once the Node exists, and return
    when every node is Ready and every workload's pods are ready."""
    loaded = Loaded()
    ordered = creation_order(scenario.objects)
    volumes_done = False
    for rt, obj in ordered:
        kind = rt.kind
        if kind not in ("Namespace", "Node") and not volumes_done:
            for path, volume in volume_objects(o for _, o in ordered):
                rest.post(path, volume)
            _wait_for_service_accounts(rest, ordered)
            volumes_done = True
        namespace = obj["metadata"].get("namespace") if rt.namespaced else None
        body = node_manifest(obj) if kind == "Node" else cleaned(obj)
        try:
            rest.post(collection_path(rt, namespace), body)
        except ApiError as exc:
            system = kind == "Namespace" and body["metadata"]["name"] in ALWAYS_PRESENT_NAMESPACES
            if not (exc.code == 409 and system):
                raise
        if kind == "Node":
            name = str(body["metadata"]["name"])
            loaded.nodes[name] = body
            loaded.kwok[name] = _kwok_addresses(body, len(loaded.kwok))
            start_kwok(name, *loaded.kwok[name])
    wait_for(lambda: _all_nodes_ready(rest, loaded.nodes), READY_TIMEOUT, "nodes Ready")
    workloads = [(rt, o) for rt, o in ordered if rt.kind in WORKLOAD_KINDS]
    wait_for(lambda: _unready(rest, workloads) == [], READY_TIMEOUT, "workloads ready")
    return loaded


def load_shared(rest: Rest, objects: Iterable[Obj], start_kwok: Callable[[], None]) -> Loaded:
    """Create a large cluster's objects and return when every node is Ready and every pod
    Running: one kwok for all the nodes (``start_kwok``, started once the nodes exist), the
    objects of each kind created ``PARALLEL_CREATES`` at a time in creation order, and
    readiness read from paged lists rather than an object at a time."""
    loaded = Loaded()
    ordered = creation_order(objects)
    nodes = [
        shared_node_manifest(obj, index)
        for index, (_, obj) in enumerate((rt, o) for rt, o in ordered if rt.kind == "Node")
    ]
    for body in nodes:
        name = str(body["metadata"]["name"])
        loaded.nodes[name] = body
        loaded.kwok[name] = _kwok_addresses(body, len(loaded.kwok))
    rest_of = [(rt, o) for rt, o in ordered if rt.kind not in ("Namespace", "Node")]
    namespaces = [(rt, o) for rt, o in ordered if rt.kind == "Namespace"]
    _create_all(rest, [(collection_path(rt, None), cleaned(o)) for rt, o in namespaces])
    _create_all(rest, [("/api/v1/nodes", body) for body in nodes])
    start_kwok()
    wait_for(lambda: _all_nodes_ready(rest, loaded.nodes), READY_TIMEOUT, "nodes Ready")
    if rest_of:
        _create_all(rest, volume_objects(o for _, o in ordered))
        _wait_for_service_accounts(rest, ordered)
        for _, run in itertools.groupby(rest_of, key=lambda pair: pair[0].kind):
            _create_all(
                rest,
                [
                    (collection_path(rt, o["metadata"].get("namespace")), cleaned(o))
                    for rt, o in run
                ],
            )
    workloads = [(rt, o) for rt, o in ordered if rt.kind in WORKLOAD_KINDS]
    wait_for(lambda: _unready(rest, workloads) == [], READY_TIMEOUT, "workloads ready")
    wait_for(lambda: _pods_not_running(rest) == 0, READY_TIMEOUT, "pods Running")
    return loaded


def _create_all(rest: Rest, creates: Iterable[tuple[str, Obj]]) -> None:
    """POST each (collection path, object), ``PARALLEL_CREATES`` at a time; a system
    namespace that is already there is no error."""

    def create(item: tuple[str, Obj]) -> None:
        path, body = item
        try:
            rest.post(path, body)
        except ApiError as exc:
            system = (
                body.get("kind") == "Namespace"
                and body["metadata"]["name"] in ALWAYS_PRESENT_NAMESPACES
            )
            if not (exc.code == 409 and system):
                raise

    with ThreadPoolExecutor(PARALLEL_CREATES) as pool:
        # list(): the first failed create raises here.
        list(pool.map(create, creates))


def _pages(rest: Rest, path: str, query: str = "", accept: str = JSON) -> Iterator[Obj]:
    """Every object (or Table row) of a collection, a page at a time."""
    token = ""
    while True:
        separator = "&" if query else ""
        page = rest.request(
            "GET", f"{path}?{query}{separator}limit={PAGE}&continue={token}", accept=accept
        )
        yield from page.get("items") or page.get("rows") or []
        token = (page.get("metadata") or {}).get("continue") or ""
        if not token:
            return


def ready_nodes(rest: Rest) -> set[str]:
    """The names of the nodes that read Ready, from the API server's Table of the nodes (the
    status column kubectl shows): 2,000 realistic Nodes are 26 MB of JSON, their Table a few
    hundred KB, and a wait reads it every half second."""
    ready = set()
    for row in _pages(rest, "/api/v1/nodes", "includeObject=None", TABLE):
        name, status = str(row["cells"][0]), str(row["cells"][1])
        if status.split(",", maxsplit=1)[0] == "Ready":
            ready.add(name)
    return ready


def _all_nodes_ready(rest: Rest, nodes: Iterable[str]) -> bool | str:
    """True once every one of ``nodes`` reads Ready; else how many do not yet."""
    ready = ready_nodes(rest)
    waiting = [name for name in nodes if name not in ready]
    return True if not waiting else f"{len(waiting)} nodes not Ready, e.g. {waiting[0]}"


def not_ready(rest: Rest, nodes: Iterable[str]) -> bool | str:
    """True once none of ``nodes`` reads Ready (the node-lifecycle controller marked each
    Unknown); else how many still do."""
    ready = ready_nodes(rest)
    still = [name for name in nodes if name in ready]
    return True if not still else f"{len(still)} nodes still Ready, e.g. {still[0]}"


def _pods_not_running(rest: Rest) -> int:
    return sum(1 for _ in _pages(rest, "/api/v1/pods", "fieldSelector=status.phase%21%3DRunning"))


def _wait_for_service_accounts(rest: Rest, ordered: list[tuple[ResourceType, Obj]]) -> None:
    """Pods are admitted only once their namespace's default ServiceAccount exists, which the
    controller-manager makes shortly after the namespace."""
    namespaces = {
        str(o["metadata"].get("namespace") or "default") for rt, o in ordered if rt.namespaced
    }
    for namespace in sorted(namespaces):
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/default"
        wait_for(functools.partial(_exists, rest, path), READY_TIMEOUT, path)


def _exists(rest: Rest, path: str) -> bool:
    return bool(rest.get(path))


def _unready(rest: Rest, workloads: list[tuple[ResourceType, Obj]]) -> list[str]:
    """The workloads whose pods are not all ready yet."""
    waiting = []
    for rt, obj in workloads:
        namespace = obj["metadata"].get("namespace") or "default"
        name = obj["metadata"]["name"]
        current = rest.get(f"{collection_path(rt, namespace)}/{name}")
        status = current.get("status") or {}
        if rt.kind == "DaemonSet":
            desired = status.get("desiredNumberScheduled")
            ready = status.get("observedGeneration") and desired == status.get("numberReady")
        else:
            ready = (status.get("readyReplicas") or 0) == current["spec"].get("replicas", 1)
        if not ready:
            waiting.append(f"{rt.kind}/{namespace}/{name}")
    return waiting
