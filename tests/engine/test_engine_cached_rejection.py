"""A person's rejection, as the fence record holds it, may refuse on cached facts.

The record is nodefence's own (S12: no kubelet writes it) and a rejection holds for its incident,
so a cached read of it refuses what the live read refuses; a waiting decision, and the question
to a person, are never taken from the cache.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from engine_factories import NODE, NOW, ago, event, facts, node
from engine_strategies import PROFILE
from hypothesis import given
from hypothesis import strategies as st

from nodefence.engine.approval_request import ApprovalRequest, Incident
from nodefence.engine.cached import CACHED, Source, refusal_on_cache
from nodefence.engine.decide import decide
from nodefence.engine.identity import MachineBinding
from nodefence.engine.model import Decision, Facts, Verdict
from nodefence.engine.record import with_approval
from nodefence.policy import Policy, parse_policy

SOURCE = "redfish https://bmc-1.example/redfish/v1/Systems/1"
MACHINE = "4c4c4544-0042-3010-8050-b7c04f4e3332"
SAID_NO = "rejected by bob at 2026-11-30T08:00:00Z"
SOURCES = (
    Source("node worker-1", "the watch-fed node index", 2.0),
    Source("the fence record", "a read shared by concurrent requests", 0.5),
)


def escalating(approval: str = "none") -> Policy:
    fencing = {"driver": "redfish", "action": "off", "on_failure": "approval"}
    rule = {"name": "default", "fencing": fencing, "approval": approval}
    return parse_policy({"rules": [rule]}, "<test>")


def live_facts(request: ApprovalRequest | None, **overrides: Any) -> Facts:
    made = facts(**overrides)
    binding = MachineBinding(node=NODE, target=SOURCE, driver="redfish", expected=MACHINE)
    made = dataclasses.replace(made, machine=binding)
    if request is not None:
        made = dataclasses.replace(made, record=with_approval(made.record, request))
    return made


def cached(live: Facts) -> Facts:
    """What the cache holds: no Lease, pods, power reading or machine binding."""
    return Facts(node=live.node, lease=None, pods=(), cluster=live.cluster, record=live.record)


def rejection(incident: Incident) -> ApprovalRequest:
    return ApprovalRequest(
        NODE, incident, requested_at=ago(600), expires_at=ago(-3000), rejection=SAID_NO
    )


def test_an_escalations_rejection_refuses_on_the_cache_as_live() -> None:
    the = live_facts(rejection(Incident.of(node(), "fp-1")))
    stood = refusal_on_cache(decide(event(), cached(the), escalating(), NOW), SOURCES)
    assert stood is not None
    assert stood.verdict is Verdict.NOOP
    assert stood.actions == ()
    assert stood.reasons[0].guard == CACHED
    assert [r.guard for r in stood.reasons if not r.passed] == ["approval"]
    assert "rejected by bob" in stood.summary
    live = decide(event(), the, escalating(), NOW)
    assert live.verdict is Verdict.NOOP
    assert live.actions == ()
    assert "rejected by bob" in live.summary


def test_a_rejection_of_another_outage_does_not_refuse_on_the_cache() -> None:
    earlier = Incident(node().uid, "fp-1", "2020-01-01T00:00:00Z")
    the = live_facts(rejection(earlier))
    assert refusal_on_cache(decide(event(), cached(the), escalating(), NOW), SOURCES) is None


def test_waiting_for_a_person_never_stands_on_the_cache() -> None:
    slack = parse_policy(
        {"rules": [{"name": "default", "approval": "slack", "fencing": {"driver": "none"}}]},
        "<test>",
    )
    the = live_facts(None)
    assert refusal_on_cache(decide(event(), cached(the), slack, NOW), SOURCES) is None


incidents = st.sampled_from(["this", "other-uid", "other-alert", "other-outage"])
readiness = st.sampled_from(["Unknown", "False", "True"])


def incident_named(name: str, ready: str) -> Incident:
    this = Incident.of(node(ready=ready), "fp-1")
    if name == "other-uid":
        return dataclasses.replace(this, node_uid="uid-old")
    if name == "other-alert":
        return dataclasses.replace(this, fingerprint="fp-other")
    if name == "other-outage":
        return dataclasses.replace(this, not_ready_since="2020-01-01T00:00:00Z")
    return this


def fences(decision: Decision) -> bool:
    return bool(decision.actions)


@PROFILE
@given(incidents, readiness, st.sampled_from(["none", "slack"]), st.sampled_from([900, 10]))
def test_a_current_cache_refuses_on_a_rejection_only_what_live_refuses(
    incident: str, ready: str, approval: str, lease_age: int
) -> None:
    the = live_facts(
        rejection(incident_named(incident, ready)), the_node=node(ready=ready), lease_age=lease_age
    )
    policy = escalating(approval)
    stood = refusal_on_cache(decide(event(), cached(the), policy, NOW), SOURCES)
    if stood is None:
        return
    assert stood.actions == ()
    live = decide(event(), the, policy, NOW)
    assert not fences(live), (stood.reasons, live.reasons)
    assert live.verdict in (Verdict.NOOP, Verdict.SKIP)
