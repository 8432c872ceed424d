"""Value types the engine reasons about: the alert event, the cluster facts, the decision.

They are plain frozen dataclasses with no Kubernetes client types in them, so the engine stays a
pure function that property-based tests can drive with generated facts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from nodefence.engine.approval_request import Incident
from nodefence.engine.evidence import PowerEvidence
from nodefence.engine.guard_kinds import VERDICT, ended_by_off
from nodefence.engine.identity import MachineBinding
from nodefence.engine.record import FenceEntry, FenceRecord

OUT_OF_SERVICE_KEY = "node.kubernetes.io/out-of-service"
OUT_OF_SERVICE_VALUE = "nodeshutdown"
CONTROL_PLANE_LABELS = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")
PREFIX = "nodefence.io/"
EXCLUDE_LABEL = PREFIX + "exclude"
API_SERVER_CLOCK = "api-server"


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
    # Set when no alert arrived and the reconcile pass judges a NotReady node as if it had
    # fired (``engine.fallback``): why it did, in words that go into the decision and its Event.
    fallback: str = ""
    # Set on a fallback event when an Alertmanager silence would silence the node's alert
    # (``engine.silences``): the silence's words; the decision is held by it.
    silenced: str = ""


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
    # The latest time the API server stamped on a write of the node's status (by the kubelet or
    # the node lifecycle controller): the last the API server heard of the node, on its clock.
    status_written: datetime | None = None
    # The field managers the API server lists as owning ``spec.taints`` (an atomic list: the
    # last writer that changed any taint owns it whole). S4 reads authorship from it.
    taints_written_by: tuple[str, ...] = ()
    # What ties the Node to its machine (S10): the SMBIOS system UUID the kubelet read, and the
    # cloud's instance as the cloud controller wrote it.
    system_uuid: str = ""
    provider_id: str = ""

    @property
    def is_control_plane(self) -> bool:
        return any(label in self.labels for label in CONTROL_PLANE_LABELS)

    @property
    def out_of_service_taint(self) -> Taint | None:
        return next((t for t in self.taints if t.key == OUT_OF_SERVICE_KEY), None)


@dataclass(frozen=True)
class LeaseFacts:
    """The kubelet's Lease. ``renew_time`` is stamped by the kubelet's own clock and is shown,
    never trusted; ``server_renewed`` is the latest ``managedFields[].time``, which the API
    server stamps on each write, so it is on the same clock as the ``Date`` of the read."""

    renew_time: datetime | None
    holder: str = ""
    duration_seconds: int | None = None
    server_renewed: datetime | None = None


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
    # Both stamped by the API server: when the pod was created, and when anyone last changed it
    # (its latest ``managedFields`` time); a pod Running whose last change is long past has
    # stayed Running since (``engine.recovery``).
    created: datetime | None = None
    changed: datetime | None = None
    # The ``pod-template-hash`` label: with a ReplicaSet owner, names the Deployment (the
    # ReplicaSet is ``<deployment>-<hash>``).
    template_hash: str = ""

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
    server_version: str = ""
    # Ready nodes that can take workloads: schedulable and not out of service. ``None`` when
    # the reader could not tell, and then ``ready_nodes`` is used.
    schedulable_ready: int | None = None
    # When each Ready node last became Ready: nodes that recovered together mark a storm that
    # just ended, during whose cooldown nothing is fenced.
    ready_since: tuple[datetime, ...] = ()
    # Set when an operator paused nodefence cluster-wide (the control ConfigMap); says by whom.
    paused_reason: str | None = None
    # S3: the nodes carrying an out-of-service taint, whoever applied it (an admin's hand-fenced
    # node spends the budget too), and those of them whose mirror annotations say nodefence
    # fenced them (compared with the record, they show a record that lost entries).
    out_of_service: tuple[str, ...] = ()
    mirrored: tuple[str, ...] = ()


@dataclass(frozen=True)
class VolumeAttachmentFacts:
    name: str
    node_name: str
    persistent_volume: str
    attached: bool
    # When the API server created it (its own clock).
    created: datetime | None = None
    # Already being deleted (a finalizer holds it until the attacher lets go): never again.
    deleting: bool = False
    # Its metadata.uid: the delete names it, so an attachment re-created under the same name
    # (the name is a hash of volume, attacher and node name: a re-created node of the same
    # name gets the same one) is never the one deleted (S9).
    uid: str = ""


@dataclass(frozen=True)
class DryRunRead:
    """A dry run's read-only look at the node's machine through its BMC (``shell.dry_run_power``):
    the power step's own driver lookup and identity check, then a status read in place of the
    power action, which is never sent (S8). ``engine.dry_run`` says what it found."""

    # What the BMC reported (None: nothing was read, for want of a driver or of an identity).
    reading: PowerEvidence | None = None
    # The identity check's words on the BMC's target ("": it had none to say).
    identity: str = ""
    # Why no driver could ask the BMC (None: one could, and the identity check ran).
    no_driver: str | None = None


@dataclass(frozen=True)
class VolumesTurn:
    """What one turn of the loop after a fence (``Loop.settle``) decided of the node's volumes:
    its volumes reason (None: it said nothing of them) and whether it deleted VolumeAttachments
    (``engine.volumes.seen``)."""

    reason: Reason | None
    deleted: bool


@dataclass(frozen=True)
class Facts:
    """Everything read from the cluster for one decision, at one moment."""

    node: NodeFacts | None
    lease: LeaseFacts | None
    pods: tuple[PodFacts, ...]
    cluster: ClusterFacts
    power: PowerEvidence | None = None
    record: FenceRecord = field(default_factory=FenceRecord)
    # What the BMC inventory says of this node's machine (None: no inventory entry).
    machine: MachineBinding | None = None
    # Other Nodes reporting this node's systemUUID (cloned VMs): a match cannot tell them apart.
    uuid_shared_with: tuple[str, ...] = ()
    # Which clock ``now`` was read from. Liveness is judged only on the API server's (the
    # ``Date`` of the responses that carried the facts); on any other clock it fails safe.
    clock: str = API_SERVER_CLOCK
    # The node this replica runs on (``NODEFENCE_NODE_NAME``; None: none of the cluster's): it
    # leaves that node's fence to another replica.
    own_node: str | None = None
    # The node's VolumeAttachments (None: not read): read when an unfence is in view (it waits
    # until none from before the fence is still attached), or when a decision on a node found
    # down says what becomes of them (``Decision.needs_attachments``).
    attachments: tuple[VolumeAttachmentFacts, ...] | None = None
    # The pods of the namespaces the node held pods in, read for the reconcile pass's recovery
    # measurement (``engine.recovery``; None: not read).
    elsewhere: tuple[PodFacts, ...] | None = None
    # A read-only look at the node's machine through its BMC, taken while the node waited out
    # a wait the machine's state can end (``engine.power_waits``; None: not read). Never proof:
    # the power step still reads Off back before any taint.
    early_power: PowerEvidence | None = None
    # A dry run's read-only look at the node's machine, taken for a plan that would ask its BMC
    # (``Decision.dry_run_read``; None: not read).
    dry_run_power: DryRunRead | None = None
    # What the loop's turns after this request's fence decided of the node's volumes, in order
    # (None: the fence is being decided, not reported once the loop settled): the pods the fence
    # purged are gone only after it was decided (``engine.volumes.decided``).
    settled_volumes: tuple[VolumesTurn, ...] | None = None


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
    # For a wait that ends on its own: the earliest moment, on the API server's clock, at
    # which this guard can pass (``nodefence status`` shows it). None: no known end.
    until: datetime | None = None


@dataclass(frozen=True)
class ClaimAction:
    """Take a budget slot: add the entry to the fence record, written on exactly the record
    version the decision read, so a concurrent claim by another replica makes this one fail."""

    entry: FenceEntry
    record_version: str


@dataclass(frozen=True)
class FenceAction:
    """Add the out-of-service taint (and the mirror annotations for people) in one write,
    preconditioned on the node's uid and resourceVersion."""

    node: str
    node_uid: str
    resource_version: str
    effect: str
    annotations: dict[str, str]
    # The taint's ``timeAdded``: the API server's clock at the decision, kept in the record from
    # the write's reply, so the taint can later be told from one someone else re-applied (S4).
    time_added: datetime | None = None


