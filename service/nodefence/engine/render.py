"""Decision records as JSON (webhook replies, logs, ``nodefence plan``) and as a short text."""

from __future__ import annotations

from typing import Any

from nodefence.engine.model import (
    Action,
    AskApprovalAction,
    ClaimAction,
    ConfirmAction,
    Decision,
    FenceAction,
    ObserveReadyAction,
    PowerAction,
    ProofContradictedAction,
    PurgePodAction,
    RecordRejectionAction,
    ReleaseAction,
    ReleaseFenceAction,
    ReleaseVolumeAttachmentAction,
    UnfenceAction,
    WithdrawQuestionAction,
)
from nodefence.engine.record import CONFIGMAP, entry_json
from nodefence.engine.wording import instant


def action_to_dict(action: Action) -> dict[str, Any]:
    if isinstance(action, FenceAction):
        return {
            "type": "fence",
            "node": action.node,
            "node_uid": action.node_uid,
            "resource_version": action.resource_version,
            "effect": action.effect,
            "annotations": dict(sorted(action.annotations.items())),
        }
    if isinstance(action, PurgePodAction):
        return {
            "type": "purge-pod",
            "namespace": action.namespace,
            "name": action.name,
            "uid": action.uid,
            "node": action.node,
            "strip_finalizers": list(action.strip_finalizers),
        }
    if isinstance(action, UnfenceAction):
        return {
            "type": "unfence",
            "node": action.node,
            "node_uid": action.node_uid,
            "resource_version": action.resource_version,
            "annotations": dict(sorted(action.annotations.items())),
            "effect": action.effect,
            "remove_annotations": list(action.remove_annotations),
        }
    if isinstance(action, ClaimAction):
        return {
            "type": "claim",
            "node": action.entry.node,
            "record": CONFIGMAP,
            "record_version": action.record_version,
            "entry": entry_json(action.entry),
        }
    if isinstance(action, ConfirmAction):
        return {
            "type": "confirm",
            "node": action.node,
            "node_uid": action.node_uid,
            "proof": action.proof,
        }
    if isinstance(action, PowerAction):
        return {
            "type": "power",
            "node": action.node,
            "node_uid": action.node_uid,
            "driver": action.driver,
            "operation": action.operation,
            "send": action.send,
        }
    if isinstance(action, ReleaseAction):
        return {
            "type": "release",
            "node": action.node,
            "node_uid": action.node_uid,
            "why": action.why,
        }
    if isinstance(action, ObserveReadyAction):
        return {
            "type": "observe-ready",
            "node": action.node,
            "node_uid": action.node_uid,
            "seen_at": instant(action.seen_at),
        }
    if isinstance(action, ProofContradictedAction):
        return {
            "type": "proof-contradicted",
            "node": action.node,
            "node_uid": action.node_uid,
            "boot_id": action.boot_id,
        }
    if isinstance(action, AskApprovalAction):
        return {
            "type": "ask-approval",
            "node": action.node,
            "node_uid": action.node_uid,
            "fingerprint": action.incident.fingerprint,
            "not_ready_since": action.incident.not_ready_since,
            "subject": action.subject,
        }
    if isinstance(action, ReleaseVolumeAttachmentAction):
        return {
            "type": "release-volume",
            "node": action.node,
            "node_uid": action.node_uid,
            "name": action.name,
            "persistent_volume": action.persistent_volume,
            "uid": action.uid,
        }
    if isinstance(action, ReleaseFenceAction):
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
    if isinstance(action, RecordRejectionAction):
        return {
            "type": "record-rejection",
            "node": action.node,
            "node_uid": action.node_uid,
            "fingerprint": action.incident.fingerprint,
            "not_ready_since": action.incident.not_ready_since,
            "said": action.said,
            "expires": instant(action.expires),
        }
    if isinstance(action, WithdrawQuestionAction):
        return {
            "type": "withdraw-question",
            "node": action.node,
            "node_uid": action.node_uid,
            "fingerprint": action.fingerprint,
        }
    raise TypeError(f"unknown action {action!r}")


