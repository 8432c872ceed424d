"""``POST /slack/interactions``: a button press, verified, then acted on in the background.

Slack wants an answer within three seconds, while a fence re-reads the cluster, takes the lock
and writes; so the handler verifies the Slack signature, answers 200 and hands the press to a
task the application tracks and awaits at shutdown. What a task cannot finish (the purge of
many pods) is finished by the reconcile pass, as for any alert.

A press acts only if, in this order: Slack signed the request within five minutes; the button
value carries nodefence's signature and has not expired; it was pressed on the matching button,
in the channel nodefence asked in; the person is an approver; the node is still the same object,
still NotReady, in the same outage the question described. Then the pipeline runs with the
answer, and every guard of the engine is judged again on live facts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs

import structlog
from aiohttp import web
from pydantic import SecretStr
from slack_sdk.signature import SignatureVerifier

from nodefence.engine import mirror
from nodefence.engine.approval_request import Incident
from nodefence.engine.model import (
    AlertEvent,
    AlertStatus,
    Approval,
    ApprovalDecision,
    Decision,
)
from nodefence.engine.record import FenceRecord, Phase
from nodefence.engine.wording import instant
from nodefence.errors import ClusterUnavailableError
from nodefence.http.handlers import read_bounded
from nodefence.http.problems import Problem
from nodefence.kube.client import Deadline, Json, KubeError
from nodefence.kube.convert import node_facts
from nodefence.pipeline import Pipeline
from nodefence.slack import messages, tokens
from nodefence.slack.approvals import SlackApprovals
from nodefence.slack.client import ApprovalChannelUnavailableError, SlackClient

log = structlog.get_logger(__name__)

_ACTIONS = {
    messages.APPROVE_ACTION_ID: tokens.Action.APPROVE,
    messages.REJECT_ACTION_ID: tokens.Action.REJECT,
}


@dataclass(frozen=True)
class Click:
    user: str
    channel: str
    action_id: str
    value: str
    response_url: str


class BackgroundTasks:
    """Work started by a request and finished after its answer; awaited at shutdown."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self, grace_seconds: float | None = None) -> None:
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=grace_seconds)

    def __len__(self) -> int:
        return len(self._tasks)


def parse_click(body: bytes) -> Click | None:
    """The press in a ``block_actions`` payload; None for other interaction types."""
    try:
        form = parse_qs(body.decode("utf-8"), strict_parsing=False)
        payload = json.loads(form["payload"][0])
        if payload.get("type") != "block_actions":
            return None
        action = payload["actions"][0]
        return Click(
            user=str(payload["user"]["id"]),
            channel=str((payload.get("channel") or {}).get("id") or ""),
            action_id=str(action["action_id"]),
            value=str(action.get("value") or ""),
            response_url=str(payload["response_url"]),
        )
    except (UnicodeDecodeError, KeyError, IndexError, TypeError, AttributeError, ValueError):
        raise Problem(
            400,
            kind="invalid-slack-payload",
            detail="The body is not a Slack block_actions interaction payload.",
        ) from None


