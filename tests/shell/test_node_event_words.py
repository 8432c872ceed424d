"""The Event an operator reads in ``kubectl describe node``: what survives the API server's
1,024-character cut of a fence's message (the proof, and the command that releases volumes left
attached), and Normal against Warning for a refusal."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import pytest

from nodefence.actions.executor import ActionResult, Outcome
from nodefence.engine.model import (
    ClusterFacts,
    Decision,
    Facts,
    NodeFacts,
    Reason,
    Verdict,
    VolumeAttachmentFacts,
)
from nodefence.engine.volumes import plan_volume_release, release_command
from nodefence.kube.events import MAX_MESSAGE
from nodefence.shell.report import node_event

NOW = datetime(2026, 12, 5, 3, 0, tzinfo=UTC)
PROOF = (
    "all guards passed: fencing node compute02 with the out-of-service taint (NoExecute); "
    "proof: redfish https://bmc-compute02/redfish/v1/Systems/1 reported Off (after nodefence "
    "powered it off, read back at 2026-12-05T03:00:00Z); identity matched (system UUID "
    "4c4c4544-0042-3510-8052-b4c04f4e3232)"
)
VOLUMES = "VolumeAttachment csi-" + "0123456789abcdef" * 60 + " is still attached"


def fence(*reasons: Reason) -> Decision:
    return Decision(Verdict.FENCE, "compute02", reasons, status="firing", now=NOW)


def test_the_proof_and_identity_survive_the_cut_whatever_the_volumes_say() -> None:
    decision = fence(
        Reason("ready", True, "Ready is Unknown"),
        Reason("verdict", True, PROOF),
        Reason("volumes", False, VOLUMES),
    )
    results = [
        ActionResult("purge", "openstack/mariadb-server-1", Outcome.DONE, "deleted"),
        ActionResult("purge", "openstack/ingress-0", Outcome.ALREADY, "pod already gone"),
    ]
    event = node_event(decision, results, purged=1, fenced=True)
    assert event is not None
    reason, message, warning = event
    assert reason == "NodeFenced"
    assert warning
    kept = message[:MAX_MESSAGE]
    assert "reported Off" in kept
    assert "identity matched (system UUID 4c4c4544-0042-3510-8052-b4c04f4e3232)" in kept
    assert "1 pods purged by nodefence, 1 already deleted by Kubernetes' pod garbage" in kept
    # The headline of a fence that left volumes attached says so; one that left nothing
    # undone is the verdict's words, not the last guard's.
    assert decision.summary == VOLUMES
    clean = fence(Reason("verdict", True, PROOF), Reason("volumes", True, "no volume is attached"))
    assert clean.summary == PROOF


def test_a_wait_is_normal_and_a_spent_budget_a_warning() -> None:
    def refused(guard: str) -> Decision:
        return Decision(
            Verdict.NOOP,
            "compute02",
            (Reason("ready", True, "Ready is Unknown"), Reason(guard, False, "held")),
            status="firing",
            now=NOW,
        )

    waiting = node_event(refused("not-ready-duration"), [], 0, fenced=False)
    full = node_event(refused("fence-budget"), [], 0, fenced=False)
    assert waiting == ("FenceRefused", "held", False)
    assert full == ("FenceRefused", "held", True)


def _attachments(count: int) -> tuple[VolumeAttachmentFacts, ...]:
    """As CSI names them: ``csi-`` and the SHA-256 of the volume, attacher and node."""
    return tuple(
        VolumeAttachmentFacts(
            name="csi-" + hashlib.sha256(f"pv-{i}".encode()).hexdigest(),
            node_name="compute02",
            persistent_volume=f"pvc-{hashlib.sha256(str(i).encode()).hexdigest()[:36]}",
            attached=True,
        )
        for i in range(count)
    )


@pytest.mark.parametrize("count", [1, 3, 5, 40])
def test_the_command_that_releases_volumes_left_attached_survives_the_cut(count: int) -> None:
    """A fence that left volumes attached: its Event, cut at 1,024 characters, still holds the
    proof, the identity and the whole command an operator runs to release them."""
    node = NodeFacts(name="compute02", uid="uid-2", resource_version="7")
    facts = Facts(node, None, (), ClusterFacts(5, 4, server_version="v1.25.16"))
    attachments = _attachments(count)
    plan = plan_volume_release(facts, attachments, cleanup_allowed=False)
    decision = fence(
        Reason("ready", True, "Ready is Unknown"), Reason("verdict", True, PROOF), plan.reason
    )
    results = [
        ActionResult("purge", f"openstack/pod-{i}", Outcome.DONE, "deleted") for i in range(3)
    ]
    event = node_event(decision, results, purged=3, fenced=True)
    assert event is not None
    reason, message, warning = event
    assert (reason, warning) == ("NodeFenced", True)
    kept = message[:MAX_MESSAGE]
    command = release_command("compute02", attachments)
    assert f"`{command}`" in kept
    assert "identity matched (system UUID 4c4c4544-0042-3510-8052-b4c04f4e3232)" in kept
    assert "VOLUMES NOT RELEASED" in kept
    if count <= 3:
        assert command.split() == [
            "kubectl",
            "delete",
            "volumeattachment",
            *(a.name for a in attachments),
        ]
    # The decision keeps why, for status and the log.
    assert "NodeOutOfServiceVolumeDetach" in plan.reason.message
