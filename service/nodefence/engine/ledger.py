"""The ledger: nodefence's record of its own decisions, kept as annotations on the Node.

The receiver is stateless, so the node is the only durable place that every replica reads. The
ledger answers three safety questions: did nodefence apply this taint (S4: never remove one it
did not), was it for this very node object (S9: the UID), and when was the node last unfenced
(the flap guard).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from nodefence.engine.model import (
    PREFIX,
    AlertEvent,
    Approval,
    ApprovalDecision,
    Ledger,
    NodeFacts,
)
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
UNFENCED_AT = PREFIX + "unfenced-at"
# Which node object and alert an approval request (and its answer) was for.
APPROVAL_NODE_UID = PREFIX + "approval-node-uid"
APPROVAL_FINGERPRINT = PREFIX + "approval-fingerprint"

FENCED_BY_VALUE = "nodefence"

# Everything that describes a current fence. ``node-uid`` and ``unfenced-at`` outlive the fence:
# the flap guard needs to know when this very node object was last released.
FENCE_KEYS = (FENCED_BY, FENCED_AT, BOOT_ID, ALERTNAME, ALERT_FINGERPRINT, TAINT_EFFECT, RULE)
ALL_KEYS = (*FENCE_KEYS, NODE_UID, APPROVAL, UNFENCED_AT)


def _timestamp(value: str | None) -> datetime | None:
    if not value:
        return None
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    # A timestamp without a zone cannot be compared safely with "now"; treat it as absent.
    return parsed if parsed.tzinfo is not None else None


def _text(annotations: Mapping[str, str], key: str) -> str | None:
    value = annotations.get(key)
    if not isinstance(value, str):
        return None
    value = value.strip()
    return value or None


def parse_ledger(annotations: Mapping[str, str] | None) -> Ledger:
    """Read the ledger; anything unreadable counts as absent, so a hand-edited annotation can
    only make nodefence more cautious, never crash a decision."""
    notes = annotations or {}
    return Ledger(
        fenced=_text(notes, FENCED_BY) is not None,
        fenced_at=_timestamp(_text(notes, FENCED_AT)),
        node_uid=_text(notes, NODE_UID),
        boot_id=_text(notes, BOOT_ID),
        alert_fingerprint=_text(notes, ALERT_FINGERPRINT),
        taint_effect=_text(notes, TAINT_EFFECT),
        unfenced_at=_timestamp(_text(notes, UNFENCED_AT)),
        approval=_text(notes, APPROVAL),
        rule=_text(notes, RULE),
        alertname=_text(notes, ALERTNAME),
    )


_PAST = {ApprovalDecision.APPROVE: "approved", ApprovalDecision.REJECT: "rejected"}


def approval_text(approval: Approval) -> str:
    return f"{_PAST[approval.decision]} by {approval.user} at {instant(approval.at)}"


def rejection(node: NodeFacts, fingerprint: str) -> str | None:
    """The recorded "rejected by ..." if a person rejected fencing this very node object for
    this alert; a new node object or a new incident is asked again."""
    notes = node.annotations
    answer = _text(notes, APPROVAL)
    if answer is None or not answer.startswith("rejected"):
        return None
    if _text(notes, APPROVAL_NODE_UID) != node.uid:
        return None
    if _text(notes, APPROVAL_FINGERPRINT) not in (None, fingerprint):
        return None
    return answer


def fence_annotations(
    node: NodeFacts,
    event: AlertEvent,
    now: datetime,
    effect: str,
    *,
    rule: str | None = None,
    approval: Approval | None = None,
) -> dict[str, str]:
    notes = {
        FENCED_BY: FENCED_BY_VALUE,
        FENCED_AT: instant(now),
        NODE_UID: node.uid,
        BOOT_ID: node.boot_id,
        ALERTNAME: event.alertname,
        ALERT_FINGERPRINT: event.fingerprint,
        TAINT_EFFECT: effect,
    }
    if rule is not None:
        notes[RULE] = rule
    if approval is not None:
        notes[APPROVAL] = approval_text(approval)
    return notes


def unfence_annotations(now: datetime) -> dict[str, str | None]:
    """The merge-patch for an unfence: ``None`` removes a key."""
    changes: dict[str, str | None] = dict.fromkeys((*FENCE_KEYS, APPROVAL))
    changes[UNFENCED_AT] = instant(now)
    return changes