@dataclass(frozen=True)
class ConfirmAction:
    """Mark the record entry fenced once the taint is on; ``claimed_by`` names the claim being
    completed, or is empty for the claim made by the same decision."""

    node: str
    node_uid: str
    claimed_by: str = ""
    proof: str = ""
    # The person's approval the fence rests on, when one was given in the same request that
    # completes it (an escalation answered after the claim was written); "" keeps the entry's.
    approval: str = ""
    # The ``timeAdded`` of the taint being confirmed, when the decision read it on the node
    # (completing a fence whose confirm was lost); a fresh fence takes it from its write's reply.
    taint_added: datetime | None = None


@dataclass(frozen=True)
class PowerAction:
    """Ask the node's BMC: ``off`` (power off, then read back until Off), ``on`` (after the
    purge of a reboot), or ``status`` (read only). ``send`` is False when the action was already
    sent in this incident (the record says so): then the state is only read, never sent twice."""

    node: str
    node_uid: str
    driver: str
    operation: str  # "off", "on" or "status"
    send: bool
    claimed_by: str = ""
    # S7: the record entry exactly as the decision read it. The write that says the action is
    # sent goes through only on that entry, so a step another replica has overtaken does nothing
    # (None: the entry the same decision's claim writes).
    entry: FenceEntry | None = None


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
    """Remove exactly the taint nodefence applied (key, value and the recorded effect) and
    update the mirror annotations."""

    node: str
    node_uid: str
    resource_version: str
    effect: str
    annotations: dict[str, str]
    # Mirror annotations to delete in the same write (``annotations`` holds the ones to set).
    remove_annotations: tuple[str, ...] = ()