class Interactions:
    def __init__(
        self,
        *,
        pipeline: Pipeline,
        approvals: SlackApprovals,
        slack: SlackClient,
        signing_secret: SecretStr,
        approval_key: SecretStr,
        channel: str,
        approvers: list[str],
        approver_groups: list[str],
        deadline_seconds: float,
        max_body_bytes: int,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.pipeline = pipeline
        self.approvals = approvals
        self.slack = slack
        self.verifier = SignatureVerifier(signing_secret.get_secret_value())
        self.approval_key = approval_key
        self.channel = channel
        self.approvers = frozenset(approvers)
        self.approver_groups = list(approver_groups)
        self.deadline_seconds = deadline_seconds
        self.max_body_bytes = max_body_bytes
        self.clock = clock
        self.tasks = BackgroundTasks()

    def signature_valid(self, body: bytes, headers: Mapping[str, str]) -> bool:
        try:
            return self.verifier.is_valid_request(body, dict(headers))
        except (ValueError, UnicodeDecodeError):
            return False

    async def handle(self, request: web.Request) -> web.Response:
        body = await read_bounded(request, self.max_body_bytes)
        if not self.signature_valid(body, request.headers):
            log.warning("slack_signature_invalid", remote=request.remote)
            raise Problem(
                401,
                kind="invalid-slack-signature",
                detail="The request does not carry a valid Slack signature from the last "
                "five minutes.",
            )
        click = parse_click(body)
        if click is not None:
            self.tasks.spawn(self.process(click))
        return web.Response(status=200)

    async def process(self, click: Click) -> None:
        try:
            await self._process(click)
        except Exception:
            log.exception("slack_interaction_failed", user=click.user)

    async def authorised(self, user: str) -> bool:
        if user in self.approvers:
            return True
        for group in self.approver_groups:
            try:
                if user in await self.slack.group_members(group):
                    return True
            except ApprovalChannelUnavailableError as exc:
                log.warning("approver_group_unreadable", group=group, error=str(exc))
        return False

    async def _tell(self, click: Click, text: str) -> None:
        await self._respond(click, messages.ephemeral(text))

    async def _replace(self, click: Click, headline: str, decision: Decision | None) -> None:
        footer = f"Answered by <@{click.user}> at {instant(self.clock())}."
        text, blocks = messages.outcome_message(headline, decision, footer)
        await self._respond(click, {"replace_original": True, "text": text, "blocks": blocks})

    async def _respond(self, click: Click, body: Json) -> None:
        try:
            await self.slack.respond(click.response_url, body)
        except ApprovalChannelUnavailableError as exc:
            log.warning("slack_response_failed", error=str(exc))

    async def _process(self, click: Click) -> None:
        now = self.clock()
        try:
            token = tokens.verify(click.value, self.approval_key, now=now.timestamp())
        except tokens.TokenError as exc:
            log.warning("slack_token_refused", user=click.user, reason=str(exc))
            await self._tell(click, f"This button cannot be used: {exc}. Nothing was done.")
            return
        if _ACTIONS.get(click.action_id) is not token.action:
            log.warning("slack_token_refused", user=click.user, reason="action mismatch")
            await self._tell(click, "This button cannot be used here. Nothing was done.")
            return
        if click.channel != token.channel or click.channel != self.channel:
            log.warning("slack_token_refused", user=click.user, reason="channel mismatch")
            await self._tell(
                click,
                "This button was not pressed in the channel nodefence asked in. Nothing was done.",
            )
            return
        if not await self.authorised(click.user):
            log.warning("slack_approver_refused", user=click.user, node=token.node)
            await self._tell(
                click,
                f"You are not an approver for nodefence, so node {token.node} is left as it "
                "is. Ask an on-call approver.",
            )
            return
        decision = ApprovalDecision.APPROVE
        if token.action is tokens.Action.REJECT:
            decision = ApprovalDecision.REJECT
        approval = Approval(click.user, now, decision, token.uid, token.fingerprint)
        log.info("slack_answer", user=click.user, node=token.node, answer=decision.value)
        try:
            await self._answer(click, token, approval)
        except ClusterUnavailableError as exc:
            log.warning("slack_answer_unavailable", node=token.node, error=str(exc))
            await self._tell(
                click,
                f"The Kubernetes API could not be reached, so nothing was done to node "
                f"{token.node}. Press the button again in a moment.",
            )

    async def _answer(self, click: Click, token: tokens.ButtonToken, approval: Approval) -> None:
        deadline = Deadline(self.deadline_seconds)
        # A question asked while this answer is acted on (the power step found a new failure)
        # is not the one answered: it is never withdrawn with it.
        answering = self.approvals.now()
        node = token.node
        who = f"<@{click.user}>"
        reject = approval.decision is ApprovalDecision.REJECT
        live, server_time = await self._node_dated(node, deadline)
        if server_time is not None:
            # The engine judges the answer's age on the API server's clock, as everything else.
            approval = dataclasses.replace(approval, at=server_time)
        held = await self.pipeline.read_record(deadline)
        fenced = _fenced_by_us(live, token.uid, held)
        if fenced is not None:
            tail = (
                f"the rejection by {who} came after the fence; nodefence removes its taint once "
                "the node is verifiably healthy again"
                if reject
                else f"the approval by {who} changed nothing"
            )
            await self._replace(click, f"Node *{node}* is already fenced ({fenced}); {tail}.", None)
            return
        stale = _stale(live, token)
        if stale is not None:
            # Dry-run writes nothing, Slack answers included (S8).
            if reject and not self.pipeline.policy.dry_run:
                await self.approvals.record_rejection(node, token, approval, deadline, live=live)
            elif not self.pipeline.policy.dry_run:
                await self.approvals.withdraw(node, token, deadline, asked_before=answering)
            await self._replace(click, f"{stale} Nothing was fenced.", None)
            return
        rejected = _rejected(live, token, held)
        if rejected is not None and not reject:
            # A rejection holds for its incident whatever button is pressed next (a second
            # approver, the approve button of the same message); nothing is withdrawn either,
            # so a later press finds the rejection too.
            await self._replace(
                click,
                f":no_entry_sign: Fencing node *{node}* was {rejected} for this outage; the "
                f"approval by {who} changes nothing. A new outage of the node is asked again.",
                None,
            )
            return
        event = self._event(token)
        decision = await self.pipeline.handle_event(event, deadline, approval=approval)
        if reject:
            if not decision.dry_run:
                await self.approvals.record_rejection(node, token, approval, deadline, live=live)
            await self._replace(
                click,
                f":no_entry_sign: Fencing node *{node}* was rejected by {who}; nodefence does "
                "not fence it during this outage.",
                decision,
            )
            return
        after = await self.pipeline.read_record(deadline)
        fenced = _fenced_by_us(await self._node(node, deadline), token.uid, after)
        mine = mirror.approval_text(approval)
        if fenced is not None and mine in fenced:
            headline = (
                f":lock: Node *{node}* is fenced (out-of-service taint applied), approved by "
                f"{who}; its stuck pods are being purged."
            )
            self._settled(node)
        elif fenced is not None:
            headline = (
                f"Node *{node}* is already fenced ({fenced}); the approval by {who} changed "
                "nothing."
            )
        else:
            if not decision.dry_run:
                await self.approvals.withdraw(node, token, deadline, asked_before=answering)
            headline = (
                f"Node *{node}* was not fenced although {who} approved: {decision.summary}. "
                "If the alert keeps firing and every guard passes, nodefence asks again."
            )
        await self._replace(click, headline, decision)

    def _settled(self, node: str) -> None:
        if self.approvals.metrics is not None:
            self.approvals.metrics.approval_settled(node)

    def _event(self, token: tokens.ButtonToken) -> AlertEvent:
        """The alert as the question was asked about it. The labels the answering rule matched
        on are restored, so the rule that asked is the rule that decides now."""
        labels = {"alertname": token.alertname}
        if self.pipeline.node_labels:
            labels[self.pipeline.node_labels[0]] = token.node
        rule = self.pipeline.policy.rule_named(token.rule)
        if rule is not None:
            labels.update(rule.match.alert_labels)
        return AlertEvent(
            alertname=token.alertname,
            status=AlertStatus.FIRING,
            node=token.node,
            fingerprint=token.fingerprint,
            labels=labels,
        )

    async def _node(self, name: str, deadline: Deadline) -> Json | None:
        return (await self._node_dated(name, deadline))[0]

    async def _node_dated(
        self, name: str, deadline: Deadline
    ) -> tuple[Json | None, datetime | None]:
        try:
            reply = await self.pipeline.kube.get_node(name, deadline)
        except KubeError as exc:
            if exc.status == 404:
                return None, None
            raise
        return reply.body, reply.server_time


def token_node(node: Json) -> str:
    return str(node.get("metadata", {}).get("name", ""))


def _fenced_by_us(node: Json | None, uid: str, record: FenceRecord) -> str | None:
    """How nodefence's fence on this node object reads in the fence record (the authority;
    the node's annotations could say anything), or None when it is not fenced."""
    if node is None or node.get("metadata", {}).get("uid") != uid:
        return None
    entry = record.entry(token_node(node))
    if entry is None or entry.uid != uid or entry.phase is not Phase.FENCED:
        return None
    parts = [f"since {instant(entry.fenced_at or entry.claimed_at)}"]
    if entry.approval:
        parts.append(entry.approval)
    return ", ".join(parts)


def _rejected(node: Json | None, token: tokens.ButtonToken, record: FenceRecord) -> str | None:
    """The rejection ("rejected by ...") the fence record holds for the incident the button
    was for, if any (S12: never one from the node's annotations)."""
    if node is None:
        return None
    requested = record.approval(token_node(node))
    incident = Incident.of(node_facts(node), token.fingerprint)
    return requested.rejection if requested is not None and requested.rejected(incident) else None


def _stale(node: Json | None, token: tokens.ButtonToken) -> str | None:
    """Why the question no longer describes the node, or None while it still does."""
    if node is None:
        return f"Node *{token.node}* no longer exists."
    if node.get("metadata", {}).get("uid") != token.uid:
        return f"Node *{token.node}* was deleted and re-created since the question was asked."
    facts = node_facts(node)
    if facts.ready is not None and facts.ready.status == "True":
        return f"Node *{token.node}* is Ready again; the answer is not needed any more."
    if token.since and Incident.of(facts, token.fingerprint).since_unix != token.since:
        return (
            f"Node *{token.node}* recovered and failed again since the question was asked; "
            "this answer does not apply to the new outage (nodefence asks again)."
        )
    return None


__all__ = ["BackgroundTasks", "Click", "Interactions", "parse_click"]
