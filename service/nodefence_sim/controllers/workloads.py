"""StatefulSet, Deployment, ReplicaSet and DaemonSet controllers.

They reproduce the behaviours the seed runbook depends on rather than every rollout feature:

* A StatefulSet recreates a missing ordinal only once the old pod object is gone, so a pod stuck
  ``Terminating`` on a dead node blocks its replacement until it is force-deleted. Pods are
  created in parallel (no OrderedReady), PVCs from ``volumeClaimTemplates`` are created once and
  kept when pods go. A template change does not roll existing pods.
* A ReplicaSet does not count Terminating pods, so it replaces them at once. A Deployment owns
  one ReplicaSet per template; on a template change the older ones are scaled to zero (a
  recreate, not a rolling update).
* A DaemonSet runs one pod per node whose NoSchedule/NoExecute taints its pods tolerate (with the
  tolerations the real controller adds), binds it directly, and deletes it where an untolerated
  NoExecute taint appears. An out-of-service taint therefore keeps the node free of DaemonSet
  pods until it is removed.

First placement: a workload annotated ``sim.nodefence.io/initial-node`` with a JSON object
(ordinal -> node, for StatefulSets) or a JSON list (node per replica in creation order, for
Deployments, which copy their annotations to their ReplicaSets; a ReplicaSet may carry it
directly) passes the node to the scheduler on the first pod created for that ordinal or replica
slot. Replacements are spread normally.

Each controller records the Events its real counterpart does on what it creates and deletes
(``SuccessfulCreate``/``SuccessfulDelete``/``FailedCreate`` with their messages, and the
Deployment's ``ScalingReplicaSet``), so ``kubectl describe`` tells the same story.
"""

from __future__ import annotations

import copy
import json
import secrets
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from nodefence_sim.controllers.events import NORMAL, WARNING, EventRecorder
from nodefence_sim.controllers.scheduler import (
    INITIAL_NODE_ANNOTATION,
    is_terminating,
    node_selected,
    occupies_node,
    set_condition,
    untolerated_taints,
)
from nodefence_sim.errors import ApiError
from nodefence_sim.managed import CONTROLLER_MANAGER
from nodefence_sim.resources import (
    DAEMONSETS,
    DEPLOYMENTS,
    NAMESPACES,
    NODES,
    PODS,
    PVCS,
    REPLICASETS,
    STATEFULSETS,
    ResourceType,
)
from nodefence_sim.simulation import Controller, Simulation
from nodefence_sim.store import DeleteOptions, Obj
from nodefence_sim.wakeup import Wakeup

NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"

# What ``AddOrUpdateDaemonPodTolerations`` adds to every DaemonSet pod. Not out-of-service: a
# fenced node must not get DaemonSet pods back until it is unfenced.
DAEMON_TOLERATIONS: tuple[dict[str, str], ...] = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
)
HOST_NETWORK_TOLERATION = {
    "key": "node.kubernetes.io/network-unavailable",
    "operator": "Exists",
    "effect": "NoSchedule",
}


def compute_hash(value: Any) -> str:
    """FNV-32a of the object, safe-encoded as ``controller.ComputeHash`` does, so names look
    like the real ones (``mariadb-server-6c74c7f8f6``)."""
    digest = 0x811C9DC5
    for byte in json.dumps(value, sort_keys=True).encode():
        digest = ((digest ^ byte) * 0x01000193) & 0xFFFFFFFF
    return "".join(NAME_ALPHABET[ord(c) % len(NAME_ALPHABET)] for c in str(digest))


def random_suffix(length: int = 5) -> str:
    return "".join(secrets.choice(NAME_ALPHABET) for _ in range(length))


