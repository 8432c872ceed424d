"""The mirror: annotations under ``nodefence.io/`` that show people what nodefence did.

They are written beside the taint so that ``kubectl describe node`` tells the story, but a node's
own credentials can edit its annotations, so nothing here is ever read back as authority: the
fence record in nodefence's namespace is (``engine/record.py``), approval requests and their
answers included (``engine/approval_request.py``); ``nodefence.io/approval`` only tells people.
"""

from __future__ import annotations

from nodefence.engine.model import PREFIX, Approval, ApprovalDecision
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


_PAST = {ApprovalDecision.APPROVE: "approved", ApprovalDecision.REJECT: "rejected"}


def approval_text(approval: Approval) -> str:
    return f"{_PAST[approval.decision]} by {approval.user} at {instant(approval.at)}"


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
