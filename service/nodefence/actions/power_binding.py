"""The power step's two identity checks and its proof record (S10).

Before any power action the target is asked which machine it controls, and the action goes out
only if that is the node's machine: a wrong inventory line must not power off a healthy
machine. With the proof the identity is read again (for Redfish from the very GET that reported
Off), so the Off is known to be this machine's. Once the proof stands it is written into the
fence record's entry before the taint: a replica that dies after the taint leaves the proof
behind, not only the Node's mirror annotation.

The other Nodes reporting the node's systemUUID (cloned machines) come from the serving
receiver's watch-fed node index while it is fresh. Without one (a one-shot ``reconcile``, or a
replica whose index has not synced or whose watch broke) the Nodes are listed live before a
decision that may send a power action is committed: a refusal may rest on the index, an action
only on what the API server says now.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime

from nodefence.actions.executor import ActionResult, Outcome
from nodefence.engine.identity import Judgement, Reported, canonical_identity, judge
from nodefence.engine.machine import bound_to_node, proof_text
from nodefence.engine.model import Decision, Facts, NodeFacts, PowerAction, PowerEvidence
from nodefence.fencing.binding import machine_binding, shared
from nodefence.fencing.inventory import Inventory
from nodefence.fencing.model import PowerDriver, PowerReading
from nodefence.kube.client import Deadline, KubeClient
from nodefence.kube.facts import Snapshot
from nodefence.kube.node_index import NodeIndex, NodeSummary, list_summaries
from nodefence.kube.ratelimit import Priority, reads_at

# An identity read is one small GET or exchange; it must leave most of the step's time to the
# power action and its read-back.
IDENTITY_TIMEOUT_SECONDS = 10.0


def bind_machine(
    snapshot: Snapshot, inventory: Inventory | None, index: NodeIndex | None = None
) -> Snapshot:
    """The snapshot with what the inventory says of its node's machine, and the other Nodes
    the node index knows to report the same systemUUID, for the engine."""
    node = snapshot.facts.node
    if node is None or inventory is None or node.name not in inventory.nodes:
        return snapshot
    binding = machine_binding(inventory, node.name, shared(inventory))
    facts = dataclasses.replace(
        snapshot.facts, machine=binding, uuid_shared_with=machine_twins(index, node)
    )
    return dataclasses.replace(snapshot, facts=facts)


def machine_twins(index: NodeIndex | None, node: NodeFacts) -> tuple[str, ...]:
    """Other Nodes whose systemUUID names the same machine, as the watch-fed index knows them
    (none without an index: ``twins_to_list`` then has them listed before any action)."""
    return twins_among(index.nodes, node) if index is not None else ()


def twins_among(nodes: Mapping[str, NodeSummary], node: NodeFacts) -> tuple[str, ...]:
    """Other Nodes whose systemUUID names the same machine (cloned VMs keep their template's):
    a BMC reporting it could be either's."""
    if not node.system_uuid:
        return ()
    mine = canonical_identity(node.system_uuid)
    return tuple(
        sorted(
            name for name, summary in nodes.items() if name != node.name and summary.machine == mine
        )
    )


def twins_to_list(
    decision: Decision, snapshot: Snapshot, index: NodeIndex | None
) -> NodeFacts | None:
    """The node whose twins must be listed live before ``decision`` is committed, or None: only
    when it may send a power action to a machine known by the node's systemUUID and no fresh
    index vouches for which other Nodes report that UUID."""
    node, machine = snapshot.facts.node, snapshot.facts.machine
    if node is None or machine is None or not node.system_uuid:
        return None
    if not any(isinstance(a, PowerAction) for a in decision.actions):
        return None
    return node if index is None or index.fresh() is None else None


async def live_twins(kube: KubeClient, node: NodeFacts, deadline: Deadline) -> tuple[str, ...]:
    """The other Nodes reporting ``node``'s systemUUID, from one live list of every Node (a
    page at a time, each kept only as its summary). Read at the priority of the reads an
    action rests on, whatever the caller's: it decides whether a power action goes out."""
    with reads_at(Priority.LIVE):
        nodes, _version = await list_summaries(kube, deadline)
    return twins_among(nodes, node)


def with_twins(snapshot: Snapshot, twins: tuple[str, ...]) -> Snapshot:
    facts = dataclasses.replace(snapshot.facts, uuid_shared_with=twins)
    return dataclasses.replace(snapshot, facts=facts)


def _judge(facts: Facts, reported: Reported | None) -> Judgement:
    node = facts.node
    return judge(
        facts.machine,
        reported,
        node=node.name if node is not None else "",
        system_uuid=node.system_uuid if node is not None else "",
        provider_id=node.provider_id if node is not None else "",
        uuid_shared_with=facts.uuid_shared_with,
    )


async def before_action(
    driver: PowerDriver,
    facts: Facts,
    timeout: float,  # noqa: ASYNC109
) -> tuple[Reported | None, Judgement]:
    """Ask the target which machine it controls and judge it, before anything is sent. An
    ``unchecked`` entry or one two nodes share is judged without asking (there is nothing to
    read, or nothing a read could settle)."""
    machine = facts.machine
    if machine is None or machine.unchecked or machine.shared_with:
        return None, _judge(facts, None)
    reported = await driver.identity(min(timeout, IDENTITY_TIMEOUT_SECONDS))
    return reported, _judge(facts, reported)


def refused(
    action: PowerAction, facts: Facts, reported: Reported | None, verdict: Judgement
) -> tuple[ActionResult, PowerEvidence]:
    """No power action: the target is not shown to be this node's machine."""
    kind = f"power-{action.operation}"
    target = facts.machine.target if facts.machine is not None else f"{action.driver} BMC"
    detail = f"no power {action.operation} sent: {verdict.message}"
    evidence = PowerEvidence("unknown", target, detail, identity=reported)
    return ActionResult(kind, action.node, Outcome.FAILED, detail), evidence


async def with_proof_read(
    driver: PowerDriver,
    reading: PowerReading,
    facts: Facts,
    timeout: float,  # noqa: ASYNC109
) -> Reported | None:
    """The identity that goes with a reading of Off: read in the same answer when the driver
    can (a Redfish system carries its UUID beside its PowerState), otherwise asked right after.
    Nothing is read for an ``unchecked`` entry or for a reading that is no proof anyway."""
    machine = facts.machine
    if reading.state != "off" or machine is None or machine.unchecked:
        return None
    if reading.identity:
        return Reported(reading.identity, reading.source)
    return await driver.identity(min(timeout, IDENTITY_TIMEOUT_SECONDS))


def evidence_of(
    action: PowerAction, reading: PowerReading, identity: Reported | None
) -> PowerEvidence:
    """A power-off counts as sent when this step sent it, or when an earlier step of the
    incident did (the record said so, and this one only read); a machine found already off
    was sent nothing, and its proof must not say nodefence powered it off."""
    earlier = action.operation == "off" and not action.send
    return PowerEvidence(
        reading.state,
        reading.source,
        reading.detail,
        action_sent=reading.reset_sent or earlier,
        identity=identity,
        reset_sent=reading.reset_sent,
    )


def proof_to_record(facts: Facts, evidence: PowerEvidence) -> str:
    """The proof text to write before the taint, or "" when the evidence is no proof (not Off,
    or not shown to be this node's machine)."""
    node = facts.node
    if node is None or evidence.state != "off":
        return ""
    identity = bound_to_node(node, facts, evidence)
    if not identity.passed:
        return ""
    return proof_text(evidence, identity)


def timed(evidence: PowerEvidence, at: datetime) -> PowerEvidence:
    return dataclasses.replace(evidence, at=evidence.at or at)
