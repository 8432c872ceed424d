"""Following and freezing a receiver's watch-fed node index, and reading what was written since:
shared by the tests of refusals on cached facts, so none imports another test module."""

from __future__ import annotations

from tests.seeded_cluster import Receiver, eventually

from nodefence.engine import record as fence_record
from nodefence.kube.client import CONFIGMAP
from nodefence.kube.node_index import NodeIndex
from nodefence_sim.faults import WRITE_VERBS, FaultRule
from nodefence_sim.testing import SimulatorHandle

# The path of every Node watch; the index is the only one in the receiver that watches it.
NODES = "/api/v1/nodes"
# What the background refresh reads by itself every minute, for its gauges (``background.refresh``).
RECORD = CONFIGMAP.format(namespace="nodefence", name=fence_record.CONFIGMAP)


async def following(receiver: Receiver) -> NodeIndex:
    """The node index of a receiver started with ``follow``, once it has listed the cluster,
    and the pause switch once its watch has read it: from then on neither is read by a
    request."""
    reader = receiver.pipeline.reader
    index = reader.nodes
    assert index is not None
    await eventually(lambda: index.fresh() is not None, within=60)
    await eventually(
        lambda: reader.pause_watch is not None and reader.pause_watch.fresh() is not None,
        within=60,
    )
    return index


async def freeze(cluster: SimulatorHandle, index: NodeIndex) -> FaultRule:
    """From now on the index hears nothing: every new watch of the nodes hangs. Returns once
    the watch it had open has ended (so no change reaches it any more); its freshness bound is
    raised so what it holds stays in use however slow the machine.

    Only a watch of the nodes proves it: the index opens its next one when the last has
    ended, and that one hangs. Any other watch (the pause switch's, of a ConfigMap, opened
    whenever its own list answers) says nothing about the node watch still streaming."""
    index.max_age = 3600
    since = cluster.faults.cursor
    rule = cluster.faults.hang(None, verbs=("watch",), path=NODES)
    await eventually(
        lambda: any(r.verb == "watch" and r.path == NODES for r in cluster.faults.requests(since)),
        within=60,
    )
    return rule


def sent_since(cluster: SimulatorHandle, since: int) -> list[str]:
    """Requests since ``since``, without those a serving receiver sends on its own timers,
    whenever a busy machine lets them run: the watches it renews (the node index's every 10 s,
    the pause switch's every minute) and the background refresh's reads of the fence record.
    Whether a request read the fence record is counted by the cached path itself
    (``CacheStats.record_reads``)."""
    return [
        f"{r.method} {r.path}"
        for r in cluster.faults.requests(since)
        if r.verb != "watch" and not (r.verb == "get" and r.path == RECORD)
    ]


def writes_since(cluster: SimulatorHandle, since: int) -> list[str]:
    """Writes to anything but Events (a refusal's report)."""
    return [
        f"{r.method} {r.path}"
        for r in cluster.faults.requests(since)
        if r.verb in WRITE_VERBS and "/events" not in r.path
    ]
