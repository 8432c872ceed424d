"""What each action type of the engine is called and how it is told, in one table.

An action is read by people in several places: the decision's JSON (webhook replies, the log,
``nodefence plan``, the OpenAPI document's schemas), a line of words in the log and in ``plan``,
the results of its writes (``results[].action``, the ``action`` label of
``nodefence_actions_total``), the node metrics a done write moves, and the Slack notice. All of it
is in the ``ActionKind`` of its type below, so a new action type is one entry here, and a type or
result name missing from the table is an error wherever it is met, never worded as another.

The JSON shape of each action is a ``TypedDict``: ``to_json`` is checked against it by mypy, and
the OpenAPI document is generated from it, so what is served and what is described are one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, Literal, TypeVar, cast

from typing_extensions import TypedDict

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
from nodefence.engine.record import CONFIGMAP, entry_json
from nodefence.engine.wording import instant

TaintEffect = Literal["NoExecute", "NoSchedule"]
PowerOperation = Literal["off", "on", "status"]
# How one write ended (``results[].outcome``): the values of ``actions.executor.Outcome``.
OutcomeName = Literal["done", "already", "conflict", "skipped", "failed"]


class UnknownActionError(TypeError):
    """An action type or result name that is not in the table: a programming error."""


class Counted(StrEnum):
    """What a done write of a result moves besides ``nodefence_actions_total``."""

    FENCED = "fenced"  # nodefence_fenced_timestamp_seconds{node}
    UNFENCED = "unfenced"  # nodefence_fenced_timestamp_seconds{node} goes
    PURGED = "purged"  # nodefence_pods_purged_total
    # nodefence_proof_contradicted_total{node} and nodefence_proof_contradicted_timestamp_seconds
    PROOF_CONTRADICTED = "proof-contradicted"


@dataclass(frozen=True)
class Result:
    """A name the results of an action type's writes go by. A type's writes can end in several
    (a power action's ``power-off`` or ``power-on``; a claim's taint taken off again is an
    ``undo-fence``): each is named here with its type, and only here."""

    name: str
    counts: Counted | None = None
    # The Slack notice of a done one ({node} is the node's name, escaped), "" for none.
    notice: str = ""


A = TypeVar("A")


@dataclass(frozen=True)
class ActionKind(Generic[A]):
    """One action type: its ``name`` (the ``type`` of its JSON), the JSON's shape (``wire``) and
    how it is made, its words, and the names its results go by."""

    action: type[A]
    name: str
    wire: type[Mapping[str, Any]]
    to_json: Callable[[A], ActionJson]
    describe: Callable[[A], str]
    results: tuple[Result, ...]


# The result names, each once.
CLAIMED = Result("claim")
FENCED = Result(
    "fence",
    Counted.FENCED,
    ":no_entry: nodefence fenced node *{node}* (out-of-service taint applied)",
)
CONFIRMED = Result("confirm")
POWER_OFF = Result("power-off")
POWER_ON = Result("power-on")
POWER_STATUS = Result("power-status")
PURGED = Result("purge", Counted.PURGED)
UNFENCED = Result(
    "unfence",
    Counted.UNFENCED,
    ":white_check_mark: nodefence unfenced node *{node}* (taint removed)",
)
# A taint whose claim vanished while it was written, taken off again by the replica that wrote
# it: an unfence, but of a fence that never stood, so it neither moves the gauge nor is notified.
UNDONE = Result("undo-fence")
RELEASED = Result("release")
SEEN_READY = Result("observe-ready")
CONTRADICTED = Result("proof-contradicted", Counted.PROOF_CONTRADICTED)
ASKED = Result("ask-approval")
VOLUME_RELEASED = Result("release-volume")
NODE_RELEASED = Result("release-node")
# An answer's record writes go by the record's word for them; without an approval channel to
# write through, by the action's own.
REJECTION_WRITTEN = Result("approval-reject")
REJECTION = Result("record-rejection")
APPROVAL_WRITTEN = Result("approval-approve")
APPROVAL = Result("record-approval")
WITHDRAWAL_WRITTEN = Result("approval-withdraw")
WITHDRAWAL = Result("withdraw-question")
# An incident's recovery written into its entry (``nodefence_recovery_seconds`` is observed by
# the replica whose write did it; ``already``: another replica measured it first).
RECOVERED = Result("record-recovery")


class FenceActionJson(TypedDict):
    type: Literal["fence"]
    node: str
    node_uid: str
    resource_version: str
    effect: TaintEffect
    annotations: dict[str, str]


def _fence_json(action: FenceAction) -> FenceActionJson:
    return {
        "type": "fence",
        "node": action.node,
        "node_uid": action.node_uid,
        "resource_version": action.resource_version,
        "effect": cast(TaintEffect, action.effect),
        "annotations": dict(sorted(action.annotations.items())),
    }


def _fence_words(action: FenceAction) -> str:
    return f"taint node {action.node} out-of-service ({action.effect})"


class PurgePodActionJson(TypedDict):
    type: Literal["purge-pod"]
    namespace: str
    name: str
    uid: str
    node: str
    strip_finalizers: list[str]


def _purge_json(action: PurgePodAction) -> PurgePodActionJson:
    return {
        "type": "purge-pod",
        "namespace": action.namespace,
        "name": action.name,
        "uid": action.uid,
        "node": action.node,
        "strip_finalizers": list(action.strip_finalizers),
    }


def _purge_words(action: PurgePodAction) -> str:
    strip = f", then strip {', '.join(action.strip_finalizers)}" if action.strip_finalizers else ""
    return f"force-delete pod {action.namespace}/{action.name}{strip}"


class UnfenceActionJson(TypedDict):
    type: Literal["unfence"]
    node: str
    node_uid: str
    resource_version: str
    annotations: dict[str, str]
    effect: TaintEffect
    remove_annotations: list[str]


def _unfence_json(action: UnfenceAction) -> UnfenceActionJson:
    return {
        "type": "unfence",
        "node": action.node,
        "node_uid": action.node_uid,
        "resource_version": action.resource_version,
        "annotations": dict(sorted(action.annotations.items())),
        "effect": cast(TaintEffect, action.effect),
        "remove_annotations": list(action.remove_annotations),
    }


def _unfence_words(action: UnfenceAction) -> str:
    return f"remove the out-of-service taint from node {action.node} ({action.effect})"


class ClaimActionJson(TypedDict):
    """Take a fence budget slot in the fence record (resourceVersion-checked)."""

    type: Literal["claim"]
    node: str
    record: str
    record_version: str
    entry: dict[str, Any]


def _claim_json(action: ClaimAction) -> ClaimActionJson:
    return {
        "type": "claim",
        "node": action.entry.node,
        "record": CONFIGMAP,
        "record_version": action.record_version,
        "entry": entry_json(action.entry),
    }


def _claim_words(action: ClaimAction) -> str:
    return f"claim a fence budget slot for node {action.entry.node} in {CONFIGMAP}"


class ConfirmActionJson(TypedDict):
    type: Literal["confirm"]
    node: str
    node_uid: str
    proof: str


def _confirm_json(action: ConfirmAction) -> ConfirmActionJson:
    return {
        "type": "confirm",
        "node": action.node,
        "node_uid": action.node_uid,
        "proof": action.proof,
    }


def _confirm_words(action: ConfirmAction) -> str:
    return f"record node {action.node} as fenced in {CONFIGMAP}"


class PowerActionJson(TypedDict):
    type: Literal["power"]
    node: str
    node_uid: str
    driver: str
    operation: PowerOperation
    send: bool


def _power_json(action: PowerAction) -> PowerActionJson:
    return {
        "type": "power",
        "node": action.node,
        "node_uid": action.node_uid,
        "driver": action.driver,
        "operation": cast(PowerOperation, action.operation),
        "send": action.send,
    }


def _power_words(action: PowerAction) -> str:
    if action.operation == "status":
        return f"read the power state of node {action.node} from its BMC ({action.driver})"
    if not action.send:
        return f"read back the power state of node {action.node} ({action.driver})"
    return f"power node {action.node} {action.operation} through its BMC ({action.driver})"


class ReleaseActionJson(TypedDict):
    type: Literal["release"]
    node: str
    node_uid: str
    why: str


def _release_json(action: ReleaseAction) -> ReleaseActionJson:
    return {"type": "release", "node": action.node, "node_uid": action.node_uid, "why": action.why}


def _release_words(action: ReleaseAction) -> str:
    return f"release node {action.node} from {CONFIGMAP} ({action.why})"


class ObserveReadyActionJson(TypedDict):
    type: Literal["observe-ready"]
    node: str
    node_uid: str
    seen_at: str


def _observe_json(action: ObserveReadyAction) -> ObserveReadyActionJson:
    return {
        "type": "observe-ready",
        "node": action.node,
        "node_uid": action.node_uid,
        "seen_at": instant(action.seen_at),
    }


def _observe_words(action: ObserveReadyAction) -> str:
    return f"record that node {action.node} was seen Ready at {instant(action.seen_at)}"


class ProofContradictedActionJson(TypedDict):
    """Record that the node came back with its fence-time boot ID (its power-off proof was
    false) and hold its taint until a person releases it."""

    type: Literal["proof-contradicted"]
    node: str
    node_uid: str
    boot_id: str


def _contradicted_json(action: ProofContradictedAction) -> ProofContradictedActionJson:
    return {
        "type": "proof-contradicted",
        "node": action.node,
        "node_uid": action.node_uid,
        "boot_id": action.boot_id,
    }


def _contradicted_words(action: ProofContradictedAction) -> str:
    return (
        f"record in {CONFIGMAP} that node {action.node}'s power-off proof was false (back "
        f"with boot ID {action.boot_id}) and hold its taint for a person"
    )


class AskApprovalActionJson(TypedDict):
    """Ask a person in Slack whether to fence this incident of the node (the fence record holds
    no open question about it). ``subject``: the failed power step the question asks a person to
    overrule (empty for a rule that asks before every fence); an approval stands in for that
    failure only."""

    type: Literal["ask-approval"]
    node: str
    node_uid: str
    fingerprint: str
    not_ready_since: str
    subject: str


def _ask_json(action: AskApprovalAction) -> AskApprovalActionJson:
    return {
        "type": "ask-approval",
        "node": action.node,
        "node_uid": action.node_uid,
        "fingerprint": action.incident.fingerprint,
        "not_ready_since": action.incident.not_ready_since,
        "subject": action.subject,
    }


def _ask_words(action: AskApprovalAction) -> str:
    return f"ask in Slack whether to fence node {action.node}"


class ReleaseVolumeAttachmentActionJson(TypedDict):
    """Delete a VolumeAttachment of a node nodefence holds fenced and found down, once no pod on
    it uses a claim, on a cluster that may not detach the volumes of an out-of-service node
    itself (a UID precondition names the one read)."""

    type: Literal["release-volume"]
    node: str
    node_uid: str
    name: str
    persistent_volume: str
    uid: str


def _volume_json(action: ReleaseVolumeAttachmentAction) -> ReleaseVolumeAttachmentActionJson:
    return {
        "type": "release-volume",
        "node": action.node,
        "node_uid": action.node_uid,
        "name": action.name,
        "persistent_volume": action.persistent_volume,
        "uid": action.uid,
    }


def _volume_words(action: ReleaseVolumeAttachmentAction) -> str:
    return (
        f"delete VolumeAttachment {action.name} ({action.persistent_volume}) of node {action.node}"
    )


class ReleaseFenceActionJson(TypedDict):
    """An operator's release (nodefence release): take exactly nodefence's taint and its mirror
    annotations off the node (preconditioned on its uid and resourceVersion), then drop its
    fence record entry."""

    type: Literal["release-fence"]
    node: str
    node_uid: str
    resource_version: str
    effect: str
    remove_annotations: list[str]
    why: str
    same_node: bool


def _release_fence_json(action: ReleaseFenceAction) -> ReleaseFenceActionJson:
    return {
        "type": "release-fence",
        "node": action.node,
        "node_uid": action.node_uid,
        "resource_version": action.resource_version,
        "effect": action.effect,
        "remove_annotations": list(action.remove_annotations),
        "why": action.why,
        "same_node": action.same_node,
    }


def _release_fence_words(action: ReleaseFenceAction) -> str:
    taken = f"its out-of-service taint ({action.effect}) and " if action.effect else ""
    if not action.same_node:
        taken = ""
    return f"let go of node {action.node}'s fence: {taken}its entry in {CONFIGMAP}"


class RecordRejectionActionJson(TypedDict):
    """Record in the fence record that a person rejected fencing this incident of the node (it
    holds for that outage), and show it on the node."""

    type: Literal["record-rejection"]
    node: str
    node_uid: str
    fingerprint: str
    not_ready_since: str
    said: str
    expires: str


def _rejection_json(action: RecordRejectionAction) -> RecordRejectionActionJson:
    return {
        "type": "record-rejection",
        "node": action.node,
        "node_uid": action.node_uid,
        "fingerprint": action.incident.fingerprint,
        "not_ready_since": action.incident.not_ready_since,
        "said": action.said,
        "expires": instant(action.expires),
    }


def _rejection_words(action: RecordRejectionAction) -> str:
    return f"record in {CONFIGMAP} that fencing node {action.node} was {action.said}"


class RecordApprovalActionJson(TypedDict):
    """Record in the fence record that a person approved fencing this incident of the node,
    before acting on it: the one answer that is acted on, holding any other off until
    ``until``."""

    type: Literal["record-approval"]
    node: str
    node_uid: str
    fingerprint: str
    not_ready_since: str
    said: str
    expires: str
    until: str


def _approval_json(action: RecordApprovalAction) -> RecordApprovalActionJson:
    return {
        "type": "record-approval",
        "node": action.node,
        "node_uid": action.node_uid,
        "fingerprint": action.incident.fingerprint,
        "not_ready_since": action.incident.not_ready_since,
        "said": action.said,
        "expires": instant(action.expires),
        "until": instant(action.until),
    }


def _approval_words(action: RecordApprovalAction) -> str:
    return (
        f"record in {CONFIGMAP} that fencing node {action.node} was {action.said}, "
        "the answer acted on"
    )


class WithdrawQuestionActionJson(TypedDict):
    """Forget an answered approval question that did not lead to a fence, so the next alert that
    reaches approval asks afresh."""

    type: Literal["withdraw-question"]
    node: str
    node_uid: str
    fingerprint: str


def _withdraw_json(action: WithdrawQuestionAction) -> WithdrawQuestionActionJson:
    return {
        "type": "withdraw-question",
        "node": action.node,
        "node_uid": action.node_uid,
        "fingerprint": action.fingerprint,
    }


def _withdraw_words(action: WithdrawQuestionAction) -> str:
    return f"withdraw the answered question about node {action.node} from {CONFIGMAP}"


class RecordRecoveryActionJson(TypedDict):
    """Record that every pod the fenced node held has stayed Running elsewhere, and since when
    (the API server's clock); ``seconds`` is from the node's last sign of life."""

    type: Literal["record-recovery"]
    node: str
    node_uid: str
    recovered_at: str
    seconds: float


def _recovery_json(action: RecordRecoveryAction) -> RecordRecoveryActionJson:
    return {
        "type": "record-recovery",
        "node": action.node,
        "node_uid": action.node_uid,
        "recovered_at": instant(action.recovered_at),
        "seconds": action.seconds,
    }


def _recovery_words(action: RecordRecoveryAction) -> str:
    return (
        f"record in {CONFIGMAP} that node {action.node}'s pods run elsewhere "
        f"({action.seconds:.0f} s after it went silent)"
    )


ActionJson = (
    FenceActionJson
    | PurgePodActionJson
    | UnfenceActionJson
    | ClaimActionJson
    | ConfirmActionJson
    | PowerActionJson
    | ReleaseActionJson
    | ObserveReadyActionJson
    | ProofContradictedActionJson
    | AskApprovalActionJson
    | ReleaseVolumeAttachmentActionJson
    | ReleaseFenceActionJson
    | RecordRejectionActionJson
    | RecordApprovalActionJson
    | WithdrawQuestionActionJson
    | RecordRecoveryActionJson
)

KINDS: tuple[ActionKind[Any], ...] = (
    ActionKind(FenceAction, "fence", FenceActionJson, _fence_json, _fence_words, (FENCED,)),
    ActionKind(
        PurgePodAction, "purge-pod", PurgePodActionJson, _purge_json, _purge_words, (PURGED,)
    ),
    ActionKind(
        UnfenceAction,
        "unfence",
        UnfenceActionJson,
        _unfence_json,
        _unfence_words,
        (UNFENCED, UNDONE),
    ),
    ActionKind(ClaimAction, "claim", ClaimActionJson, _claim_json, _claim_words, (CLAIMED,)),
    ActionKind(
        ConfirmAction, "confirm", ConfirmActionJson, _confirm_json, _confirm_words, (CONFIRMED,)
    ),
    ActionKind(
        PowerAction,
        "power",
        PowerActionJson,
        _power_json,
        _power_words,
        (POWER_OFF, POWER_ON, POWER_STATUS),
    ),
    ActionKind(
        ReleaseAction, "release", ReleaseActionJson, _release_json, _release_words, (RELEASED,)
    ),
    ActionKind(
        ObserveReadyAction,
        "observe-ready",
        ObserveReadyActionJson,
        _observe_json,
        _observe_words,
        (SEEN_READY,),
    ),
    ActionKind(
        ProofContradictedAction,
        "proof-contradicted",
        ProofContradictedActionJson,
        _contradicted_json,
        _contradicted_words,
        (CONTRADICTED,),
    ),
    ActionKind(
        AskApprovalAction, "ask-approval", AskApprovalActionJson, _ask_json, _ask_words, (ASKED,)
    ),
    ActionKind(
        ReleaseVolumeAttachmentAction,
        "release-volume",
        ReleaseVolumeAttachmentActionJson,
        _volume_json,
        _volume_words,
        (VOLUME_RELEASED,),
    ),
    ActionKind(
        ReleaseFenceAction,
        "release-fence",
        ReleaseFenceActionJson,
        _release_fence_json,
        _release_fence_words,
        # The node's write; the record entry is then let go of by a release (``RELEASED``).
        (NODE_RELEASED,),
    ),
    ActionKind(
        RecordRejectionAction,
        "record-rejection",
        RecordRejectionActionJson,
        _rejection_json,
        _rejection_words,
        (REJECTION_WRITTEN, REJECTION),
    ),
    ActionKind(
        RecordApprovalAction,
        "record-approval",
        RecordApprovalActionJson,
        _approval_json,
        _approval_words,
        (APPROVAL_WRITTEN, APPROVAL),
    ),
    ActionKind(
        WithdrawQuestionAction,
        "withdraw-question",
        WithdrawQuestionActionJson,
        _withdraw_json,
        _withdraw_words,
        (WITHDRAWAL_WRITTEN, WITHDRAWAL),
    ),
    ActionKind(
        RecordRecoveryAction,
        "record-recovery",
        RecordRecoveryActionJson,
        _recovery_json,
        _recovery_words,
        (RECOVERED,),
    ),
)

_BY_CLASS: dict[type[Any], ActionKind[Any]] = {kind.action: kind for kind in KINDS}
_BY_RESULT: dict[str, Result] = {result.name: result for kind in KINDS for result in kind.results}


def kind_of(action: Action) -> ActionKind[Any]:
    kind = _BY_CLASS.get(type(action))
    if kind is None:
        raise UnknownActionError(f"nodefence has no action type {type(action).__name__}")
    return kind


def result_named(name: str) -> Result:
    """The result of that name; an unknown one is an error, never counted or worded as another."""
    found = _BY_RESULT.get(name)
    if found is None:
        raise UnknownActionError(f"nodefence has no action result {name!r}")
    return found


def to_json(action: Action) -> dict[str, Any]:
    return dict(kind_of(action).to_json(action))


def describe(action: Action) -> str:
    """The action in words, for the log and ``nodefence plan``."""
    return kind_of(action).describe(action)
