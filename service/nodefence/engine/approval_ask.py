"""Whether to ask a person: the approval request as an action the engine decides.

A decision that waits for a person (``await-approval``: a rule with ``approval: slack``, or a
``fencing.on_failure: approval`` escalation whose power step gave no proof) asks only when the
fence record holds no open question about this outage. A question is open while it is
pending (posted and not expired, or claimed by a replica that may still be posting it, within
the claim grace) or once a person rejected it: a rejection holds for its outage. The alert that
fires after the fallback asked (or a second alert) is the same outage and is not asked again. A
question about another node object or outage, an expired one, or a claim whose message never
came is asked again. A dry run asks nobody (S8).

The request's stamps (``requested_at``, ``expires_at``) are written on the requester's clock,
the one that signs the buttons' expiry and checks them when pressed; so they are judged on a
reading of that same clock (``asking_at``), passed in like every other fact. The record lives in
nodefence's namespace, where no kubelet writes (S12), and a wrong judgement can only ask once
too often or once too late: asking never fences by itself. Of replicas that decide to ask
together, the requester's claim (a record write on the version it read, re-judged here with
``question_open``) lets one through.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime

from nodefence.engine.approval_request import ApprovalRequest, Incident
from nodefence.engine.model import AskApprovalAction, Decision, Facts, Verdict


def question_open(
    request: ApprovalRequest | None, incident: Incident, now: datetime, subject: str = ""
) -> bool:
    """The record already holds this outage's question about ``subject``: pending, or
    answered "no" (a rejection holds for the outage, whatever failure it was asked about). A
    pending question about another failure is not this one: the new fact is asked anew."""
    if request is None:
        return False
    return request.pending(incident, now, subject) or request.rejected(incident)


def with_question(decision: Decision, facts: Facts, asking_at: datetime | None) -> Decision:
    """``decision`` with the request to ask added when it waits for a person nobody asked yet.
    ``asking_at`` is the requester's clock; None: there is no approval channel to ask in."""
    if asking_at is None or decision.dry_run or decision.verdict is not Verdict.AWAIT_APPROVAL:
        return decision
    if decision.actions:
        # A stale claim is rolled back first; the decision on the record after it asks.
        return decision
    node = facts.node
    if node is None or decision.node != node.name:
        return decision
    incident = Incident.of(node, decision.fingerprint)
    subject = decision.asks_about
    if question_open(facts.record.approval(node.name), incident, asking_at, subject):
        return decision
    return dataclasses.replace(
        decision, actions=(AskApprovalAction(node.name, node.uid, incident, subject),)
    )
