"""The results of a decision's writes are counted and noticed by their name in
``engine.action_kinds``: a fence moves the fenced-nodes gauge and an undone taint does not, and a
result name nodefence does not know fails instead of being counted or noticed as another."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any, cast

import pytest

from nodefence.actions.executor import ActionResult, Outcome
from nodefence.engine.action_kinds import UNDONE, UnknownActionError, result_named
from nodefence.engine.model import Action, Decision, Reason, Verdict
from nodefence.kube.client import Deadline
from nodefence.kube.events import EventRecorder
from nodefence.observability.metrics import Metrics
from nodefence.shell.commit import handler_for
from nodefence.shell.report import Reporter
from nodefence.slack import messages
from nodefence.slack.client import SlackClient
from nodefence.slack.notifications import SlackNotifier

NOW = datetime(2026, 12, 5, 3, 0, tzinfo=UTC)
DECISION = Decision(
    Verdict.FENCE, "worker1", (Reason("verdict", True, "fencing"),), status="firing", now=NOW
)


class Events:
    """An Event recorder that keeps the Events instead of writing them."""

    def __init__(self) -> None:
        self.reasons: list[str] = []

    async def node_event(self, **event: Any) -> None:
        self.reasons.append(event["reason"])


class Slack:
    def __init__(self) -> None:
        self.posted: list[str] = []

    async def post_message(self, channel: str, text: str, blocks: list[Any]) -> None:
        self.posted.append(text)


def reporter(metrics: Metrics) -> Reporter:
    return Reporter(metrics, cast(EventRecorder, Events()), lambda: NOW)


def fenced(metrics: Metrics) -> float | None:
    return metrics.registry.get_sample_value(
        "nodefence_fenced_timestamp_seconds", {"node": "worker1"}
    )


def actions_total(metrics: Metrics, action: str) -> float | None:
    return metrics.registry.get_sample_value(
        "nodefence_actions_total", {"action": action, "result": "done"}
    )


async def test_a_fence_moves_the_gauge_and_an_undone_taint_does_not() -> None:
    metrics = Metrics()
    undone = [ActionResult(UNDONE.name, "worker1", Outcome.DONE)]
    await reporter(metrics).report(DECISION, undone, "uid-1", Deadline(5), fenced=False)
    assert fenced(metrics) is None
    assert actions_total(metrics, "undo-fence") == 1
    done = [ActionResult("fence", "worker1", Outcome.DONE)]
    await reporter(metrics).report(DECISION, done, "uid-1", Deadline(5), fenced=True)
    assert fenced(metrics) == NOW.timestamp()


async def test_an_unknown_result_is_not_counted_as_another() -> None:
    metrics = Metrics()
    unknown = [ActionResult("unfenced", "worker1", Outcome.DONE)]
    with pytest.raises(UnknownActionError, match="unfenced"):
        await reporter(metrics).report(DECISION, unknown, "uid-1", Deadline(5), fenced=False)
    assert actions_total(metrics, "unfenced") is None


async def test_only_a_result_with_words_for_one_is_noticed() -> None:
    slack = Slack()
    notifier = SlackNotifier(cast(SlackClient, slack), "#ops")
    results = [
        ActionResult("claim", "worker1", Outcome.DONE),
        ActionResult("fence", "worker1", Outcome.DONE),
        ActionResult(UNDONE.name, "worker1", Outcome.DONE),
    ]
    await notifier.notify(DECISION, results)
    assert slack.posted == [
        ":no_entry: nodefence fenced node *worker1* (out-of-service taint applied)"
    ]
    with pytest.raises(UnknownActionError):
        await notifier.notify(DECISION, [ActionResult("unfenced", "worker1", Outcome.DONE)])
    with pytest.raises(ValueError, match="undo-fence"):
        messages.notice_message(result_named(UNDONE.name), DECISION)


def test_an_unknown_action_is_not_committed() -> None:
    @dataclasses.dataclass(frozen=True)
    class UnheardOfAction:
        node: str

    with pytest.raises(UnknownActionError, match="UnheardOfAction"):
        handler_for(cast(Action, UnheardOfAction("worker1")))
