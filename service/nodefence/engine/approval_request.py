"""Approval requests as the fence record holds them: who was asked about which incident, where
the question is, and a person's rejection.

They live in the fence record (``approval.<node>`` beside the ``fence.<node>`` entries), in
nodefence's namespace, because a node's own credentials can edit its annotations: kept there, a
node could withdraw its pending question (so a second one is posted), forge a rejection, or forge
a record of a question never asked. The node keeps only ``nodefence.io/approval`` in words for
people, never read back.

An incident is the NotReady period of one node object for one alert: node UID, alert
fingerprint and the Ready condition's last transition. A rejection holds for its outage (the
node object's NotReady period, whichever alert or the fallback asked); a request is asked again
only once it expired, or when its claim never got a message posted, never for a second alert of
the same outage. An approval answers its own incident's question alone.
This module is pure: it turns ConfigMap values into these and back.

One answer wins: a person's answer is written here, on the record version it was judged on,
before anything is done with it, and only while no other answer holds for the incident (a
rejection; an approval being acted on). Two people who press at once, on one replica or two,
cannot both have their way: the second write finds the first and is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from nodefence.engine.caps import field
from nodefence.engine.wording import instant, parse_instant


class _Transition(Protocol):
    @property
    def last_transition(self) -> datetime | None: ...


class IncidentNode(Protocol):
    """What an incident is told apart by, of a node (``model.NodeFacts`` has it): its object's
    uid and when its Ready condition last changed. A protocol, so that this module, which the
    model's actions carry, does not import the model back."""

    @property
    def uid(self) -> str: ...

    @property
    def ready(self) -> _Transition | None: ...


APPROVAL_PREFIX = "approval."
FORMAT = 1
# A claim whose message was never recorded belongs to a replica that died between claim and post.
CLAIM_GRACE = timedelta(seconds=30)
# How long a request is kept after it expired, for the incident it was about (a rejection holds
# that long at most); then it is dropped so the record does not grow towards its size limit. A
# node still down after that is asked again, which never fences by itself.
KEEP_AFTER_EXPIRY = timedelta(days=7)


@dataclass(frozen=True)
class Incident:
    node_uid: str
    fingerprint: str
    # The Ready condition's last transition as written (``instant``), or "" when there is none.
    not_ready_since: str

    def __post_init__(self) -> None:
        # The alert's fingerprint at its cap (``engine.caps``) however the incident is made (an
        # alert, a button, the record), so the same incident compares equal.
        object.__setattr__(self, "fingerprint", field("approval.fingerprint", self.fingerprint))

    @classmethod
    def of(cls, node: IncidentNode, fingerprint: str) -> Incident:
        since = node.ready.last_transition if node.ready is not None else None
        return cls(node.uid, fingerprint, instant(since) if since else "")

    @classmethod
    def since_text(cls, since_unix: int) -> str:
        """``not_ready_since`` from the whole seconds a button carries (0: none)."""
        return instant(datetime.fromtimestamp(since_unix, UTC)) if since_unix else ""

    def same_outage(self, other: Incident) -> bool:
        """The same NotReady period of the same node object, whichever alert brought each (or
        the fallback, standing in for an alert that had not come): what a person's "no" and a
        question still out hold for, so the alert that fires minutes after the fallback asked
        neither asks again nor undoes the answer. An approval answers its own alert's question
        only (``approving``, ``escalation.unanswered``): the question it answered said what
        would be done."""
        return (self.node_uid, self.not_ready_since) == (other.node_uid, other.not_ready_since)

    @property
    def since_unix(self) -> int:
        parsed = parse_instant(self.not_ready_since) if self.not_ready_since else None
        return int(parsed.timestamp()) if parsed is not None else 0


