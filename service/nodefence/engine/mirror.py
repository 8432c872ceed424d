"""The mirror: annotations under ``nodefence.io/`` that show people what nodefence did.

They are written beside the taint so that ``kubectl describe node`` tells the story, but a node's
own credentials can edit its annotations, so nothing here is ever read back as authority: the
fence record in nodefence's namespace is (``engine/record.py``). The one exception only makes
nodefence more careful: a recorded rejection of an approval request is honoured.
"""

from __future__ import annotations

from collections.abc import Mapping

from nodefence.engine.model import PREFIX, Approval, ApprovalDecision, NodeFacts
from nodefence.engine.record import FenceEntry
from nodefence.engine.wording import instant

FENCED_BY = PREFIX + "fenced-by"
FENCED_AT = PREFIX + "fenced-at"
NODE_UID = PREFIX + "node-uid"
BOOT_ID = PREFIX + "boot-id"
ALERTNAME = PREFIX + "alertname"
ALERT_FINGERPRINT = PREFIX + "alert-fingerprint"
TAINT_EFFECT = PREFIX + "taint-effect"
RULE = PREFIX + "rule"
APPROVAL = PREFIX + "approval"
PROOF = PREFIX + "proof"
UNFENCED_AT = PREFIX + "unfenced-at"
# Which node object and alert an approval request (and its answer) was for.
APPROVAL_NODE_UID = PREFIX + "approval-node-uid"
APPROVAL_FINGERPRINT = PREFIX + "approval-fingerprint"
# When the outage the approval request was about began (the Ready condition's last transition):
# a rejection holds for that outage, and a new one is asked again.
APPROVAL_NOT_READY_SINCE = PREFIX + "approval-not-ready-since"

FENCED_BY_VALUE = "nodefence"

FENCE_KEYS = (
    FENCED_BY,
    FENCED_AT,
    BOOT_ID,
    ALERTNAME,
    ALERT_FINGERPRINT,
    TAINT_EFFECT,
    RULE,
    PROOF,
)
ALL_KEYS = (*FENCE_KEYS, NODE_UID, APPROVAL, UNFENCED_AT)


def _text(annotations: Mapping[str, str], key: str) -> str | None:
    value = annotations.get(key)
    if not isinstance(value, str):
        return None
    value = value.strip()
    return value or None


_PAST = {ApprovalDecision.APPROVE: "approved", ApprovalDecision.REJECT: "rejected"}


def approval_text(approval: Approval) -> str:
    return f"{_PAST[approval.decision]} by {approval.user} at {instant(approval.at)}"


def rejection(node: NodeFacts, fingerprint: str) -> str | None:
    """The recorded "rejected by ..." if a person rejected fencing this very node object for
    this alert; a new node object or a new incident is asked again. A forged rejection can
    only stop a fence, never cause one."""
    notes = node.annotations
    answer = _text(notes, APPROVAL)
    if answer is None or not answer.startswith("rejected"):
        return None
    if _text(notes, APPROVAL_NODE_UID) != node.uid:
        return None
    if _text(notes, APPROVAL_FINGERPRINT) not in (None, fingerprint):
        return None
    since = _text(notes, APPROVAL_NOT_READY_SINCE)
    began = node.ready.last_transition if node.ready is not None else None
    if since is not None and began is not None and since != instant(began):
        # The node recovered and failed again since: a new incident, asked again.
        return None
    return answer


def fence_annotations(entry: FenceEntry) -> dict[str, str]:
    notes = {
        FENCED_BY: FENCED_BY_VALUE,
        FENCED_AT: instant(entry.claimed_at),
        NODE_UID: entry.uid,
        BOOT_ID: entry.boot_id,
        ALERTNAME: entry.alertname,
        ALERT_FINGERPRINT: entry.fingerprint,
        TAINT_EFFECT: entry.effect,
        RULE: entry.rule,
    }
    if entry.proof:
        notes[PROOF] = entry.proof
    if entry.approval:
        notes[APPROVAL] = entry.approval
    return notes


def unfence_annotations(now_text: str) -> dict[str, str | None]:
    """The changes for an unfence: ``None`` removes a key."""
    changes: dict[str, str | None] = dict.fromkeys((*FENCE_KEYS, APPROVAL))
    changes[UNFENCED_AT] = now_text
    return changes
