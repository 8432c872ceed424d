"""The attach/detach controller, with a CSI driver that provisions and attaches instantly.

This is where a dead node hurts stateful workloads: a ReadWriteOnce volume stays attached to the
dead node, so the replacement pod elsewhere waits with a Multi-Attach error until the volume is
detached. Detaching follows the real controller's safety rules:

* a VolumeAttachment is detached once no pod on its node needs the volume and the node is
  healthy (Ready=True) or gone;
* on an unhealthy node only if the node carries ``node.kubernetes.io/out-of-service`` and the
  ``NodeOutOfServiceVolumeDetach`` gate is on for the simulated version (the non-graceful node
  shutdown this project automates);
* or, when ``SimSettings.force_detach_after_seconds`` is set, once the volume has waited that
  long (the real ``maxWaitForUnmountDuration`` of 6 minutes; None, the default, never forces, as
  with ``--disable-force-detach-on-timeout``).

A VolumeAttachment deleted by someone else is simply gone: the next pass attaches the volume to
the node that is waiting for it. Claims get a PersistentVolume (``pv-<claim uid>``, driver
``sim.csi.nodefence.io``) when a pod first uses them. A pod whose volumes are not all attached to
its node carries ``sim.nodefence.io/volume-blocked: "true"``; the simulated kubelet keeps such a
pod in its init/ContainerCreating state, and the annotation goes once everything is attached.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from nodefence_sim.controllers.scheduler import is_terminating, node_is_ready, occupies_node
from nodefence_sim.errors import ApiError
from nodefence_sim.managed import CONTROLLER_MANAGER, PROVISIONER
from nodefence_sim.resources import EVENTS, NODES, PODS, PVCS, PVS, VOLUME_ATTACHMENTS
from nodefence_sim.simulation import NODE_OUT_OF_SERVICE_VOLUME_DETACH, Controller, Simulation
from nodefence_sim.store import DeleteOptions, Obj, rfc3339
from nodefence_sim.wakeup import Wakeup

CSI_DRIVER = "sim.csi.nodefence.io"
VOLUME_BLOCKED_ANNOTATION = "sim.nodefence.io/volume-blocked"
OUT_OF_SERVICE_TAINT = "node.kubernetes.io/out-of-service"
COMPONENT = "attachdetach-controller"
SHARED_MODES = ("ReadWriteMany", "ReadOnlyMany")


def attachment_name(volume_handle: str, attacher: str, node_name: str) -> str:
    """The external-attacher's naming: ``csi-`` + sha256(handle + attacher + node)."""
    digest = hashlib.sha256(f"{volume_handle}{attacher}{node_name}".encode()).hexdigest()
    return f"csi-{digest}"


def claim_names(pod: Mapping[str, Any]) -> list[str]:
    return [
        str(v["persistentVolumeClaim"]["claimName"])
        for v in pod.get("spec", {}).get("volumes") or []
        if (v.get("persistentVolumeClaim") or {}).get("claimName")
    ]


def has_out_of_service_taint(node: Mapping[str, Any]) -> bool:
    return any(
        t.get("key") == OUT_OF_SERVICE_TAINT for t in node.get("spec", {}).get("taints") or []
    )