def owner_reference(rt: ResourceType, owner: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": rt.group_version,
        "kind": rt.kind,
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def controller_uid(obj: Mapping[str, Any]) -> str | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None


def pods_by_controller(sim: Simulation) -> dict[str, list[Obj]]:
    owned: dict[str, list[Obj]] = {}
    for pod in sim.store.items(PODS):
        uid = controller_uid(pod)
        if uid is not None:
            owned.setdefault(uid, []).append(pod)
    return owned


def pod_is_ready(pod: Mapping[str, Any]) -> bool:
    for condition in pod.get("status", {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def is_active(pod: Mapping[str, Any]) -> bool:
    return not is_terminating(pod) and occupies_node(pod)


def pinned_node(annotations: Mapping[str, str] | None, index: int) -> str | None:
    """The node ``sim.nodefence.io/initial-node`` names for an ordinal or replica slot."""
    raw = (annotations or {}).get(INITIAL_NODE_ANNOTATION)
    if not raw:
        return None
    try:
        pins = json.loads(raw)
    except ValueError:
        return None
    if isinstance(pins, list) and index < len(pins):
        return str(pins[index])
    if isinstance(pins, dict) and str(index) in pins:
        return str(pins[str(index)])
    return None


def build_pod(
    template: Mapping[str, Any],
    name: str,
    namespace: str,
    owner: dict[str, Any],
    *,
    labels: Mapping[str, str],
    pin: str | None,
) -> Obj:
    tmeta = template.get("metadata") or {}
    annotations = dict(tmeta.get("annotations") or {})
    if pin:
        annotations[INITIAL_NODE_ANNOTATION] = pin
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {**(tmeta.get("labels") or {}), **labels},
        "ownerReferences": [owner],
    }
    if annotations:
        meta["annotations"] = annotations
    spec = copy.deepcopy(dict(template.get("spec") or {}))
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": spec,
        "status": {"phase": "Pending", "qosClass": "BestEffort"},
    }


class _Base:
    component = ""
    # What the controller's pass reads: a change to anything else does not wake it.
    reads: tuple[ResourceType, ...] = ()

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.events = EventRecorder(sim, self.component)
        self.wakeup = Wakeup(sim.store, kinds=self.reads)

    def _create(
        self,
        rt: ResourceType,
        namespace: str,
        obj: Obj,
        *,
        owner: Obj | None = None,
        reason: str = "SuccessfulCreate",
        message: str = "",
        failure: str = "",
    ) -> bool:
        """Create ``obj``; with an ``owner``, record ``message`` on it, or ``failure`` (where
        ``{error}`` stands for the server's answer) when the create is refused."""
        try:
            self.sim.store.create(rt, namespace, obj, manager=CONTROLLER_MANAGER)
        except ApiError as exc:
            if owner is not None and failure:
                self.events.record(
                    owner, WARNING, "FailedCreate", failure.format(error=exc.message)
                )
            return False
        if owner is not None:
            self.events.record(owner, NORMAL, reason, message)
        return True

    def _delete(
        self,
        rt: ResourceType,
        obj: Mapping[str, Any],
        *,
        owner: Obj | None = None,
        message: str = "",
    ) -> None:
        meta = obj["metadata"]
        try:
            self.sim.store.delete(
                rt, meta.get("namespace"), meta["name"], DeleteOptions(uid=meta["uid"])
            )
        except ApiError:
            return
        if owner is not None:
            self.events.record(owner, NORMAL, "SuccessfulDelete", message)

    def _write_status(self, rt: ResourceType, obj: Obj, status: dict[str, Any]) -> None:
        if obj.get("status") == status:
            return
        new = copy.deepcopy(obj)
        new["status"] = status
        meta = obj["metadata"]
        try:
            self.sim.store.update(
                rt,
                meta.get("namespace"),
                meta["name"],
                new,
                subresource="status",
                check_rv=False,
                manager=CONTROLLER_MANAGER,
            )
        except ApiError:
            return


class StatefulSetController(_Base):
    reads = (STATEFULSETS, PODS, PVCS, NAMESPACES)
    component = "statefulset-controller"

    def __init__(self, sim: Simulation) -> None:
        super().__init__(sim)
        self._placed: set[tuple[str, int]] = set()

    def reconcile(self, now: datetime) -> None:
        if not self.wakeup.due(now):
            return
        owned = pods_by_controller(self.sim)
        for sts in self.sim.store.items(STATEFULSETS):
            if not is_terminating(sts):
                self._sync(sts, owned.get(sts["metadata"]["uid"], []))

    def _sync(self, sts: Obj, pods: list[Obj]) -> None:
        meta, spec = sts["metadata"], sts.get("spec") or {}
        name, namespace, uid = meta["name"], meta["namespace"], meta["uid"]
        replicas = int(spec.get("replicas", 1))
        template = spec.get("template") or {}
        revision = f"{name}-{compute_hash(template)}"
        store = self.sim.store
        for ordinal in range(replicas):
            pod_name = f"{name}-{ordinal}"
            existing = store.peek(PODS, namespace, pod_name)
            if existing is not None:
                if existing.get("status", {}).get("phase") == "Failed" and not is_terminating(
                    existing
                ):
                    self._delete(
                        PODS,
                        existing,
                        owner=sts,
                        message=f"delete Pod {pod_name} in StatefulSet {name} successful",
                    )
                continue
            self._ensure_claims(sts, ordinal)
            pin = None
            if (uid, ordinal) not in self._placed:
                pin = pinned_node(meta.get("annotations"), ordinal)
            labels = {
                "controller-revision-hash": revision,
                "statefulset.kubernetes.io/pod-name": pod_name,
            }
            if self.sim.settings.version >= (1, 28, 0):
                labels["apps.kubernetes.io/pod-index"] = str(ordinal)
            pod = build_pod(
                template,
                pod_name,
                namespace,
                owner_reference(STATEFULSETS, sts),
                labels=labels,
                pin=pin,
            )
            pod["spec"]["hostname"] = pod_name
            if spec.get("serviceName"):
                pod["spec"]["subdomain"] = spec["serviceName"]
            self._attach_claims(pod, spec, ordinal)
            created = self._create(
                PODS,
                namespace,
                pod,
                owner=sts,
                message=f"create Pod {pod_name} in StatefulSet {name} successful",
                failure=f"create Pod {pod_name} in StatefulSet {name} failed error: {{error}}",
            )
            if created:
                self._placed.add((uid, ordinal))
        for pod in pods:
            index = _ordinal(name, pod["metadata"]["name"])
            if index is not None and index >= replicas and not is_terminating(pod):
                pod_name = pod["metadata"]["name"]
                self._delete(
                    PODS,
                    pod,
                    owner=sts,
                    message=f"delete Pod {pod_name} in StatefulSet {name} successful",
                )
        self._report(sts, pods, revision)

    def _ensure_claims(self, sts: Obj, ordinal: int) -> None:
        meta, spec = sts["metadata"], sts.get("spec") or {}
        selector_labels = (spec.get("selector") or {}).get("matchLabels") or {}
        for tpl in spec.get("volumeClaimTemplates") or []:
            tmeta = tpl.get("metadata") or {}
            claim_name = f"{tmeta['name']}-{meta['name']}-{ordinal}"
            if self.sim.store.peek(PVCS, meta["namespace"], claim_name) is not None:
                continue
            claim_spec = copy.deepcopy(tpl.get("spec") or {})
            claim_spec.setdefault("accessModes", ["ReadWriteOnce"])
            claim_spec.setdefault("volumeMode", "Filesystem")
            claim: Obj = {
                "metadata": {
                    "name": claim_name,
                    "namespace": meta["namespace"],
                    "labels": {**(tmeta.get("labels") or {}), **selector_labels},
                },
                "spec": claim_spec,
                "status": {"phase": "Pending"},
            }
            if tmeta.get("annotations"):
                claim["metadata"]["annotations"] = dict(tmeta["annotations"])
            pod_name = f"{meta['name']}-{ordinal}"
            what = f"Claim {claim_name} Pod {pod_name} in StatefulSet {meta['name']}"
            self._create(
                PVCS,
                meta["namespace"],
                claim,
                owner=sts,
                message=f"create {what} success",
                failure=f"create {what} failed error: {{error}}",
            )

    @staticmethod
    def _attach_claims(pod: Obj, spec: Mapping[str, Any], ordinal: int) -> None:
        name = pod["metadata"]["name"].rsplit("-", 1)[0]
        volumes: list[dict[str, Any]] = pod["spec"].setdefault("volumes", [])
        for tpl in spec.get("volumeClaimTemplates") or []:
            vol_name = tpl["metadata"]["name"]
            volume = {
                "name": vol_name,
                "persistentVolumeClaim": {"claimName": f"{vol_name}-{name}-{ordinal}"},
            }
            volumes[:] = [v for v in volumes if v.get("name") != vol_name]
            volumes.append(volume)

    def _report(self, sts: Obj, pods: list[Obj], revision: str) -> None:
        created = [p for p in pods if p.get("status", {}).get("phase")]
        live = [p for p in created if not is_terminating(p)]
        ready = [p for p in created if pod_is_ready(p) and not is_terminating(p)]
        current = [
            p
            for p in live
            if (p["metadata"].get("labels") or {}).get("controller-revision-hash") == revision
        ]
        status = {
            "observedGeneration": sts["metadata"].get("generation", 1),
            "replicas": len(created),
            "readyReplicas": len(ready),
            "availableReplicas": len(ready),
            "currentReplicas": len(current),
            "updatedReplicas": len(current),
            "currentRevision": revision,
            "updateRevision": revision,
            "collisionCount": 0,
        }
        self._write_status(STATEFULSETS, sts, status)


def _ordinal(set_name: str, pod_name: str) -> int | None:
    prefix, _, suffix = pod_name.rpartition("-")
    if prefix != set_name or not suffix.isdigit():
        return None
    return int(suffix)


class ReplicaSetController(_Base):
    reads = (REPLICASETS, PODS, NAMESPACES)
    component = "replicaset-controller"

    def __init__(self, sim: Simulation) -> None:
        super().__init__(sim)
        self._created: dict[str, int] = {}

    def reconcile(self, now: datetime) -> None:
        if not self.wakeup.due(now):
            return
        owned = pods_by_controller(self.sim)
        for rs in self.sim.store.items(REPLICASETS):
            if not is_terminating(rs):
                self._sync(rs, owned.get(rs["metadata"]["uid"], []))

    def _sync(self, rs: Obj, pods: list[Obj]) -> None:
        meta, spec = rs["metadata"], rs.get("spec") or {}
        uid, namespace = meta["uid"], meta["namespace"]
        active = [p for p in pods if is_active(p)]
        wanted = int(spec.get("replicas", 1))
        template = spec.get("template") or {}
        for _ in range(wanted - len(active)):
            slot = self._created.get(uid, 0)
            pod = build_pod(
                template,
                f"{meta['name']}-{random_suffix()}",
                namespace,
                owner_reference(REPLICASETS, rs),
                labels={},
                pin=pinned_node(meta.get("annotations"), slot),
            )
            created = self._create(
                PODS,
                namespace,
                pod,
                owner=rs,
                message=f"Created pod: {pod['metadata']['name']}",
                failure="Error creating: {error}",
            )
            if created:
                self._created[uid] = slot + 1
                active.append(pod)
        if len(active) > wanted:
            for pod in sorted(active, key=_deletion_rank)[: len(active) - wanted]:
                self._delete(PODS, pod, owner=rs, message=f"Deleted pod: {pod['metadata']['name']}")
            active = sorted(active, key=_deletion_rank)[len(active) - wanted :]
        ready = [p for p in active if pod_is_ready(p)]
        labels_wanted = (spec.get("selector") or {}).get("matchLabels") or {}
        fully = [
            p
            for p in active
            if all(
                (p["metadata"].get("labels") or {}).get(k) == v for k, v in labels_wanted.items()
            )
        ]
        status = {
            "observedGeneration": meta.get("generation", 1),
            "replicas": len(active),
            "fullyLabeledReplicas": len(fully),
            "readyReplicas": len(ready),
            "availableReplicas": len(ready),
        }
        self._write_status(REPLICASETS, rs, status)


def _deletion_rank(pod: Obj) -> tuple[int, int, int, str]:
    """Which surplus pod goes first: unscheduled, then pending, then not ready, then newest."""
    spec, status = pod.get("spec", {}), pod.get("status", {})
    created = str(pod["metadata"].get("creationTimestamp", ""))
    inverted = "".join(chr(0x10FFFF - ord(c)) for c in created)
    return (
        1 if spec.get("nodeName") else 0,
        1 if status.get("phase") == "Running" else 0,
        1 if pod_is_ready(pod) else 0,
        inverted,
    )


class DeploymentController(_Base):
    reads = (DEPLOYMENTS, REPLICASETS, NAMESPACES)
    component = "deployment-controller"

    def reconcile(self, now: datetime) -> None:
        if not self.wakeup.due(now):
            return
        sets_by_owner: dict[str, list[Obj]] = {}
        for rs in self.sim.store.items(REPLICASETS):
            uid = controller_uid(rs)
            if uid is not None:
                sets_by_owner.setdefault(uid, []).append(rs)
        for deploy in self.sim.store.items(DEPLOYMENTS):
            if not is_terminating(deploy):
                self._sync(deploy, sets_by_owner.get(deploy["metadata"]["uid"], []), now)

    def _sync(self, deploy: Obj, sets: list[Obj], now: datetime) -> None:
        meta, spec = deploy["metadata"], deploy.get("spec") or {}
        namespace = meta["namespace"]
        replicas = int(spec.get("replicas", 1))
        template = copy.deepcopy(spec.get("template") or {})
        template_hash = compute_hash(template)
        rs_name = f"{meta['name']}-{template_hash}"
        revision = 1 + max(
            (
                int(
                    (rs["metadata"].get("annotations") or {}).get(
                        "deployment.kubernetes.io/revision", "0"
                    )
                )
                for rs in sets
            ),
            default=0,
        )
        current = next((rs for rs in sets if rs["metadata"]["name"] == rs_name), None)
        if current is None:
            template.setdefault("metadata", {}).setdefault("labels", {})
            template["metadata"]["labels"]["pod-template-hash"] = template_hash
            selector = copy.deepcopy(spec.get("selector") or {})
            selector.setdefault("matchLabels", {})["pod-template-hash"] = template_hash
            annotations = {
                k: v for k, v in (meta.get("annotations") or {}).items() if k != LAST_APPLIED
            }
            annotations.update(
                {
                    "deployment.kubernetes.io/revision": str(revision),
                    "deployment.kubernetes.io/desired-replicas": str(replicas),
                    "deployment.kubernetes.io/max-replicas": str(replicas),
                }
            )
            rs: Obj = {
                "metadata": {
                    "name": rs_name,
                    "namespace": namespace,
                    "labels": dict(template["metadata"]["labels"]),
                    "annotations": annotations,
                    "ownerReferences": [owner_reference(DEPLOYMENTS, deploy)],
                },
                "spec": {"replicas": replicas, "selector": selector, "template": template},
            }
            self._create(
                REPLICASETS,
                namespace,
                rs,
                owner=deploy,
                reason="ScalingReplicaSet",
                message=self._scaled(rs_name, 0, replicas),
            )
        else:
            self._scale(current, replicas, deploy)
        for old in sets:
            if old["metadata"]["name"] != rs_name:
                self._scale(old, 0, deploy)
        self._status(deploy, sets, rs_name, replicas, now)

    def _scaled(self, rs_name: str, before: int, after: int) -> str:
        """``ScalingReplicaSet``'s message; 1.28 added where the scaling started from."""
        direction = "up" if after > before else "down"
        if self.sim.settings.version[:2] >= (1, 28):
            return f"Scaled {direction} replica set {rs_name} from {before} to {after}"
        return f"Scaled {direction} replica set {rs_name} to {after}"

    def _scale(self, rs: Obj, replicas: int, deploy: Obj) -> None:
        before = int((rs.get("spec") or {}).get("replicas", 1))
        if before == replicas:
            return
        new = copy.deepcopy(rs)
        new["spec"]["replicas"] = replicas
        annotations = new["metadata"].setdefault("annotations", {})
        annotations["deployment.kubernetes.io/desired-replicas"] = str(replicas)
        annotations["deployment.kubernetes.io/max-replicas"] = str(replicas)
        try:
            self.sim.store.update(
                REPLICASETS,
                rs["metadata"]["namespace"],
                rs["metadata"]["name"],
                new,
                subresource="all",
                check_rv=False,
                manager=CONTROLLER_MANAGER,
            )
        except ApiError:
            return
        message = self._scaled(rs["metadata"]["name"], before, replicas)
        self.events.record(deploy, NORMAL, "ScalingReplicaSet", message)

    def _status(
        self, deploy: Obj, sets: list[Obj], rs_name: str, replicas: int, now: datetime
    ) -> None:
        def total(field: str, only: str | None = None) -> int:
            return sum(
                int((rs.get("status") or {}).get(field, 0))
                for rs in sets
                if only is None or rs["metadata"]["name"] == only
            )

        available = total("availableReplicas")
        status: dict[str, Any] = copy.deepcopy(deploy.get("status") or {})
        status.update(
            {
                "observedGeneration": deploy["metadata"].get("generation", 1),
                "replicas": total("replicas"),
                "updatedReplicas": total("replicas", rs_name),
                "readyReplicas": total("readyReplicas"),
                "availableReplicas": available,
                "unavailableReplicas": max(0, replicas - available),
            }
        )
        if available >= replicas:
            set_condition(
                status,
                "Available",
                value="True",
                reason="MinimumReplicasAvailable",
                message="Deployment has minimum availability.",
                now=now,
            )
        else:
            set_condition(
                status,
                "Available",
                value="False",
                reason="MinimumReplicasUnavailable",
                message="Deployment does not have minimum availability.",
                now=now,
            )
        set_condition(
            status,
            "Progressing",
            value="True",
            reason="NewReplicaSetAvailable",
            message=f'ReplicaSet "{rs_name}" has successfully progressed.',
            now=now,
        )
        self._write_status(DEPLOYMENTS, deploy, status)


def daemon_tolerations(pod_spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    tolerations = [dict(t) for t in pod_spec.get("tolerations") or []]
    extra = list(DAEMON_TOLERATIONS)
    if pod_spec.get("hostNetwork"):
        extra.append(HOST_NETWORK_TOLERATION)
    for auto in extra:
        tolerations = [
            t
            for t in tolerations
            if not (t.get("key") == auto["key"] and t.get("effect") == auto["effect"])
        ]
        tolerations.append(dict(auto))
    return tolerations


class DaemonSetController(_Base):
    reads = (DAEMONSETS, PODS, NODES, NAMESPACES)
    component = "daemonset-controller"

    def reconcile(self, now: datetime) -> None:
        if not self.wakeup.due(now):
            return
        owned = pods_by_controller(self.sim)
        nodes = sorted(self.sim.store.items(NODES), key=lambda n: str(n["metadata"]["name"]))
        for ds in self.sim.store.items(DAEMONSETS):
            if not is_terminating(ds):
                self._sync(ds, owned.get(ds["metadata"]["uid"], []), nodes)

    def _sync(self, ds: Obj, pods: list[Obj], nodes: list[Obj]) -> None:
        meta, spec = ds["metadata"], ds.get("spec") or {}
        template = spec.get("template") or {}
        pod_spec = template.get("spec") or {}
        tolerations = daemon_tolerations(pod_spec)
        revision = compute_hash(template)
        by_node: dict[str, list[Obj]] = {}
        for pod in pods:
            by_node.setdefault(str(pod.get("spec", {}).get("nodeName") or ""), []).append(pod)
        desired = scheduled = misscheduled = ready = updated = 0
        for node in nodes:
            node_name = str(node["metadata"]["name"])
            taints = node.get("spec", {}).get("taints")
            selected = node_selected(pod_spec, node)
            should_run = selected and not untolerated_taints(tolerations, taints)
            should_continue = selected and not untolerated_taints(
                tolerations, taints, ("NoExecute",)
            )
            here = by_node.get(node_name, [])
            live = [p for p in here if not is_terminating(p)]
            desired += should_run
            if should_run and not here:
                self._create_pod(ds, template, tolerations, node_name, revision)
            elif not should_continue:
                for pod in live:
                    self._delete_pod(ds, pod)
            else:
                for pod in live:
                    if pod.get("status", {}).get("phase") == "Failed":
                        self._delete_pod(ds, pod)
                running = [p for p in live if p.get("status", {}).get("phase") != "Failed"]
                running.sort(key=lambda p: str(p["metadata"].get("creationTimestamp")))
                for surplus in running[1:]:
                    self._delete_pod(ds, surplus)
            if live:
                scheduled += should_run
                misscheduled += not should_run
                ready += should_run and any(pod_is_ready(p) for p in live)
                updated += should_run and any(
                    (p["metadata"].get("labels") or {}).get("controller-revision-hash") == revision
                    for p in live
                )
        status = {
            "observedGeneration": meta.get("generation", 1),
            "desiredNumberScheduled": desired,
            "currentNumberScheduled": scheduled,
            "numberMisscheduled": misscheduled,
            "numberReady": ready,
            "numberAvailable": ready,
            "numberUnavailable": max(0, desired - ready),
            "updatedNumberScheduled": updated,
        }
        self._write_status(DAEMONSETS, ds, status)

    def _create_pod(
        self,
        ds: Obj,
        template: Mapping[str, Any],
        tolerations: list[dict[str, Any]],
        node_name: str,
        revision: str,
    ) -> None:
        meta = ds["metadata"]
        labels = {
            "controller-revision-hash": revision,
            "pod-template-generation": str(meta.get("generation", 1)),
        }
        pod = build_pod(
            template,
            f"{meta['name']}-{random_suffix()}",
            meta["namespace"],
            owner_reference(DAEMONSETS, ds),
            labels=labels,
            pin=None,
        )
        pod["spec"]["tolerations"] = tolerations
        pod["spec"]["nodeName"] = node_name
        affinity = pod["spec"].setdefault("affinity", {})
        affinity["nodeAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [node_name]}
                        ]
                    }
                ]
            }
        }
        self._create(
            PODS,
            meta["namespace"],
            pod,
            owner=ds,
            message=f"Created pod: {pod['metadata']['name']}",
            failure="Error creating: {error}",
        )

    def _delete_pod(self, ds: Obj, pod: Obj) -> None:
        self._delete(PODS, pod, owner=ds, message=f"Deleted pod: {pod['metadata']['name']}")


def controllers(sim: Simulation) -> list[Controller]:
    """Deployments before ReplicaSets so a new Deployment gets its pods in one step."""
    return [
        DeploymentController(sim),
        ReplicaSetController(sim),
        StatefulSetController(sim),
        DaemonSetController(sim),
    ]
