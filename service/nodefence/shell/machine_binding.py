"""The node's machine, bound before deciding: what the inventory says of it
(:func:`bind_machine`) and the other Nodes reporting its systemUUID (:func:`live_twins`), so the
engine knows which machine a power action would reach and whether a BMC's answer could be another
Node's (S10).

The other Nodes reporting the node's systemUUID (cloned machines) come from the serving
receiver's watch-fed node index while it is fresh. Without one (a one-shot ``reconcile``, or a
replica whose index has not synced or whose watch broke) the Nodes are listed live before a
decision that may send a power action is committed: a refusal may rest on the index, an action
only on what the API server says now.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from nodefence.engine.identity import canonical_identity
from nodefence.engine.model import Decision, NodeFacts, PowerAction
from nodefence.fencing.binding import machine_binding, shared
from nodefence.fencing.inventory import Inventory
from nodefence.kube.client import Deadline, KubeClient
from nodefence.kube.facts import Snapshot
from nodefence.kube.node_index import NodeIndex, NodeSummary, list_summaries
from nodefence.kube.ratelimit import Priority, reads_at


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
