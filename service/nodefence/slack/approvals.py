"""The approval request: one Slack message per node incident, recorded in the node's annotations.

Alertmanager repeats a firing alert, and several replicas may receive the same one; the record
on the node is what makes them ask once. A replica first *claims* the request with a JSON patch
that tests the node's resourceVersion (only one concurrent claim can win), then posts, then
records where the message is. An incident is the NotReady period of one node object for one
alert: node UID, alert fingerprint and the Ready condition's last transition. A rejection holds
for that incident; a request is asked again only after it expired.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import structlog
from pydantic import SecretStr

from nodefence.engine import mirror
from nodefence.engine.model import PREFIX, Approval, Decision, NodeFacts
from nodefence.engine.wording import instant, parse_instant
from nodefence.kube.client import Deadline, Json, KubeClient, KubeError
from nodefence.kube.convert import node_facts
from nodefence.kube.facts import Snapshot
from nodefence.slack import messages, tokens
from nodefence.slack.client import ApprovalChannelUnavailableError, SlackClient

if TYPE_CHECKING:
    from nodefence.observability.metrics import Metrics

log = structlog.get_logger(__name__)

REQUESTED_AT = PREFIX + "approval-requested-at"
EXPIRES_AT = PREFIX + "approval-expires-at"
MESSAGE = PREFIX + "approval-message"
REQUEST_NODE_UID = mirror.APPROVAL_NODE_UID
REQUEST_FINGERPRINT = mirror.APPROVAL_FINGERPRINT
REQUEST_NOT_READY_SINCE = PREFIX + "approval-not-ready-since"
REQUEST_KEYS = (
    REQUESTED_AT,
    EXPIRES_AT,
    MESSAGE,
    REQUEST_NODE_UID,
    REQUEST_FINGERPRINT,
    REQUEST_NOT_READY_SINCE,
)
# A claim whose message was never recorded belongs to a replica that died between claim and post.
CLAIM_GRACE = timedelta(seconds=30)
MAX_WRITE_ATTEMPTS = 5


@dataclass(frozen=True)
class Incident:
    node_uid: str
    fingerprint: str
    not_ready_since: str

    @classmethod
    def of(cls, node: NodeFacts, fingerprint: str) -> Incident:
        since = node.ready.last_transition if node.ready is not None else None
        return cls(node.uid, fingerprint, instant(since) if since else "")

    @property
    def since_unix(self) -> int:
        if not self.not_ready_since:
            return 0
        return int(datetime.fromisoformat(self.not_ready_since.replace("Z", "+00:00")).timestamp())


@dataclass(frozen=True)
class RequestRecord:
    """The approval request as the node's annotations hold it, read leniently: anything
    unreadable counts as absent (at worst a person is asked again; no fence follows from it)."""

    incident: Incident | None
    requested_at: datetime | None
    expires_at: datetime | None
    channel: str | None
    ts: str | None
    answer: str | None

    @classmethod
    def parse(cls, annotations: dict[str, str]) -> RequestRecord:
        uid = annotations.get(REQUEST_NODE_UID)
        fingerprint = annotations.get(REQUEST_FINGERPRINT)
        incident = (
            Incident(uid, fingerprint, annotations.get(REQUEST_NOT_READY_SINCE, ""))
            if uid and fingerprint
            else None
        )
        channel, _, ts = (annotations.get(MESSAGE) or "").partition("/")
        return cls(
            incident=incident,
            requested_at=parse_instant(annotations.get(REQUESTED_AT)),
            expires_at=parse_instant(annotations.get(EXPIRES_AT)),
            channel=channel or None,
            ts=ts or None,
            answer=annotations.get(mirror.APPROVAL),
        )

    def rejected(self, incident: Incident) -> bool:
        return self.incident == incident and (self.answer or "").startswith("rejected")

    def pending(self, incident: Incident, now: datetime) -> bool:
        if self.incident != incident or self.requested_at is None or self.expires_at is None:
            return False
        if now >= self.expires_at:
            return False
        return self.ts is not None or now - self.requested_at < CLAIM_GRACE


def _since_text(since: int) -> str:
    return instant(datetime.fromtimestamp(since, UTC)) if since else ""


def _annotations(node: Json) -> dict[str, str]:
    return dict(node.get("metadata", {}).get("annotations") or {})


class NodeLedger:
    """Annotation writes with the node's uid and resourceVersion as ``test`` preconditions,
    re-reading and re-checking on a conflict, so a concurrent writer is never overwritten."""

    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube

    async def update(
        self,
        name: str,
        changes: Callable[[Json], dict[str, str | None] | None],
        deadline: Deadline,
        *,
        node: Json | None = None,
    ) -> Json | None:
        """Apply ``changes(node)`` (None: leave the node alone); the patched node, or None."""
        for _attempt in range(MAX_WRITE_ATTEMPTS):
            if node is None:
                try:
                    node = (await self.kube.get_node(name, deadline)).body
                except KubeError as exc:
                    if exc.status == 404:
                        return None
                    raise
            wanted = changes(node)
            if wanted is None:
                return None
            notes = _annotations(node)
            for key, value in wanted.items():
                if value is None:
                    notes.pop(key, None)
                else:
                    notes[key] = value
            meta = node.get("metadata", {})
            ops: list[Json] = [
                {"op": "test", "path": "/metadata/uid", "value": meta.get("uid")},
                {
                    "op": "test",
                    "path": "/metadata/resourceVersion",
                    "value": meta.get("resourceVersion"),
                },
                {"op": "add", "path": "/metadata/annotations", "value": notes},
            ]
            try:
                return await self.kube.patch_node_json(name, ops, deadline)
            except KubeError as exc:
                if exc.status == 404:
                    return None
                if not exc.is_conflict:
                    raise
            node = None
        return None


class SlackApprovals:
    """The ``ApprovalRequester`` of the pipeline, posting to one Slack channel."""

    def __init__(
        self,
        slack: SlackClient,
        kube: KubeClient,
        *,
        channel: str,
        approval_key: SecretStr,
        ttl_seconds: int,
        metrics: Metrics | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.slack = slack
        self.ledger = NodeLedger(kube)
        self.channel = channel
        self.approval_key = approval_key
        self.ttl = timedelta(seconds=ttl_seconds)
        self.metrics = metrics
        self.clock = clock

    async def request(self, decision: Decision, snapshot: Snapshot, deadline: Deadline) -> None:
        facts = snapshot.facts
        if facts.node is None or snapshot.node is None or decision.node is None:
            return
        name = decision.node
        now = self.clock()
        expires = now + self.ttl
        incident = Incident.of(facts.node, decision.fingerprint)
        stamp = instant(now)
        previous: list[RequestRecord] = []

        def claim(node: Json) -> dict[str, str | None] | None:
            record = RequestRecord.parse(_annotations(node))
            live = Incident.of(node_facts(node), decision.fingerprint)
            if live != incident or record.pending(incident, now) or record.rejected(incident):
                return None
            previous.append(record)
            changes: dict[str, str | None] = {
                REQUESTED_AT: stamp,
                EXPIRES_AT: instant(expires),
                MESSAGE: None,
                REQUEST_NODE_UID: incident.node_uid,
                REQUEST_FINGERPRINT: incident.fingerprint,
                REQUEST_NOT_READY_SINCE: incident.not_ready_since,
                mirror.APPROVAL: None,
            }
            return changes

        claimed = await self.ledger.update(name, claim, deadline, node=snapshot.node)
        if claimed is None:
            self._waiting(name, snapshot.node, now)
            return
        text, blocks = messages.request_message(
            decision,
            facts,
            now,
            approve_value=self._value(decision, incident, tokens.Action.APPROVE, expires),
            reject_value=self._value(decision, incident, tokens.Action.REJECT, expires),
            expires=expires,
        )
        try:
            posted = await self.slack.post_message(self.channel, text, blocks)
        except ApprovalChannelUnavailableError:
            await self._release(name, stamp, deadline)
            raise
        log.info("approval_requested", node=name, channel=posted.channel, ts=posted.ts)

        def record(node: Json) -> dict[str, str | None] | None:
            if _annotations(node).get(REQUESTED_AT) != stamp:
                return None
            return {MESSAGE: f"{posted.channel}/{posted.ts}"}

        await self.ledger.update(name, record, deadline, node=claimed)
        if self.metrics is not None:
            self.metrics.approval_waiting(name, 0.0)
        old = previous[-1] if previous else None
        if old is not None and old.channel and old.ts:
            await self._mark_expired(name, old.channel, old.ts)

    def _value(
        self, decision: Decision, incident: Incident, action: tokens.Action, expires: datetime
    ) -> str:
        token = tokens.ButtonToken(
            node=decision.node or "",
            uid=incident.node_uid,
            fingerprint=incident.fingerprint,
            alertname=decision.alertname,
            action=action,
            channel=self.channel,
            expires=int(expires.timestamp()),
            rule=decision.rule or "",
            since=incident.since_unix,
        )
        return tokens.sign(token, self.approval_key)

    def _waiting(self, name: str, node: Json, now: datetime) -> None:
        record = RequestRecord.parse(_annotations(node))
        if self.metrics is not None and record.requested_at is not None:
            self.metrics.approval_waiting(name, (now - record.requested_at).total_seconds())

    async def _release(self, name: str, stamp: str, deadline: Deadline) -> None:
        """Give up a claim whose message could not be posted, so the retried alert asks again."""

        def release(node: Json) -> dict[str, str | None] | None:
            if _annotations(node).get(REQUESTED_AT) != stamp:
                return None
            return dict.fromkeys(REQUEST_KEYS)

        try:
            await self.ledger.update(name, release, deadline)
        except Exception:
            log.warning("approval_claim_not_released", node=name, exc_info=True)

    async def _mark_expired(self, name: str, channel: str, ts: str) -> None:
        text, blocks = messages.expired_message(name)
        try:
            await self.slack.update_message(channel, ts, text, blocks)
        except ApprovalChannelUnavailableError as exc:
            log.warning("expired_request_not_updated", node=name, error=str(exc))

    async def record_rejection(
        self, name: str, token: tokens.ButtonToken, approval: Approval, deadline: Deadline
    ) -> bool:
        """Write the rejection, bound to the incident the question was about; False when that
        node object is gone."""

        def reject(node: Json) -> dict[str, str | None] | None:
            meta = node.get("metadata", {})
            if meta.get("uid") != token.uid:
                return None
            changes: dict[str, str | None] = {
                mirror.APPROVAL: f"rejected by {approval.user} at {instant(approval.at)}",
                REQUEST_NODE_UID: token.uid,
                REQUEST_FINGERPRINT: token.fingerprint,
                REQUEST_NOT_READY_SINCE: _since_text(token.since),
            }
            # The rejection names the node object it was for, so a re-created node is asked anew.
            if mirror.NODE_UID not in _annotations(node):
                changes[mirror.NODE_UID] = token.uid
            return changes

        written = await self.ledger.update(name, reject, deadline)
        if self.metrics is not None:
            self.metrics.approval_settled(name)
        return written is not None

    async def withdraw(self, name: str, token: tokens.ButtonToken, deadline: Deadline) -> None:
        """Forget an answered request that did not lead to a fence, so the next alert that
        reaches approval asks afresh instead of pointing at a message without buttons."""

        def forget(node: Json) -> dict[str, str | None] | None:
            notes = _annotations(node)
            if notes.get(REQUEST_NODE_UID) != token.uid:
                return None
            if notes.get(REQUEST_FINGERPRINT) != token.fingerprint:
                return None
            return dict.fromkeys(REQUEST_KEYS)

        await self.ledger.update(name, forget, deadline)
        if self.metrics is not None:
            self.metrics.approval_settled(name)