@dataclass(frozen=True)
class ReleaseAction:
    """Drop the record entry of this node object (freeing its budget slot) and remember why.
    ``claimed_by`` set: only if the entry is still that very claim (a rollback)."""

    node: str
    node_uid: str
    why: str
    claimed_by: str = ""
    # Whether the flap guard should see this as a release. A claim rolled back before its
    # taint was ever written released nothing the node could have flapped on.
    remember: bool = True


@dataclass(frozen=True)
class ObserveReadyAction:
    """Write into the record when nodefence first saw the node Ready (API server clock): the
    healthy delay is counted from there, not from a timestamp the kubelet wrote."""

    node: str
    node_uid: str
    ready_transition: datetime | None
    seen_at: datetime


@dataclass(frozen=True)
class ProofContradictedAction:
    """Write into the record that the node came back with the boot ID it had at fence time:
    the machine was never off, so its power-off proof was false. From then on its taint is held
    until a person releases it."""

    node: str
    node_uid: str
    boot_id: str


@dataclass(frozen=True)
class AskApprovalAction:
    """Ask a person (in Slack) whether to fence ``incident``: decided only when the fence record
    holds no open question about it (``engine.approval_ask``). The requester claims the question
    with a record write on the version it read, so of replicas deciding this together one asks."""

    node: str
    node_uid: str
    incident: Incident
    # The failure an escalation's question asks a person to overrule ("" for approval rules).
    subject: str = ""


@dataclass(frozen=True)
class ReleaseVolumeAttachmentAction:
    """Delete a VolumeAttachment of a node nodefence holds fenced and found down, once no pod on
    it uses a claim (``engine.volumes``): a cluster that does not detach the volumes of an
    out-of-service node itself would otherwise keep them from any other node."""

    node: str
    node_uid: str
    name: str
    persistent_volume: str
    # The attachment's own UID as read: the delete's precondition (S9).
    uid: str = ""


@dataclass(frozen=True)
class ReleaseFenceAction:
    """An operator's release (``engine.release``): take exactly nodefence's taint (``effect``;
    "" when it is gone already) and the listed mirror annotations off the node, in one write
    preconditioned on the uid and resourceVersion read, then drop the record entry of node
    object ``node_uid``. ``same_node`` False: the fence was of a node object that is gone, and
    only the entry is dropped."""

    node: str
    node_uid: str
    resource_version: str = ""
    effect: str = ""
    remove_annotations: tuple[str, ...] = ()
    why: str = ""
    same_node: bool = True
    # What releasing a node still NotReady means ("" when it is Ready); the operator confirmed.
    not_ready: str = ""
    notes: tuple[str, ...] = ()

    @property
    def touches_node(self) -> bool:
        return self.same_node and bool(self.effect or self.remove_annotations)


@dataclass(frozen=True)
class RecordRejectionAction:
    """A person rejected fencing ``incident`` (``engine.answer``): write it into the fence
    record's question about the node, where it holds for that outage whatever is pressed next,
    and show it on node object ``node_uid`` for people."""

    node: str
    node_uid: str
    incident: Incident
    # "rejected by <user> at <time>".
    said: str
    # When the question's buttons expire: a rejection written without a question is kept as long.
    expires: datetime


@dataclass(frozen=True)
class RecordApprovalAction:
    """A person approved fencing ``incident`` (``engine.answer``): write it into the fence
    record's question about the node before acting on it, on the record as it is, and only
    while no other answer holds for the incident; the one answer that is written is the one
    acted on. It holds other answers off until ``until`` (the API server's clock)."""

    node: str
    node_uid: str
    incident: Incident
    # "approved by <user> at <time>".
    said: str
    # When the question's buttons expire: an approval written without a question is kept as long.
    expires: datetime
    until: datetime