@dataclass(frozen=True)
class ApprovalRequest:
    """The question about one node: claimed by one replica (``claimed_by``), then posted
    (``channel``/``ts``), then maybe rejected. ``requested_at`` and ``expires_at`` are on the
    requester's clock, the one that signs the buttons' expiry."""

    node: str
    incident: Incident
    requested_at: datetime | None = None
    expires_at: datetime | None = None
    claimed_by: str = ""
    channel: str = ""
    ts: str = ""
    # "rejected by <user> at <time>": fencing this incident was refused by a person.
    rejection: str = ""
    # What the question asks a person to overrule (``escalation.Failure.subject``: the failed
    # power step's kind, state and error), "" for a rule that asks before every fence. An
    # approval stands in for that failure only, never for another one found when it is acted on.
    subject: str = ""
    # "approved by <user> at <time>": the approval being acted on for this incident, until
    # ``approval_until`` (the API server's clock: the answering request's deadline). Until then
    # no other answer is taken; after it, an approval that fenced nothing (its replica died
    # before withdrawing it) no longer stands in anybody's way.
    approval: str = ""
    approval_until: datetime | None = None

    def __post_init__(self) -> None:
        """The fields said by others (a BMC's error in ``subject``, a Slack user's name) kept
        to their caps (``engine.caps``) as the request is made or read back alike."""
        for name in ("subject", "rejection", "approval", "channel", "ts"):
            object.__setattr__(self, name, field(f"approval.{name}", getattr(self, name)))

    def rejected(self, incident: Incident) -> bool:
        return self.incident.same_outage(incident) and bool(self.rejection)

    def approving(self, incident: Incident, now: datetime) -> str | None:
        """The approval being acted on for ``incident`` at ``now`` (the API server's clock),
        or None."""
        if self.incident != incident or not self.approval or self.rejection:
            return None
        if self.approval_until is not None and now >= self.approval_until:
            return None
        return self.approval

    @property
    def asked(self) -> bool:
        """A question was asked (claimed, then posted); False for an answer written without
        one (the record had no question about the incident the button named)."""
        return self.requested_at is not None

    def pending(self, incident: Incident, now: datetime, subject: str | None = None) -> bool:
        """A question about ``incident``'s outage is out and still open (or being posted right
        now); with ``subject``, only a question asking about that very failure."""
        if not self.incident.same_outage(incident) or self.rejection:
            return False
        if subject is not None and subject != self.subject:
            return False
        if self.requested_at is None or self.expires_at is None or now >= self.expires_at:
            return False
        return bool(self.ts) or now - self.requested_at < CLAIM_GRACE

    @property
    def posted(self) -> bool:
        return bool(self.channel and self.ts)


def rejection_of(
    request: ApprovalRequest | None, node: IncidentNode, fingerprint: str
) -> str | None:
    """The recorded "rejected by ..." if a person rejected fencing this very node object in
    its current outage, whichever alert (or the fallback) asked; a new node object or a new
    outage is asked again."""
    if request is None or not request.rejected(Incident.of(node, fingerprint)):
        return None
    return request.rejection


def mirror_text(request: ApprovalRequest) -> str:
    """The words ``nodefence.io/approval`` shows people on the node (never read back)."""
    if request.rejection:
        return request.rejection
    asked = instant(request.requested_at) if request.requested_at else "?"
    expires = instant(request.expires_at) if request.expires_at else "?"
    return f"asked in Slack at {asked}; the question expires at {expires}"


def _time(value: datetime | None) -> str | None:
    return instant(value) if value is not None else None


def request_json(request: ApprovalRequest) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "format": FORMAT,
        "node": request.node,
        "uid": request.incident.node_uid,
        "fingerprint": request.incident.fingerprint,
        "notReadySince": request.incident.not_ready_since,
        "requestedAt": _time(request.requested_at),
        "expiresAt": _time(request.expires_at),
        "claimedBy": request.claimed_by,
        "channel": request.channel,
        "ts": request.ts,
        "rejection": request.rejection,
        "subject": request.subject,
        "approval": request.approval,
        "approvalUntil": _time(request.approval_until),
    }
    return {k: v for k, v in raw.items() if v not in (None, "")}


def _text(raw: Mapping[str, Any], key: str) -> str:
    value = raw.get(key, "")
    if not isinstance(value, str):
        raise TypeError(f"{key} is not a string")
    return value


def parse_request(key: str, raw: Any) -> ApprovalRequest:
    """One ``approval.<node>`` value; ValueError/TypeError/KeyError when it cannot be read."""
    if not isinstance(raw, dict):
        raise TypeError("not an object")
    node = _text(raw, "node")
    if node != key.removeprefix(APPROVAL_PREFIX):
        raise ValueError("key and node name differ")
    uid, fingerprint = _text(raw, "uid"), _text(raw, "fingerprint")
    if not uid or not fingerprint:
        raise ValueError("no incident")
    return ApprovalRequest(
        node=node,
        incident=Incident(uid, fingerprint, _text(raw, "notReadySince")),
        requested_at=parse_instant(raw.get("requestedAt")),
        expires_at=parse_instant(raw.get("expiresAt")),
        claimed_by=_text(raw, "claimedBy"),
        channel=_text(raw, "channel"),
        ts=_text(raw, "ts"),
        rejection=_text(raw, "rejection"),
        subject=_text(raw, "subject"),
        approval=_text(raw, "approval"),
        approval_until=parse_instant(raw.get("approvalUntil")),
    )


def with_message(request: ApprovalRequest, channel: str, ts: str) -> ApprovalRequest:
    return replace(request, channel=channel, ts=ts)


def outlived(request: ApprovalRequest, now: datetime) -> bool:
    """Expired longer than ``KEEP_AFTER_EXPIRY`` ago (or never stamped): of no use any more."""
    return request.expires_at is None or now - request.expires_at > KEEP_AFTER_EXPIRY
