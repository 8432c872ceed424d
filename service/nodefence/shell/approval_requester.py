"""The approval channel as the commit and the report see it: a requester that asks, records
an answer (the one acted on) and its outcome (a question withdrawn), and the wait it reports.

Whether to ask is the engine's (``engine.approval_ask``); the requester carries the question
out (claim it in the fence record, post it, record where it is) and answers with what it did.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from nodefence.actions.executor import ActionResult
from nodefence.engine.model import (
    AskApprovalAction,
    Decision,
    Facts,
    RecordApprovalAction,
    RecordRejectionAction,
    Verdict,
    WithdrawQuestionAction,
)

if TYPE_CHECKING:
    from nodefence.kube.client import Deadline, Json
    from nodefence.kube.facts import Snapshot
    from nodefence.observability.metrics import Metrics


class ApprovalRequester(Protocol):
    """Asks a person to approve a fence (Slack)."""

    def now(self) -> datetime:
        """The requester's clock: the one its requests are stamped and expire on."""

    async def request(
        self, action: AskApprovalAction, decision: Decision, snapshot: Snapshot, deadline: Deadline
    ) -> ActionResult:
        """Claim the question, post it, record where it is: DONE when posted, SKIPPED when the
        record already holds an open question (another replica's claim won). Raise
        ClusterUnavailableError (or a subclass) when the record or the approval channel is down,
        so the alert is retried."""

    async def reject(
        self, action: RecordRejectionAction, node: Json | None, deadline: Deadline
    ) -> ActionResult:
        """Record a person's rejection for its incident (``node``: the node object as read,
        to show it on). CONFLICT when an approval is being acted on: the answer is decided
        again."""

    async def approve(self, action: RecordApprovalAction, deadline: Deadline) -> ActionResult:
        """Record a person's approval for its incident before it is acted on. CONFLICT when
        another answer holds for the incident by then: the answer is decided again."""

    async def withdraw(self, action: WithdrawQuestionAction, deadline: Deadline) -> ActionResult:
        """Forget an answered question that did not lead to a fence."""


def report_waiting(metrics: Metrics, decision: Decision, facts: Facts, now: datetime) -> None:
    """How long the question this decision waits on has been out (``requested_at`` is on the
    requester's clock, ``now`` a reading of it): a decision that waits without asking."""
    if decision.verdict is not Verdict.AWAIT_APPROVAL or decision.node is None:
        return
    if any(isinstance(a, AskApprovalAction) for a in decision.actions):
        return
    request = facts.record.approval(decision.node)
    if request is not None and request.requested_at is not None:
        metrics.approval_waiting(decision.node, (now - request.requested_at).total_seconds())
