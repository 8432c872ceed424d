"""Notices in Slack when nodefence fences or unfences a node, with or without approval mode.

A notice is a courtesy, never a precondition: a failure to post is logged and the action that
already happened stands.
"""

from __future__ import annotations

import structlog

from nodefence.actions.executor import ActionResult, Outcome
from nodefence.engine.action_kinds import result_named
from nodefence.engine.model import Decision
from nodefence.slack import messages
from nodefence.slack.client import ApprovalChannelUnavailableError, SlackClient

log = structlog.get_logger(__name__)


class SlackNotifier:
    def __init__(self, slack: SlackClient, channel: str) -> None:
        self.slack = slack
        self.channel = channel

    async def notify(self, decision: Decision, results: list[ActionResult]) -> None:
        """Post one notice per write that was actually done and has words for one (a fence, an
        unfence: ``Result.notice``)."""
        if decision.node is None:
            return
        for result in results:
            named = result_named(result.action)
            if result.outcome is not Outcome.DONE or not named.notice:
                continue
            text, blocks = messages.notice_message(named, decision)
            try:
                await self.slack.post_message(self.channel, text, blocks)
            except ApprovalChannelUnavailableError as exc:
                log.warning("slack_notice_failed", node=decision.node, error=str(exc))