def decision_to_dict(decision: Decision) -> dict[str, Any]:
    return {
        "verdict": decision.verdict.value,
        "node": decision.node,
        "alertname": decision.alertname,
        "fingerprint": decision.fingerprint,
        "status": decision.status,
        "rule": decision.rule,
        "dry_run": decision.dry_run,
        "decided_at": instant(decision.now) if decision.now is not None else None,
        "summary": decision.summary,
        "reasons": [
            {"guard": r.guard, "passed": r.passed, "message": r.message} for r in decision.reasons
        ],
        "actions": [action_to_dict(a) for a in decision.actions],
        "results": [dict(r) for r in decision.results],
    }


def describe_action(action: Action) -> str:
    if isinstance(action, FenceAction):
        return f"taint node {action.node} out-of-service ({action.effect})"
    if isinstance(action, PurgePodAction):
        strip = (
            f", then strip {', '.join(action.strip_finalizers)}" if action.strip_finalizers else ""
        )
        return f"force-delete pod {action.namespace}/{action.name}{strip}"
    if isinstance(action, ClaimAction):
        return f"claim a fence budget slot for node {action.entry.node} in {CONFIGMAP}"
    if isinstance(action, ConfirmAction):
        return f"record node {action.node} as fenced in {CONFIGMAP}"
    if isinstance(action, PowerAction):
        if action.operation == "status":
            return f"read the power state of node {action.node} from its BMC ({action.driver})"
        if not action.send:
            return f"read back the power state of node {action.node} ({action.driver})"
        return f"power node {action.node} {action.operation} through its BMC ({action.driver})"
    if isinstance(action, ReleaseAction):
        return f"release node {action.node} from {CONFIGMAP} ({action.why})"
    if isinstance(action, ObserveReadyAction):
        return f"record that node {action.node} was seen Ready at {instant(action.seen_at)}"
    if isinstance(action, ProofContradictedAction):
        return (
            f"record in {CONFIGMAP} that node {action.node}'s power-off proof was false (back "
            f"with boot ID {action.boot_id}) and hold its taint for a person"
        )
    if isinstance(action, AskApprovalAction):
        return f"ask in Slack whether to fence node {action.node}"
    if isinstance(action, ReleaseVolumeAttachmentAction):
        return (
            f"delete VolumeAttachment {action.name} ({action.persistent_volume}) of node "
            f"{action.node}"
        )
    if isinstance(action, ReleaseFenceAction):
        taken = f"its out-of-service taint ({action.effect}) and " if action.effect else ""
        if not action.same_node:
            taken = ""
        return f"let go of node {action.node}'s fence: {taken}its entry in {CONFIGMAP}"
    if isinstance(action, RecordRejectionAction):
        return f"record in {CONFIGMAP} that fencing node {action.node} was {action.said}"
    if isinstance(action, WithdrawQuestionAction):
        return f"withdraw the answered question about node {action.node} from {CONFIGMAP}"
    if isinstance(action, UnfenceAction):
        return f"remove the out-of-service taint from node {action.node} ({action.effect})"
    raise TypeError(f"unknown action {action!r}")


def describe(decision: Decision) -> str:
    """A few lines for a terminal: headline, then each guard marked ok or blocked, then actions."""
    mode = " (dry run)" if decision.dry_run else ""
    about = decision.alertname or decision.status or "decision"
    head = f"{decision.verdict.value}{mode} {decision.node or '-'} [{about}]: {decision.summary}"
    lines = [head]
    lines.extend(
        f"  {'ok ' if r.passed else 'NO '} {r.guard}: {r.message}" for r in decision.reasons
    )
    lines.extend(f"  -> {describe_action(a)}" for a in decision.actions)
    return "\n".join(lines)
