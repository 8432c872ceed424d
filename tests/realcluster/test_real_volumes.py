"""The volume path on the real attach-detach controller: nodefence's unfence gate reads the
VolumeAttachments it really creates, and the out-of-service taint really makes it detach.

A CSIDriver with ``attachRequired: true`` makes the attach-detach controller create a
VolumeAttachment for a pod's CSI volume; no external-attacher runs here, so the test plays its
part and marks it attached (the status subresource, as the attacher writes it). Then:
- with the node fenced and back, but the pod that uses the volume still on it, the volume stays
  attached and the resolved alert must not unfence (the attachment is from before the fence);
- once the pod is gone the controller detaches (deletes the VolumeAttachment) and the resolved
  alert unfences.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from bench.processes import Processes, eventually
from kubernetes import client

from .conftest import RealBackend
from .test_real_admin_taint import MIRROR, POLICY, actions
from .test_seed_story import NOT_READY_WITHIN, STEP_WITHIN, oos_taints, post_alert, serve

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(300)]

NODE = "compute01"
NAMESPACE = "nodefence-volumes"
DRIVER = "attach.volumes.nodefence.io"
PV = "nodefence-volumes-data"
CLAIM = "data"
POD = "user"
GUARD = "volume-attachments"


def attachments(backend: RealBackend) -> list[client.V1VolumeAttachment]:
    listed = client.StorageV1Api(backend.api).list_volume_attachment().items
    return [a for a in listed if a.spec.source.persistent_volume_name == PV]


def create_volume_user(backend: RealBackend) -> None:
    storage, core = client.StorageV1Api(backend.api), backend.core
    storage.create_csi_driver(
        {"metadata": {"name": DRIVER}, "spec": {"attachRequired": True, "podInfoOnMount": False}}
    )
    core.create_namespace({"metadata": {"name": NAMESPACE}})
    core.create_persistent_volume(
        {
            "metadata": {"name": PV},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "capacity": {"storage": "1Gi"},
                "csi": {"driver": DRIVER, "volumeHandle": PV},
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "claimRef": {"namespace": NAMESPACE, "name": CLAIM},
            },
        }
    )
    core.create_namespaced_persistent_volume_claim(
        NAMESPACE,
        {
            "metadata": {"name": CLAIM},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
                "storageClassName": "",
                "volumeName": PV,
            },
        },
    )
    core.create_namespaced_pod(
        NAMESPACE,
        {
            "metadata": {"name": POD},
            "spec": {
                "nodeName": NODE,
                "containers": [{"name": "c", "image": "busybox"}],
                "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": CLAIM}}],
            },
        },
    )


def remove_volume_user(backend: RealBackend) -> None:
    storage, core = client.StorageV1Api(backend.api), backend.core
    for remove in (
        lambda: core.delete_namespace(NAMESPACE),
        lambda: core.delete_persistent_volume(PV),
        lambda: storage.delete_csi_driver(DRIVER),
    ):
        with contextlib.suppress(client.ApiException):
            remove()


def blocked_by_attachments(decision: dict[str, Any]) -> bool:
    return any(r["guard"] == GUARD and not r["passed"] for r in decision["reasons"])


def test_unfence_waits_for_the_real_attach_detach_controller(
    procs: Processes, real_backend: RealBackend
) -> None:
    core, storage = real_backend.core, client.StorageV1Api(real_backend.api)
    nodefence = serve(procs, real_backend, POLICY)
    create_volume_user(real_backend)
    try:
        [attachment] = eventually(
            lambda: attachments(real_backend), within=STEP_WITHIN, what="VolumeAttachment created"
        )
        assert attachment.spec.node_name == NODE
        assert attachment.spec.attacher == DRIVER
        storage.patch_volume_attachment_status(
            attachment.metadata.name, {"status": {"attached": True}}
        )

        real_backend.control(NODE, "down")
        eventually(
            lambda: real_backend.ready(NODE) == "Unknown",
            within=NOT_READY_WITHIN,
            what=f"{NODE} NotReady",
        )

        def fenced() -> dict[str, Any] | None:
            decision = post_alert(nodefence, NODE, "firing")
            return decision if decision["verdict"] == "fence" else None

        eventually(fenced, within=STEP_WITHIN, interval=1.0, what="nodefence's fence")
        real_backend.control(NODE, "up")
        eventually(
            lambda: real_backend.ready(NODE) == "True", within=STEP_WITHIN, what=f"{NODE} Ready"
        )

        # The pod still uses the volume: it stays attached, and the unfence waits for it.
        def held_back() -> dict[str, Any] | None:
            decision = post_alert(nodefence, NODE, "resolved")
            assert "unfence" not in actions(decision), decision
            return decision if blocked_by_attachments(decision) else None

        decision = eventually(held_back, within=STEP_WITHIN, interval=1.0, what="unfence held")
        [reason] = [r for r in decision["reasons"] if r["guard"] == GUARD]
        assert attachment.metadata.name in reason["message"], reason
        assert oos_taints(core.read_node(NODE))
        assert [a.status.attached for a in attachments(real_backend)] == [True]

        # The pod goes; the real controller detaches, and the unfence follows.
        core.delete_namespaced_pod(POD, NAMESPACE)
        eventually(
            lambda: not attachments(real_backend), within=STEP_WITHIN, what="volume detached"
        )

        def unfenced() -> bool:
            post_alert(nodefence, NODE, "resolved")
            return not oos_taints(core.read_node(NODE))

        eventually(unfenced, within=STEP_WITHIN, interval=1.0, what="unfence")
    finally:
        remove_volume_user(real_backend)
        if oos_taints(core.read_node(NODE)):
            taints = [
                real_backend.api.sanitize_for_serialization(t)
                for t in core.read_node(NODE).spec.taints or []
                if t.key != "node.kubernetes.io/out-of-service"
            ]
            core.patch_node(NODE, {"spec": {"taints": taints}})
        mirror = [
            k for k in core.read_node(NODE).metadata.annotations or {} if k.startswith(MIRROR)
        ]
        if mirror:
            core.patch_node(NODE, {"metadata": {"annotations": dict.fromkeys(mirror)}})
        real_backend.control(NODE, "up")
        eventually(
            lambda: real_backend.ready(NODE) == "True", within=STEP_WITHIN, what=f"{NODE} Ready"
        )
