"""The volume path on the real attach-detach controller and the real external-attacher:
nodefence's unfence gate reads the VolumeAttachments they really make, and the out-of-service
taint really makes them detach.

The claim is provisioned by the real external-provisioner for the run's CSI driver
(``hostdir``, attach required); the attach-detach controller creates a VolumeAttachment for the
pod's node and the real external-attacher attaches it through the driver. Then:
- with the node fenced and back, but the pod that uses the volume still on it, the volume stays
  attached and the resolved alert must not unfence (the attachment is from before the fence);
- once the pod is gone the controller detaches (the attacher detaches through the driver and
  the VolumeAttachment goes) and the resolved alert unfences.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from bench.processes import Processes, eventually
from kubernetes import client

from nodefence_sim.real.storage import DRIVER, STORAGE_CLASS

from .conftest import RealBackend
from .test_real_admin_taint import MIRROR, POLICY, actions
from .test_seed_story import NOT_READY_WITHIN, STEP_WITHIN, oos_taints, post_alert, serve

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(300)]

NODE = "compute01"
NAMESPACE = "nodefence-volumes"
CLAIM = "data"
POD = "user"
GUARD = "volume-attachments"


def attachments(backend: RealBackend) -> list[client.V1VolumeAttachment]:
    """The VolumeAttachments of the claim's volume (none before it is provisioned)."""
    claim = backend.core.read_namespaced_persistent_volume_claim(CLAIM, NAMESPACE)
    listed = client.StorageV1Api(backend.api).list_volume_attachment().items
    return [
        a
        for a in listed
        if claim.spec.volume_name and a.spec.source.persistent_volume_name == claim.spec.volume_name
    ]


def create_volume_user(backend: RealBackend) -> None:
    core = backend.core
    core.create_namespace({"metadata": {"name": NAMESPACE}})
    core.create_namespaced_persistent_volume_claim(
        NAMESPACE,
        {
            "metadata": {"name": CLAIM},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
                "storageClassName": STORAGE_CLASS,
            },
        },
    )
    # Placed by the scheduler, which tells the provisioner the node (WaitForFirstConsumer).
    core.create_namespaced_pod(
        NAMESPACE,
        {
            "metadata": {"name": POD},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": NODE},
                "containers": [{"name": "c", "image": "busybox"}],
                "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": CLAIM}}],
            },
        },
    )


def remove_volume_user(backend: RealBackend) -> None:
    """The namespace goes, its claim with it; the provisioner deletes the volume once the
    attacher has detached it."""
    with contextlib.suppress(client.ApiException):
        backend.core.delete_namespace(NAMESPACE)


def blocked_by_attachments(decision: dict[str, Any]) -> bool:
    return any(r["guard"] == GUARD and not r["passed"] for r in decision["reasons"])


def test_unfence_waits_for_the_real_attach_detach_controller(
    procs: Processes, real_backend: RealBackend
) -> None:
    core = real_backend.core
    nodefence = serve(procs, real_backend, POLICY)
    create_volume_user(real_backend)
    try:
        [attachment] = eventually(
            lambda: [a for a in attachments(real_backend) if a.status and a.status.attached],
            within=STEP_WITHIN,
            what="the volume attached by the external-attacher",
        )
        assert attachment.spec.node_name == NODE
        assert attachment.spec.attacher == DRIVER

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
