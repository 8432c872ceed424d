"""The guard that a power proof is about this node's machine (S10), and the proof's wording.

A BMC reading Off is proof only if that BMC controls the node's machine; the shell asks the BMC
which machine it controls before any power action and again with the read-back, and this guard
judges the answer on the facts alone (:func:`nodefence.engine.identity.judge`).
"""

from __future__ import annotations

import dataclasses

from nodefence.engine.evidence import PowerEvidence
from nodefence.engine.guard_kinds import MACHINE_IDENTITY as IDENTITY
from nodefence.engine.identity import judge
from nodefence.engine.model import Decision, Facts, NodeFacts, Reason
from nodefence.engine.wording import instant
from nodefence.policy import Policy

UNCHECKED_NOTE = "identity unchecked"


def binding_reason(node: NodeFacts, facts: Facts) -> Reason | None:
    """Before the BMC is asked: refuse a target the inventory gives two nodes, and say so for a
    node whose inventory entry has its identity unchecked. None when there is nothing to say
    yet (the identity itself is judged on what the BMC reports)."""
    machine = facts.machine
    if machine is None:
        return None
    if machine.shared_with or machine.unchecked:
        verdict = judge(
            machine,
            None,
            node=node.name,
            system_uuid=node.system_uuid,
            provider_id=node.provider_id,
        )
        return Reason(IDENTITY, verdict.bound, verdict.message)
    return None


def bound_to_node(node: NodeFacts, facts: Facts, power: PowerEvidence) -> Reason:
    """Whether the machine the proof was read from is shown to be ``node``'s: anything short of
    a match (another machine, an identity that could not be read, a target two nodes share,
    nothing on the Node to compare with) blocks the taint."""
    verdict = judge(
        facts.machine,
        power.identity,
        node=node.name,
        system_uuid=node.system_uuid,
        provider_id=node.provider_id,
        uuid_shared_with=facts.uuid_shared_with,
    )
    if verdict.bound:
        return Reason(IDENTITY, True, verdict.message)
    return Reason(
        IDENTITY,
        False,
        f"{verdict.message}; no power action on it counts, and nothing is tainted",
    )


def noted(decision: Decision, facts: Facts, policy: Policy) -> Decision:
    """Every decision on a node whose inventory entry has its identity unchecked says so, when
    its rule acts through that entry: whatever nodefence does there rests on a target nobody
    has shown to be this node's machine."""
    machine = facts.machine
    if machine is None or not machine.unchecked:
        return decision
    rule = policy.rule_named(decision.rule) if decision.rule is not None else None
    if rule is None or rule.fencing is None or not rule.fencing.powers:
        return decision
    if any(UNCHECKED_NOTE in r.message for r in decision.reasons):
        return decision
    note = Reason(
        IDENTITY,
        True,
        f"{UNCHECKED_NOTE}: the BMC inventory says identity: unchecked for node {machine.node} "
        f"({machine.target}); nothing shows it controls this node's machine",
    )
    return dataclasses.replace(decision, reasons=(note, *decision.reasons))


def event_note(decision: Decision, message: str) -> str:
    """An Event about a decision made on an unchecked identity says so too."""
    if UNCHECKED_NOTE in message or not any(UNCHECKED_NOTE in r.message for r in decision.reasons):
        return message
    return f"{message} ({UNCHECKED_NOTE})"


def proof_text(power: PowerEvidence, identity: Reason | None) -> str:
    """What the fence record keeps as the proof: where the state was read, what it said, when
    (the API server's clock), whether the target was shown to be this node's machine, and
    whether nodefence sent a reset itself. "Powered it off" only when a reset was sent."""
    when = f" at {instant(power.at)}" if power.at is not None else ""
    if power.reset_sent:
        how = "after nodefence powered it off, read back"
    elif power.action_sent:
        how = "read back after a power-off sent earlier in this incident"
    else:
        how = "read; no reset was sent (it was already off)"
    text = f"{power.source} reported Off ({how}{when})"
    if identity is None:
        return text
    if UNCHECKED_NOTE in identity.message:
        return f"{text}; {UNCHECKED_NOTE} (the BMC inventory says identity: unchecked)"
    said = power.identity.value if power.identity is not None else ""
    return f"{text}; identity matched ({said})" if said else f"{text}; identity matched"