class AttachDetachController:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self._unneeded_since: dict[str, datetime] = {}
        self.wakeup = Wakeup(
            sim.store,
            waiting=lambda: (
                bool(self._unneeded_since)
                and self.sim.settings.force_detach_after_seconds is not None
            ),
            kinds=(NODES, PODS, PVCS, PVS, VOLUME_ATTACHMENTS),
        )

    def reconcile(self, now: datetime) -> None:
        if not self.wakeup.due(now):
            return
        pods = sorted(
            (p for p in self.sim.store.items(PODS) if occupies_node(p) and claim_names(p)),
            key=lambda p: (str(p["metadata"].get("creationTimestamp")), p["metadata"]["name"]),
        )
        for pod in pods:
            if not is_terminating(pod):
                for claim in claim_names(pod):
                    self._bind_claim(pod["metadata"]["namespace"], claim)
        needed: set[tuple[str, str]] = set()
        for pod in pods:
            node_name = pod["spec"].get("nodeName")
            if node_name:
                for claim in claim_names(pod):
                    pv = self._volume_of(pod["metadata"]["namespace"], claim)
                    if pv is not None:
                        needed.add((str(pv["metadata"]["name"]), str(node_name)))
        self._detach(needed, now)
        attached: dict[str, dict[str, Obj]] = {}
        for va in self.sim.store.items(VOLUME_ATTACHMENTS):
            pv_name = (va["spec"].get("source") or {}).get("persistentVolumeName")
            if pv_name:
                attached.setdefault(str(pv_name), {})[str(va["spec"]["nodeName"])] = va
        for pod in pods:
            if pod["spec"].get("nodeName") and not is_terminating(pod):
                self._attach(pod, attached, pods, now)

    # ---------------------------------------------------------------- binding
    def _volume_of(self, namespace: str, claim: str) -> Obj | None:
        pvc = self.sim.store.peek(PVCS, namespace, claim)
        if pvc is None or not pvc.get("spec", {}).get("volumeName"):
            return None
        return self.sim.store.peek(PVS, None, pvc["spec"]["volumeName"])

    def _bind_claim(self, namespace: str, claim: str) -> None:
        store = self.sim.store
        pvc = store.peek(PVCS, namespace, claim)
        if pvc is None or is_terminating(pvc):
            return
        spec = pvc.get("spec") or {}
        bound_name = spec.get("volumeName")
        if bound_name and store.peek(PVS, None, bound_name) is not None:
            if (pvc.get("status") or {}).get("phase") != "Bound":
                self._mark_bound(pvc, store.peek(PVS, None, bound_name) or {})
            return
        pv_name = bound_name or f"pv-{pvc['metadata']['uid']}"
        modes = list(spec.get("accessModes") or ["ReadWriteOnce"])
        size = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")
        pv: Obj = {
            "metadata": {
                "name": pv_name,
                "annotations": {"pv.kubernetes.io/provisioned-by": CSI_DRIVER},
            },
            "spec": {
                "capacity": {"storage": size},
                "accessModes": modes,
                "persistentVolumeReclaimPolicy": "Delete",
                "storageClassName": spec.get("storageClassName") or "",
                "volumeMode": spec.get("volumeMode") or "Filesystem",
                "claimRef": {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "namespace": namespace,
                    "name": claim,
                    "uid": pvc["metadata"]["uid"],
                },
                "csi": {"driver": CSI_DRIVER, "volumeHandle": pv_name, "fsType": "ext4"},
            },
            "status": {"phase": "Bound"},
        }
        try:
            created = store.create(PVS, None, pv, manager=PROVISIONER)
        except ApiError:
            return
        self._mark_bound(pvc, created)

    def _mark_bound(self, pvc: Obj, pv: Mapping[str, Any]) -> None:
        new = copy.deepcopy(pvc)
        spec = new.setdefault("spec", {})
        pv_spec = pv.get("spec") or {}
        spec["volumeName"] = pv["metadata"]["name"]
        spec.setdefault("accessModes", list(pv_spec.get("accessModes") or ["ReadWriteOnce"]))
        annotations = new["metadata"].setdefault("annotations", {})
        annotations["pv.kubernetes.io/bind-completed"] = "yes"
        annotations["pv.kubernetes.io/bound-by-controller"] = "yes"
        new["status"] = {
            "phase": "Bound",
            "accessModes": list(pv_spec.get("accessModes") or spec["accessModes"]),
            "capacity": dict(pv_spec.get("capacity") or {}),
        }
        try:
            self.sim.store.update(
                PVCS,
                pvc["metadata"]["namespace"],
                pvc["metadata"]["name"],
                new,
                subresource="all",
                check_rv=False,
                manager=CONTROLLER_MANAGER,
            )
        except ApiError:
            return

    # ----------------------------------------------------------------- detach
    def _detach(self, needed: set[tuple[str, str]], now: datetime) -> None:
        force_after = self.sim.settings.force_detach_after_seconds
        seen: set[str] = set()
        for va in self.sim.store.items(VOLUME_ATTACHMENTS):
            name = str(va["metadata"]["name"])
            pv_name = str((va["spec"].get("source") or {}).get("persistentVolumeName") or "")
            node_name = str(va["spec"].get("nodeName"))
            if (pv_name, node_name) in needed or is_terminating(va):
                continue
            seen.add(name)
            since = self._unneeded_since.setdefault(name, now)
            node = self.sim.store.peek(NODES, None, node_name)
            if (
                node is None
                or node_is_ready(node)
                or (
                    has_out_of_service_taint(node)
                    and self.sim.settings.gate_enabled(NODE_OUT_OF_SERVICE_VOLUME_DETACH)
                )
                or (force_after is not None and (now - since).total_seconds() >= force_after)
            ):
                try:
                    self.sim.store.delete(
                        VOLUME_ATTACHMENTS, None, name, DeleteOptions(uid=va["metadata"]["uid"])
                    )
                except ApiError:
                    continue
        for name in list(self._unneeded_since):
            if name not in seen:
                del self._unneeded_since[name]

    # ----------------------------------------------------------------- attach
    def _attach(
        self, pod: Obj, attached: dict[str, dict[str, Obj]], pods: list[Obj], now: datetime
    ) -> None:
        namespace = pod["metadata"]["namespace"]
        node_name = str(pod["spec"]["nodeName"])
        blocked = False
        for claim in claim_names(pod):
            pv = self._volume_of(namespace, claim)
            if pv is None:
                blocked = True
                continue
            pv_name = str(pv["metadata"]["name"])
            on_nodes = attached.setdefault(pv_name, {})
            if node_name in on_nodes:
                continue
            exclusive = not any(m in SHARED_MODES for m in pv["spec"].get("accessModes") or [])
            if exclusive and on_nodes:
                blocked = True
                self._event(
                    pod,
                    "Warning",
                    "FailedAttachVolume",
                    self._multi_attach_message(pv_name, pod, on_nodes, pods),
                    now,
                )
                continue
            va = self._create_attachment(pv, node_name)
            if va is None:
                blocked = True
                continue
            on_nodes[node_name] = va
            self._event(
                pod,
                "Normal",
                "SuccessfulAttachVolume",
                f'AttachVolume.Attach succeeded for volume "{pv_name}" ',
                now,
            )
        self._set_blocked(pod, blocked)

    def _multi_attach_message(
        self, pv_name: str, pod: Obj, on_nodes: Mapping[str, Obj], pods: list[Obj]
    ) -> str:
        """As ``reportMultiAttachError``: name the pods of the same namespace that still use the
        volume on the other nodes, or say it is exclusively attached when there are none."""
        users = sorted(
            str(other["metadata"]["name"])
            for other in pods
            if other["metadata"]["namespace"] == pod["metadata"]["namespace"]
            and other["spec"].get("nodeName") in on_nodes
            and other["metadata"]["uid"] != pod["metadata"]["uid"]
            and any(
                (self._volume_of(other["metadata"]["namespace"], c) or {})
                .get("metadata", {})
                .get("name")
                == pv_name
                for c in claim_names(other)
            )
        )
        if users:
            return (
                f'Multi-Attach error for volume "{pv_name}" Volume is already used by pod(s) '
                f"{', '.join(users)}"
            )
        return (
            f'Multi-Attach error for volume "{pv_name}" Volume is already exclusively attached '
            "to one node and can't be attached to another"
        )

    def _create_attachment(self, pv: Obj, node_name: str) -> Obj | None:
        csi = pv["spec"].get("csi") or {}
        attacher = str(csi.get("driver") or CSI_DRIVER)
        handle = str(csi.get("volumeHandle") or pv["metadata"]["name"])
        va: Obj = {
            "metadata": {"name": attachment_name(handle, attacher, node_name)},
            "spec": {
                "attacher": attacher,
                "nodeName": node_name,
                "source": {"persistentVolumeName": pv["metadata"]["name"]},
            },
            "status": {"attached": True},
        }
        try:
            return self.sim.store.create(VOLUME_ATTACHMENTS, None, va, manager=CONTROLLER_MANAGER)
        except ApiError:
            return None

    def _set_blocked(self, pod: Obj, blocked: bool) -> None:
        annotations = pod["metadata"].get("annotations") or {}
        if (annotations.get(VOLUME_BLOCKED_ANNOTATION) == "true") == blocked:
            return
        new = copy.deepcopy(pod)
        new_annotations = new["metadata"].setdefault("annotations", {})
        if blocked:
            new_annotations[VOLUME_BLOCKED_ANNOTATION] = "true"
        else:
            new_annotations.pop(VOLUME_BLOCKED_ANNOTATION, None)
        try:
            self.sim.store.update(
                PODS,
                pod["metadata"]["namespace"],
                pod["metadata"]["name"],
                new,
                subresource="all",
                check_rv=False,
                manager=CONTROLLER_MANAGER,
            )
        except ApiError:
            return

    def _event(self, pod: Obj, kind: str, reason: str, message: str, now: datetime) -> None:
        """One Event per pod, reason and message (the real recorder aggregates repeats)."""
        meta = pod["metadata"]
        digest = hashlib.sha256(f"{meta['uid']}/{reason}/{message}".encode()).hexdigest()[:16]
        name = f"{meta['name']}.{digest}"
        if self.sim.store.peek(EVENTS, meta["namespace"], name) is not None:
            return
        stamp = rfc3339(now)
        event: Obj = {
            "metadata": {"name": name, "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
                "resourceVersion": meta.get("resourceVersion"),
            },
            "reason": reason,
            "message": message,
            "type": kind,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": "",
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
            "eventTime": None,
        }
        try:
            self.sim.store.create(EVENTS, meta["namespace"], event, manager=CONTROLLER_MANAGER)
        except ApiError:
            return


def controllers(sim: Simulation) -> list[Controller]:
    return [AttachDetachController(sim)]
