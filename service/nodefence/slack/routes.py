"""Wiring of the Slack integration into the receiver: requester, notifier and the route."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from nodefence.errors import ConfigError
from nodefence.http.problems import Problem
from nodefence.pipeline import Pipeline
from nodefence.pipeline_api import Pipeline as PipelineApi
from nodefence.settings import Settings
from nodefence.slack.approvals import SlackApprovals
from nodefence.slack.client import SlackClient
from nodefence.slack.interactions import Interactions
from nodefence.slack.notifications import SlackNotifier

INTERACTIONS_PATH = "/slack/interactions"


@dataclass(frozen=True)
class SlackIntegration:
    approvals: SlackApprovals | None
    notifier: SlackNotifier | None
    interactions: Interactions | None


SLACK = web.AppKey("slack", SlackIntegration)

_APPROVAL_SETTINGS = {
    "slack_bot_token": "NODEFENCE_SLACK_BOT_TOKEN",
    "slack_signing_secret": "NODEFENCE_SLACK_SIGNING_SECRET",
    "approval_key": "NODEFENCE_APPROVAL_KEY",
    "slack_channel": "NODEFENCE_SLACK_CHANNEL",
}


def _uses_approval(pipeline: Pipeline) -> bool:
    return any(rule.approval == "slack" for rule in pipeline.policy.rules)


def build_slack(settings: Settings, pipeline: Pipeline) -> SlackIntegration:
    """The integration the settings and the policy ask for.

    A policy rule with ``approval: slack`` and incomplete Slack settings is a configuration
    error: such a rule would hold every fence forever without ever asking anyone.
    """
    approval = _uses_approval(pipeline)
    missing = [env for name, env in _APPROVAL_SETTINGS.items() if getattr(settings, name) is None]
    if approval and not settings.slack_approvers and not settings.slack_approver_groups:
        missing.append("NODEFENCE_SLACK_APPROVERS or NODEFENCE_SLACK_APPROVER_GROUPS")
    if approval and missing:
        raise ConfigError(
            "the policy asks for approval in Slack, but these settings are missing: "
            + ", ".join(missing)
        )
    if settings.slack_notify and (settings.slack_bot_token is None or not settings.slack_channel):
        raise ConfigError(
            "NODEFENCE_SLACK_NOTIFY needs NODEFENCE_SLACK_BOT_TOKEN and NODEFENCE_SLACK_CHANNEL"
        )
    token = settings.slack_bot_token
    channel = settings.slack_channel
    if token is None or channel is None:
        return SlackIntegration(None, None, None)
    slack = SlackClient(
        token, base_url=settings.slack_api_url, timeout=settings.slack_timeout_seconds
    )
    notifier = SlackNotifier(slack, channel) if settings.slack_notify else None
    if not approval or settings.approval_key is None or settings.slack_signing_secret is None:
        return SlackIntegration(None, notifier, None)
    approvals = SlackApprovals(
        slack,
        pipeline.kube,
        channel=channel,
        approval_key=settings.approval_key,
        ttl_seconds=settings.approval_ttl_seconds,
        metrics=pipeline.metrics,
        clock=pipeline.clock,
    )
    interactions = Interactions(
        pipeline=pipeline,
        approvals=approvals,
        slack=slack,
        signing_secret=settings.slack_signing_secret,
        approval_key=settings.approval_key,
        channel=channel,
        approvers=settings.slack_approvers,
        approver_groups=settings.slack_approver_groups,
        deadline_seconds=settings.request_deadline_seconds,
        max_body_bytes=settings.max_body_bytes,
        clock=pipeline.clock,
    )
    return SlackIntegration(approvals, notifier, interactions)


async def _not_configured(_request: web.Request) -> web.Response:
    raise Problem(
        404,
        kind="slack-not-configured",
        detail="Approval in Slack is not configured on this receiver.",
    )


def add_slack_routes(
    app: web.Application, settings: Settings, pipeline: PipelineApi
) -> SlackIntegration:
    """Add ``POST /slack/interactions`` and, for a live pipeline, connect the approval requester.

    Presses answered in the background are awaited when the application shuts down, before the
    pipeline's clients are closed.
    """
    if not isinstance(pipeline, Pipeline):
        integration = SlackIntegration(None, None, None)
    else:
        integration = build_slack(settings, pipeline)
        pipeline.approvals = integration.approvals
    app[SLACK] = integration
    interactions = integration.interactions
    if interactions is None:
        app.router.add_post(INTERACTIONS_PATH, _not_configured)
        return integration
    app.router.add_post(INTERACTIONS_PATH, interactions.handle)

    async def drain(_app: web.Application) -> None:
        await interactions.tasks.drain(settings.request_deadline_seconds)

    app.on_shutdown.append(drain)
    return integration
