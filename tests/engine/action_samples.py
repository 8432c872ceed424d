"""One action of each type the engine decides, for the tests of how each is told."""

from __future__ import annotations

from datetime import UTC, datetime

from nodefence.engine.approval_request import Incident
from nodefence.engine.model import (
    Action,
    AskApprovalAction,
    ClaimAction,
    ConfirmAction,
    FenceAction,
    ObserveReadyAction,
    PowerAction,
    ProofContradictedAction,
    PurgePodAction,
    RecordApprovalAction,
    RecordRecoveryAction,
    RecordRejectionAction,
    ReleaseAction,
    ReleaseFenceAction,
    ReleaseVolumeAttachmentAction,
    UnfenceAction,
    WithdrawQuestionAction,
)
from nodefence.engine.record import FenceEntry, Phase

NOW = datetime(2026, 12, 5, 3, 0, tzinfo=UTC)
INCIDENT = Incident("uid-1", "fp-1", "2026-12-05T02:40:00Z")
ENTRY = FenceEntry(
    "worker1",
    "uid-1",
    Phase.CLAIMED,
    NOW,
    "default",
    "KubeNodeNotReady",
    "fp-1",
    "boot-1",
    "NoExecute",
)

# One of each action type, as the engine decides them.
SAMPLES: tuple[Action, ...] = (
    ClaimAction(ENTRY, "41"),
    PowerAction("worker1", "uid-1", "redfish", "off", True),
    FenceAction("worker1", "uid-1", "42", "NoExecute", {"nodefence.io/fenced": "true"}),
    ConfirmAction("worker1", "uid-1", proof="redfish reported Off"),
    PurgePodAction("db", "mariadb-0", "pod-uid", "worker1", ("kubernetes.io/pvc-protection",)),
    UnfenceAction("worker1", "uid-1", "43", "NoExecute", {}, ("nodefence.io/fenced",)),
    ReleaseAction("worker1", "uid-1", "the node object is gone"),
    ObserveReadyAction("worker1", "uid-1", NOW, NOW),
    ProofContradictedAction("worker1", "uid-1", "boot-1"),
    AskApprovalAction("worker1", "uid-1", INCIDENT),
    ReleaseVolumeAttachmentAction("worker1", "uid-1", "csi-1", "pv-1", "va-uid"),
    ReleaseFenceAction("worker1", "uid-1", "43", "NoExecute", ("nodefence.io/fenced",), "asked"),
    RecordRejectionAction("worker1", "uid-1", INCIDENT, "rejected by alice at 03:00", NOW),
    RecordApprovalAction("worker1", "uid-1", INCIDENT, "approved by bob at 03:00", NOW, NOW),
    WithdrawQuestionAction("worker1", "uid-1", "fp-1"),
    RecordRecoveryAction("worker1", "uid-1", NOW, 71.0, "StatefulSet pods running elsewhere"),
)
