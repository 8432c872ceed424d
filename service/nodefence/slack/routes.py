"""The Slack integration: who asks for approval, who tells people, and the route that hears the
answers. The runtime builds it in two steps around the fencer: the requester and the notifier
first (the fencer is built with them), then the interactions (built with the fencer)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from aiohttp import web

from nodefence.actions.fence_record_writer import FenceRecordWriter
from nodefence.errors import ConfigError
from nodefence.http.problems import Problem
from nodefence.kube.client import KubeClient
from nodefence.observability.metrics import Metrics
from nodefence.policy import Policy, Rule
from nodefence.settings import Settings
from nodefence.shell.fencer import Fencer
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


NO_SLACK = SlackIntegration(None, None, None)

SLACK = web.AppKey("slack", SlackIntegration)

_APPROVAL_SETTINGS = {
    "slack_bot_token": "NODEFENCE_SLACK_BOT_TOKEN",
    "slack_signing_secret": "NODEFENCE_SLACK_SIGNING_SECRET",
    "approval_key": "NODEFENCE_APPROVAL_KEY",
    "slack_channel": "NODEFENCE_SLACK_CHANNEL",
}


def _uses_approval(policy: Policy) -> bool:
    return any(rule.approval == "slack" or _escalates(rule) for rule in policy.rules)


def _escalates(rule: Rule) -> bool:
    return rule.fencing is not None and rule.fencing.on_failure == "approval"


def check_slack_settings(settings: Settings, policy: Policy) -> None:
    """Refuse to start on settings the policy cannot work with.

    A policy rule with ``approval: slack`` and incomplete Slack settings is a configuration
    error: such a rule would hold every fence forever without ever asking anyone.
    """
    approval = _uses_approval(policy)
    missing = [env for name, env in _APPROVAL_SETTINGS.items() if getattr(settings, name) is None]
    if approval and not settings.slack_approvers and not settings.slack_approver_groups:
        missing.append("NODEFENCE_SLACK_APPROVERS or NODEFENCE_SLACK_APPROVER_GROUPS")
    if approval and missing:
        escalating = [rule.name for rule in policy.rules if _escalates(rule)]
        why = (
            f" (rule {', '.join(repr(n) for n in escalating)} sets fencing.on_failure: approval, "
            "which asks a person in Slack when the power step cannot prove the machine off)"
            if escalating
            else ""
        )
        raise ConfigError(
            f"the policy asks for approval in Slack{why}, but these settings are missing: "
            + ", ".join(missing)
        )
    if settings.slack_notify and (settings.slack_bot_token is None or not settings.slack_channel):
        raise ConfigError(
            "NODEFENCE_SLACK_NOTIFY needs NODEFENCE_SLACK_BOT_TOKEN and NODEFENCE_SLACK_CHANNEL"
        )


@dataclass(frozen=True)
class SlackParts:
    """The parts the fencer is built with: the approval requester and the notifier."""

    client: SlackClient | None = None
    approvals: SlackApprovals | None = None
    notifier: SlackNotifier | None = None

    def integration(self, settings: Settings, fencer: Fencer) -> SlackIntegration:
        """With the fencer built, the interactions that answer the approval buttons."""
        secret, key, channel = (
            settings.slack_signing_secret,
            settings.approval_key,
            settings.slack_channel,
        )
        approvals, client = self.approvals, self.client
        if approvals is None or client is None or secret is None or key is None or not channel:
            return SlackIntegration(None, self.notifier, None)
        interactions = Interactions(
            fencer=fencer,
            approvals=approvals,
            slack=client,
            signing_secret=secret,
            approval_key=key,
            channel=channel,
            approvers=settings.slack_approvers,
            approver_groups=settings.slack_approver_groups,
            deadline_seconds=settings.request_deadline_seconds,
            max_body_bytes=settings.max_body_bytes,
            clock=fencer.clock,
        )
        return SlackIntegration(self.approvals, self.notifier, interactions)


def slack_parts(
    settings: Settings,
    policy: Policy,
    kube: KubeClient,
    metrics: Metrics,
    clock: Callable[[], datetime],
    *,
    records: FenceRecordWriter,
) -> SlackParts:
    """The requester and notifier the settings and the policy ask for (after
    ``check_slack_settings``)."""
    token = settings.slack_bot_token
    channel = settings.slack_channel
    if token is None or channel is None:
        return SlackParts()
    slack = SlackClient(
        token, base_url=settings.slack_api_url, timeout=settings.slack_timeout_seconds
    )
    notifier = SlackNotifier(slack, channel) if settings.slack_notify else None
    if (
        not _uses_approval(policy)
        or settings.approval_key is None
        or settings.slack_signing_secret is None
    ):
        return SlackParts(slack, None, notifier)
    approvals = SlackApprovals(
        slack,
        records,
        kube,
        channel=channel,
        approval_key=settings.approval_key,
        ttl_seconds=settings.approval_ttl_seconds,
        metrics=metrics,
        clock=clock,
    )
    return SlackParts(slack, approvals, notifier)


async def _not_configured(_request: web.Request) -> web.Response:
    raise Problem(
        404,
        kind="slack-not-configured",
        detail="Approval in Slack is not configured on this receiver.",
    )


def add_slack_routes(
    app: web.Application, settings: Settings, integration: SlackIntegration
) -> None:
    """Add ``POST /slack/interactions``.

    Presses answered in the background are awaited when the application shuts down, before the
    fencer's clients are closed.
    """
    app[SLACK] = integration
    interactions = integration.interactions
    if interactions is None:
        app.router.add_post(INTERACTIONS_PATH, _not_configured)
        return
    app.router.add_post(INTERACTIONS_PATH, interactions.handle)

    async def drain(_app: web.Application) -> None:
        await interactions.tasks.drain(settings.request_deadline_seconds)

    app.on_shutdown.append(drain)
