"""The approval request: one Slack message per node incident, held in the fence record.

Alertmanager repeats a firing alert, and several replicas may receive the same one; the request
in the fence record (``engine.approval_request``) is what makes them ask once. A replica first
*claims* the question with a record write on the version it read (only one concurrent claim can
win), then posts, then records where the message is; a claim whose message never got recorded
belongs to a replica that died in between, and is asked again after a grace. A rejection holds
for its incident; a request is asked again once it expired, or for a new incident.

The record lives in nodefence's namespace, where no kubelet can write (S12): a node can neither
withdraw its question, nor answer it, nor pretend it was asked. The node gets
``nodefence.io/approval`` in words for people, written without being read back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import structlog
from pydantic import SecretStr

from nodefence.actions.executor import ActionResult, Outcome
from nodefence.actions.fence_record_writer import FenceRecordWriter
from nodefence.engine import approval_request, mirror
from nodefence.engine import record as fence_record
from nodefence.engine.action_kinds import (
    APPROVAL_WRITTEN,
    ASKED,
    REJECTION_WRITTEN,
    WITHDRAWAL_WRITTEN,
)
from nodefence.engine.approval_ask import question_open
from nodefence.engine.approval_request import ApprovalRequest, Incident
from nodefence.engine.caps import field
from nodefence.engine.model import (
    AskApprovalAction,
    Decision,
    RecordApprovalAction,
    RecordRejectionAction,
    WithdrawQuestionAction,
)
from nodefence.engine.record import FenceRecord
from nodefence.errors import ClusterUnavailableError
from nodefence.kube.client import Deadline, Json, KubeClient, KubeError
from nodefence.kube.facts import Snapshot
from nodefence.slack import messages, tokens
from nodefence.slack.client import ApprovalChannelUnavailableError, SlackClient

if TYPE_CHECKING:
    from nodefence.observability.metrics import Metrics

log = structlog.get_logger(__name__)


# ``nodefence.io/approval`` as a JSON pointer (RFC 6901: "/" is written "~1").
_MIRROR_PATH = "/metadata/annotations/" + mirror.APPROVAL.replace("~", "~0").replace("/", "~1")


class SlackApprovals:
    """The ``ApprovalRequester`` of the fencer, posting to one Slack channel."""

    def __init__(
        self,
        slack: SlackClient,
        records: FenceRecordWriter,
        kube: KubeClient,
        *,
        channel: str,
        approval_key: SecretStr,
        ttl_seconds: int,
        metrics: Metrics | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.slack = slack
        self.records = records
        self.kube = kube
        self.channel = channel
        self.approval_key = approval_key
        self.ttl = timedelta(seconds=ttl_seconds)
        self.metrics = metrics
        self.clock = clock

    def now(self) -> datetime:
        return self.clock()

    async def request(
        self, action: AskApprovalAction, decision: Decision, snapshot: Snapshot, deadline: Deadline
    ) -> ActionResult:
        """The question the engine decided to ask; the claim judges again, on the record version
        it writes, whether it is still unasked (another replica may have claimed it since)."""
        facts = snapshot.facts
        name, incident = action.node, action.incident
        if snapshot.node is None:
            return ActionResult(ASKED.name, name, Outcome.SKIPPED, "the node was not read")
        now = self.clock()
        asked = ApprovalRequest(
            node=name,
            incident=incident,
            requested_at=now,
            expires_at=now + self.ttl,
            claimed_by=self.records.new_token(),
            subject=action.subject,
        )
        seen: list[ApprovalRequest | None] = []

        def claim(record: FenceRecord, at: datetime) -> FenceRecord | None:
            current = record.approval(name)
            seen.append(current)
            if question_open(current, incident, now, action.subject):
                return None
            return fence_record.prune_approvals(fence_record.with_approval(record, asked), at)

        claimed = await self.records.approval_request("approval-claim", name, claim, deadline)
        previous = seen[-1] if seen else None
        if claimed.outcome is Outcome.FAILED:
            # Retried by Alertmanager (503) rather than answered as if the question were out.
            raise ClusterUnavailableError(
                f"the approval request could not be written to the fence record: {claimed.detail}"
            )
        if claimed.outcome is not Outcome.DONE:
            self._waiting(name, previous, now)
            return ActionResult(ASKED.name, name, Outcome.SKIPPED, "the question is already out")
        await self._show(name, snapshot.node, approval_request.mirror_text(asked), deadline)
        expires = asked.expires_at or now
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
            await self._release(name, asked.claimed_by, deadline)
            raise
        log.info("approval_requested", node=name, channel=posted.channel, ts=posted.ts)

        def record_message(record: FenceRecord, at: datetime) -> FenceRecord | None:
            del at
            current = record.approval(name)
            if current is None or current.claimed_by != asked.claimed_by:
                return None
            message = approval_request.with_message(current, posted.channel, posted.ts)
            return fence_record.with_approval(record, message)

        kept = await self.records.approval_request(
            "approval-message", name, record_message, deadline
        )
        if kept.outcome is Outcome.FAILED:
            # The claim then looks abandoned after its grace, and the question is asked again.
            log.warning("approval_message_not_recorded", node=name, error=kept.detail)
        if self.metrics is not None:
            self.metrics.approval_waiting(name, 0.0)
        if previous is not None and previous.posted:
            await self._mark_expired(name, previous.channel, previous.ts)
        return ActionResult(ASKED.name, name, Outcome.DONE, f"asked in {posted.channel}")

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

    def _waiting(self, name: str, request: ApprovalRequest | None, now: datetime) -> None:
        if self.metrics is not None and request is not None and request.requested_at is not None:
            self.metrics.approval_waiting(name, (now - request.requested_at).total_seconds())

    async def _release(self, name: str, claimed_by: str, deadline: Deadline) -> None:
        """Give up a claim whose message could not be posted, so the retried alert asks again."""

        def release(record: FenceRecord, at: datetime) -> FenceRecord | None:
            del at
            current = record.approval(name)
            if current is None or current.claimed_by != claimed_by:
                return None
            return fence_record.without_approval(record, name)

        try:
            await self.records.approval_request("approval-release", name, release, deadline)
        except Exception:
            log.warning("approval_claim_not_released", node=name, exc_info=True)

    async def _mark_expired(self, name: str, channel: str, ts: str) -> None:
        text, blocks = messages.expired_message(name)
        try:
            await self.slack.update_message(channel, ts, text, blocks)
        except ApprovalChannelUnavailableError as exc:
            log.warning("expired_request_not_updated", node=name, error=str(exc))

    async def _show(self, name: str, node: Json, text: str, deadline: Deadline) -> None:
        """``nodefence.io/approval: text`` on this node object, for people."""
        meta = node.get("metadata") or {}
        ops: list[Json] = [{"op": "test", "path": "/metadata/uid", "value": meta.get("uid")}]
        if meta.get("annotations") is None:
            ops.append({"op": "add", "path": "/metadata/annotations", "value": {}})
        ops.append({"op": "add", "path": _MIRROR_PATH, "value": text})
        await self._patch(name, ops, deadline)

    async def _unshow(self, name: str, uid: str, text: str, deadline: Deadline) -> None:
        """Take ``nodefence.io/approval`` off only while it still shows ``text`` (a fence's
        "approved by ..." written meanwhile stays)."""
        ops: list[Json] = [
            {"op": "test", "path": "/metadata/uid", "value": uid},
            {"op": "test", "path": _MIRROR_PATH, "value": text},
            {"op": "remove", "path": _MIRROR_PATH},
        ]
        await self._patch(name, ops, deadline)

    async def _patch(self, name: str, ops: list[Json], deadline: Deadline) -> None:
        """One JSON patch, never retried: if the node changed under it, the words are left as
        they are; nothing reads them."""
        try:
            await self.kube.patch_node_json(name, ops, deadline)
        except KubeError as exc:
            log.info("approval_mirror_not_written", node=name, error=str(exc))

    async def reject(
        self, action: RecordRejectionAction, node: Json | None, deadline: Deadline
    ) -> ActionResult:
        """Write the rejection into the record, bound to the incident the question was about
        (``node``: the node as read for the decision, which shows it to people). Refused
        (CONFLICT) while an approval of the same question is being acted on (that answer came
        first, and a rejection written now could not stop it) or when another person's
        rejection was written first; this very rejection, written already, is SKIPPED."""
        name, incident, said = action.node, action.incident, action.said
        answered: list[str] = []

        def reject(record: FenceRecord, at: datetime) -> FenceRecord | None:
            current = record.approval(name)
            standing = _approving(current, incident, at)
            if standing is not None:
                answered.append(standing)
                return None
            if current is not None and current.incident == incident:
                if current.rejection and current.rejection != field("approval.rejection", said):
                    # Another person's rejection of this outage was written first.
                    answered.append(current.rejection)
                if current.rejection:
                    return None
                rejected = replace(current, rejection=action.said, approval="", approval_until=None)
                return fence_record.with_approval(record, rejected)
            unasked = ApprovalRequest(
                name, incident, expires_at=action.expires, rejection=action.said
            )
            return fence_record.with_approval(record, unasked)

        written = await self.records.approval_request(
            REJECTION_WRITTEN.name, name, reject, deadline
        )
        if answered:
            return _outanswered(REJECTION_WRITTEN.name, name, answered[-1])
        if written.outcome is Outcome.DONE and node is not None:
            await self._show(name, node, action.said, deadline)
        if self.metrics is not None:
            self.metrics.approval_settled(name)
        return written

    async def approve(self, action: RecordApprovalAction, deadline: Deadline) -> ActionResult:
        """Write the approval into the record before it is acted on: the one answer acted on.
        Refused (CONFLICT) when the record holds another answer to the same question by then
        (a rejection for the incident, or an approval being acted on)."""
        name, incident = action.node, action.incident
        answered: list[str] = []

        def approve(record: FenceRecord, at: datetime) -> FenceRecord | None:
            current = record.approval(name)
            standing = _approving(current, incident, at)
            if standing is None and current is not None and current.rejected(incident):
                standing = current.rejection
            if standing is not None:
                answered.append(standing)
                return None
            if current is not None and current.incident == incident:
                approved = replace(current, approval=action.said, approval_until=action.until)
                return fence_record.with_approval(record, approved)
            unasked = ApprovalRequest(
                name,
                incident,
                expires_at=action.expires,
                approval=action.said,
                approval_until=action.until,
            )
            return fence_record.with_approval(record, unasked)

        written = await self.records.approval_request(
            APPROVAL_WRITTEN.name, name, approve, deadline
        )
        if answered:
            return _outanswered(APPROVAL_WRITTEN.name, name, answered[-1])
        return written

    async def withdraw(self, action: WithdrawQuestionAction, deadline: Deadline) -> ActionResult:
        """Forget an answered request that did not lead to a fence (``WithdrawQuestionAction``
        says which it is, and which it is not)."""
        name, asked_before = action.node, action.asked_before
        gone: list[ApprovalRequest] = []

        def forget(record: FenceRecord, at: datetime) -> FenceRecord | None:
            del at
            current = record.approval(name)
            if current is None or current.rejection:
                return None
            asked = current.requested_at
            if asked_before is not None and asked is not None and asked >= asked_before:
                return None
            if (current.incident.node_uid, current.incident.fingerprint) != (
                action.node_uid,
                action.fingerprint,
            ):
                return None
            gone.append(current)
            return fence_record.without_approval(record, name)

        written = await self.records.approval_request(
            WITHDRAWAL_WRITTEN.name, name, forget, deadline
        )
        if written.outcome is Outcome.DONE and gone:
            text = approval_request.mirror_text(gone[-1])
            await self._unshow(name, action.node_uid, text, deadline)
        if self.metrics is not None:
            self.metrics.approval_settled(name)
        return written


def _same_question(recorded: Incident, answered: Incident) -> bool:
    """The question about the same node object and alert: an approval being acted on holds
    off every answer to it, a button of a message that did not carry the outage included."""
    return (recorded.node_uid, recorded.fingerprint) == (answered.node_uid, answered.fingerprint)


def _approving(request: ApprovalRequest | None, incident: Incident, now: datetime) -> str | None:
    """The approval the record holds for the question ``incident`` is about, while it is
    being acted on (``now``: the API server's time of the read)."""
    if request is None or not _same_question(request.incident, incident):
        return None
    return request.approving(request.incident, now)


def _outanswered(kind: str, node: str, standing: str) -> ActionResult:
    """Another answer was written first: CONFLICT, so the loop reads the record again and the
    engine says which answer holds."""
    return ActionResult(kind, node, Outcome.CONFLICT, f"fencing node {node} was {standing} first")