@dataclass(frozen=True)
class WithdrawQuestionAction:
    """Forget the answered question about node object ``node_uid`` and alert ``fingerprint``
    when it did not lead to a fence, so the next alert that reaches approval asks afresh. A
    rejection is never withdrawn, nor a question asked at or after ``asked_before`` (on the
    requester's clock): acting on the answer asked it, and it is still open."""

    node: str
    node_uid: str
    fingerprint: str
    asked_before: datetime | None = None


@dataclass(frozen=True)
class RecordRecoveryAction:
    """Write into the record that the incident of node object ``node_uid`` is measured: every
    pod it held has been Running elsewhere since ``recovered_at`` (``engine.recovery``), the API
    server's clock. Written once: the replica whose write goes through counts it
    (``nodefence_recovery_seconds``) and writes the Event; any other finds it written."""

    node: str
    node_uid: str
    recovered_at: datetime
    seconds: float
    words: str


Action = (
    ClaimAction
    | PowerAction
    | FenceAction
    | ConfirmAction
    | PurgePodAction
    | UnfenceAction
    | ReleaseAction
    | ObserveReadyAction
    | ProofContradictedAction
    | AskApprovalAction
    | ReleaseVolumeAttachmentAction
    | ReleaseFenceAction
    | RecordRejectionAction
    | RecordApprovalAction
    | WithdrawQuestionAction
    | RecordRecoveryAction
)
RecordAction = ClaimAction | ConfirmAction | ReleaseAction | ObserveReadyAction


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
    # Set when S1 and S2 were checked on a node nodefence holds fenced and both showed it dead:
    # only then may its VolumeAttachments be deleted.
    node_confirmed_down: bool = False
    # The decision would say what becomes of the node's volumes, but its VolumeAttachments were
    # not read (``Facts.attachments``): the shell reads them and decides again.
    needs_attachments: bool = False
    # A wait the machine's power state can end holds the decision back (the NotReady minimum,
    # the fallback's wait for an alert), the rule lets a reading of Off end it, and the BMC was
    # not read (``Facts.early_power``; ``engine.power_waits``).
    power_may_end_wait: bool = False
    # A dry run whose plan would send this power action (it never does) and whose read-only
    # look at the node's machine is not in the facts (``Facts.dry_run_power``): the shell reads
    # the BMC, read-only, and decides again (``engine.dry_run``).
    dry_run_read: PowerAction | None = None
    # What the shell's writes did (action, target, outcome, detail), filled in after the
    # commit so the webhook reply and the log carry the outcome, not only the plan.
    results: tuple[dict[str, str], ...] = ()
    # For a decision waiting on an escalation's answer: the failure the question is about
    # (``escalation.Failure.subject``), which the question records and an approval must match.
    asks_about: str = ""

    @property
    def needs_power_reading(self) -> bool:
        """Only waits a reading of Off ends hold the decision back: the shell reads the machine,
        read-only, and decides again."""
        return self.power_may_end_wait and self.waits_only_on_power(self.reasons)

    def waits_only_on_power(self, reasons: tuple[Reason, ...]) -> bool:
        """Whether something among ``reasons`` holds the decision back and all of it is waits
        a reading of Off ends."""
        blocking = [r.guard for r in reasons if not r.passed]
        return bool(blocking) and all(ended_by_off(guard) for guard in blocking)

    @property
    def not_before(self) -> datetime | None:
        """The earliest moment every guard blocking this decision can pass, when each of them
        is a wait with a known end; None when any is not (or none blocks)."""
        blocking = [r for r in self.reasons if not r.passed]
        ends = [r.until for r in blocking]
        if not blocking or any(end is None for end in ends):
            return None
        return max(end for end in ends if end is not None)

    @property
    def summary(self) -> str:
        """The headline for an Event and the log: the first reason that did not pass (why not,
        or what a fence left undone: volumes still attached), else the verdict's own words (what
        happens and why), else the last reason; never the text of whichever guard happened to
        be judged last."""
        blocking = [r for r in self.reasons if not r.passed]
        if blocking:
            return blocking[0].message
        verdict = next((r.message for r in reversed(self.reasons) if r.guard == VERDICT), None)
        if verdict is not None:
            return verdict
        return self.reasons[-1].message if self.reasons else self.verdict.value
