"""Value types the engine reasons about: the alert event, the cluster facts, the decision.

They are plain frozen dataclasses with no Kubernetes client types in them, so the engine stays a
pure function that property-based tests can drive with generated facts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

OUT_OF_SERVICE_KEY = "node.kubernetes.io/out-of-service"
OUT_OF_SERVICE_VALUE = "nodeshutdown"
CONTROL_PLANE_LABELS = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")
PREFIX = "nodefence.io/"
EXCLUDE_LABEL = PREFIX + "exclude"


class AlertStatus(StrEnum):
    FIRING = "firing"
    RESOLVED = "resolved"


@dataclass(frozen=True)
class AlertEvent:
    """One alert of a webhook, reduced to what a decision needs."""

    alertname: str
    status: AlertStatus
    node: str | None
    fingerprint: str
    labels: dict[str, str] = field(default_factory=dict)
    starts_at: datetime | None = None
    ends_at: datetime | None = None


@dataclass(frozen=True)
class Taint:
    key: str
    effect: str
    value: str = ""
    time_added: datetime | None = None


@dataclass(frozen=True)
class Condition:
    type: str
    status: str  # "True", "False", "Unknown"
    last_transition: datetime | None = None
    last_heartbeat: datetime | None = None
    reason: str = ""
    message: str = ""


@dataclass(frozen=True)
class Ledger:
    """What nodefence wrote on the node (annotations under ``nodefence.io/``).

    The node itself is the durable record, so any replica can read who fenced it and when.
    """

    fenced: bool = False
    fenced_at: datetime | None = None
    node_uid: str | None = None
    boot_id: str | None = None
    alert_fingerprint: str | None = None
    taint_effect: str | None = None
    unfenced_at: datetime | None = None
    approval: str | None = None
    rule: str | None = None
    alertname: str | None = None


@dataclass(frozen=True)
class NodeFacts:
    name: str
    uid: str
    resource_version: str
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    ready: Condition | None = None
    boot_id: str = ""
    unschedulable: bool = False
    ledger: Ledger = field(default_factory=Ledger)

    @property
    def is_control_plane(self) -> bool:
        return any(label in self.labels for label in CONTROL_PLANE_LABELS)

    @property
    def out_of_service_taint(self) -> Taint | None:
        return next((t for t in self.taints if t.key == OUT_OF_SERVICE_KEY), None)


@dataclass(frozen=True)
class LeaseFacts:
    renew_time: datetime | None
    holder: str = ""
    duration_seconds: int | None = None


@dataclass(frozen=True)
class PodFacts:
    namespace: str
    name: str
    uid: str
    node_name: str
    deletion_timestamp: datetime | None = None
    finalizers: tuple[str, ...] = ()
    owner_kind: str | None = None  # StatefulSet, ReplicaSet, DaemonSet, Job, ... or None
    owner_name: str | None = None
    phase: str = ""
    has_pvc: bool = False

    @property
    def terminating(self) -> bool:
        return self.deletion_timestamp is not None


@dataclass(frozen=True)
class ClusterFacts:
    """Cluster-wide counts used by the budget, quorum and storm guards."""

    total_nodes: int
    ready_nodes: int
    control_plane_total: int = 0
    control_plane_ready: int = 0
    fenced_by_us: tuple[str, ...] = ()
    server_version: str = ""
    # The control-plane nodes among ``fenced_by_us``: the quorum guard never fences a second one.
    fenced_control_plane: tuple[str, ...] = ()
    # When each Ready node last became Ready: nodes that recovered together mark a storm that
    # just ended, during whose cooldown nothing is fenced.
    ready_since: tuple[datetime, ...] = ()
    # Set when an operator paused nodefence cluster-wide (the control ConfigMap); says by whom.
    paused_reason: str | None = None


@dataclass(frozen=True)
class PowerEvidence:
    """Evidence that the machine behind a node is powered off (from a BMC or cloud power API,
    or an annotation set by external fencing). Only ``state == "off"`` counts as proof."""

    state: str  # "off", "on" or "unknown"
    source: str
    detail: str = ""


@dataclass(frozen=True)
class Facts:
    """Everything read from the cluster for one decision, at one moment."""

    node: NodeFacts | None
    lease: LeaseFacts | None
    pods: tuple[PodFacts, ...]
    cluster: ClusterFacts
    power: PowerEvidence | None = None


class ApprovalDecision(StrEnum):
    APPROVE = "approve"
    REJECT = "reject"


@dataclass(frozen=True)
class Approval:
    """A person's answer to an approval request, bound to the node UID it was asked for.

    The UID binding is what keeps an answer given for one node from authorising a fence of a
    node re-created under the same name (S9).
    """

    user: str
    at: datetime
    decision: ApprovalDecision
    node_uid: str
    fingerprint: str = ""


class Verdict(StrEnum):
    FENCE = "fence"
    PURGE = "purge"
    UNFENCE = "unfence"
    AWAIT_APPROVAL = "await-approval"
    DEFERRED = "deferred"
    NOOP = "noop"
    SKIP = "skip"


@dataclass(frozen=True)
class Reason:
    """One guard's outcome, worded for the operator reading ``kubectl describe node``."""

    guard: str
    passed: bool
    message: str


@dataclass(frozen=True)
class FenceAction:
    """Add the out-of-service taint and the ledger annotations in one write."""

    node: str
    node_uid: str
    resource_version: str
    effect: str
    annotations: dict[str, str]


@dataclass(frozen=True)
class PurgePodAction:
    """Delete with grace 0 and a UID precondition; strip only the listed finalizers after."""

    namespace: str
    name: str
    uid: str
    node: str
    strip_finalizers: tuple[str, ...] = ()


@dataclass(frozen=True)
class UnfenceAction:
    """Remove nodefence's own taint and mark the ledger unfenced."""

    node: str
    node_uid: str
    resource_version: str
    annotations: dict[str, str]
    # Ledger annotations to delete in the same write (``annotations`` holds the ones to set).
    remove_annotations: tuple[str, ...] = ()


Action = FenceAction | PurgePodAction | UnfenceAction


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    node: str | None
    reasons: tuple[Reason, ...]
    actions: tuple[Action, ...] = ()
    dry_run: bool = False
    alertname: str = ""
    fingerprint: str = ""
    status: str = ""
    rule: str | None = None
    now: datetime | None = None

    @property
    def summary(self) -> str:
        """The first blocking reason, or the last passing one: the headline for an Event."""
        blocking = [r for r in self.reasons if not r.passed]
        if blocking:
            return blocking[0].message
        return self.reasons[-1].message if self.reasons else self.verdict.value
