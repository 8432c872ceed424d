"""Refuse from the cache, act on live reads.

Before the loop reads a node's live facts (node, Lease, pods, fence record: four requests), a
firing alert is decided on what the receiver already holds: the node as the watch-fed index saw
it, the cluster counts, the pause switch, and the fence record from a read shared by every
request of the last ``RECORD_SHARE_SECONDS`` (one read, however many alerts arrive at once). A
node the index saw Ready is refused by S1 without any request at all.

That decision stands only if ``engine.cached.refusal_on_cache`` says so: no action, and every
guard that blocked it rests on cached facts. Otherwise it is discarded here, never committed,
and the caller runs the live loop, which reads everything again and decides afresh with every
precondition; so a cached fact never leads to a claim, power action, taint, purge or unfence.

Freshness is stated, not assumed. The index is used only while it heard from the API server
within its bound (``NodeIndex.fresh``, 30 s); its watch delivers every change of every Node, so
what it holds is the API server's own view, not any kubelet's clock (S11). ``now`` for the
cached decision is the API server's clock: the ``Date`` of its latest reply, moved on by this
process's monotonic clock (``kube.server_clock``), never its wall clock.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from asyncio import FIRST_COMPLETED
from collections.abc import Callable

from nodefence.engine import record as fence_record
from nodefence.engine.cached import Source, may_claim, refusal_on_cache
from nodefence.engine.model import API_SERVER_CLOCK, Decision, Facts, NodeFacts
from nodefence.engine.readiness import node_is_ready
from nodefence.engine.wording import instant
from nodefence.fencing.inventory import Inventory
from nodefence.kube.client import CONFIGMAP, Deadline
from nodefence.kube.facts import FactsReader, Snapshot
from nodefence.kube.ratelimit import Priority, reads_at
from nodefence.shell.machine_binding import bind_machine

# A refusal of a NotReady node may rest on a fence record read this recently by any request:
# the budget seen full a second ago is, at worst, a refusal the reconcile pass revisits.
RECORD_SHARE_SECONDS = 1.0
# A Ready node's S1 refusal reads nothing; the record it is judged with may be this old (the
# index's own bound). An older one is read again, shared.
RECORD_READY_SECONDS = 30.0

# How long a cached decision that would claim waits at most for another request's claim.
CLAIM_WAIT_SECONDS = 5.0

Decider = Callable[[Snapshot], Decision]


@dataclasses.dataclass(frozen=True)
class SharedRecord:
    """The fence record as one read returned it, and when (monotonic) that read was sent."""

    record: fence_record.FenceRecord
    data: dict[str, str]
    read_at: float


@dataclasses.dataclass
class CacheStats:
    """How many decisions stood on cached facts, and how many went on to live reads."""

    refused: int = 0
    live: int = 0
    record_reads: int = 0
    # Cached decisions that waited for another request's claim before being made again.
    waited: int = 0


def _index_source(node: NodeFacts | None) -> str:
    """The index, and when the API server last stamped a write of the node's status (S11:
    its clock, from managedFields, never the kubelet's)."""
    if node is None or node.status_written is None:
        return "the watch-fed node index"
    return (
        "the watch-fed node index (the API server last stamped a write of its status at "
        f"{instant(node.status_written)})"
    )


class CachedRefusal:
    def __init__(
        self,
        reader: FactsReader,
        inventory: Inventory | None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.reader = reader
        self.inventory = inventory
        self.clock = clock
        self.stats = CacheStats()
        self._record: SharedRecord | None = None
        # The request of this process that last went on to claim a budget slot, and when.
        self._claimer: tuple[float, asyncio.Task[object]] | None = None

    async def run(
        self, name: str, decider: Decider, deadline: Deadline
    ) -> tuple[Decision, Snapshot] | None:
        """A refusal made on cached facts, or None: the caller reads live and decides again.

        A cached decision that would claim a budget slot while another request of this
        process is on its way to claim one waits until that request wrote the record or
        finished (at most ``CLAIM_WAIT_SECONDS``), and is made again on the record read after
        it: in a storm the first dead node is fenced and the other alerts see the budget it
        spent from one shared read, instead of each reading its node live to find the same."""
        for attempt in range(2):
            decision, stood = await self._decide(name, decider, deadline, fresh=attempt > 0)
            if stood is not None:
                self.stats.refused += 1
                return stood
            if decision is None or not may_claim(decision) or attempt > 0:
                break
            claimer = self._claimer
            written = self.reader.kube.flights.last_write.get(self._record_key, -1.0)
            if claimer is None or claimer[1].done() or written >= claimer[0]:
                task = asyncio.current_task()
                if task is not None:
                    self._claimer = (self.clock(), task)
                break
            self.stats.waited += 1
            await self._claim_landed(claimer[1], min(CLAIM_WAIT_SECONDS, deadline.remaining / 2))
        self.stats.live += 1
        return None

    async def _claim_landed(self, claimer: asyncio.Task[object], within: float) -> None:
        """Until the fence record is next written, or ``claimer`` is done, or ``within``."""
        write = asyncio.ensure_future(self.reader.kube.flights.written(self._record_key).wait())
        try:
            await asyncio.wait({write, claimer}, timeout=within, return_when=FIRST_COMPLETED)
        finally:
            write.cancel()

    @property
    def _record_key(self) -> str:
        return CONFIGMAP.format(namespace=self.reader.namespace, name=fence_record.CONFIGMAP)

    async def _decide(
        self, name: str, decider: Decider, deadline: Deadline, *, fresh: bool
    ) -> tuple[Decision | None, tuple[Decision, Snapshot] | None]:
        """The decision on cached facts (None: nothing to decide on), and it with its
        snapshot if it stands."""
        index = self.reader.nodes
        counts = index.fresh() if index is not None else None
        node = self.reader.node_facts.get(name)
        # A name the fresh index does not hold is no node of the cluster: refused on the index
        # alone, so a payload of a thousand made-up names costs no request per name.
        unknown = index is not None and node is None and name not in index.nodes
        if counts is None or (node is None and not unknown):
            # No fresh index, or a node it has not seen whole: nothing here to refuse on. (A
            # control-plane node's quorum is counted from the index here, which can only
            # refuse and never stands alone: the guard is not one a cached refusal rests on.)
            return None, None
        ready = node is not None and node_is_ready(node)
        within = RECORD_READY_SECONDS if ready else RECORD_SHARE_SECONDS
        shared = await self._shared_record(deadline, -1.0 if fresh else within)
        now = self.reader.kube.server_clock.now()
        if now is None:
            return None, None
        with reads_at(Priority.REFUSAL):
            cluster = await self.reader.cluster(deadline)
        record_age = max(0.0, self.clock() - shared.read_at)
        facts = Facts(
            node=node,
            lease=None,
            pods=(),
            cluster=cluster,
            record=shared.record,
            clock=API_SERVER_CLOCK,
            own_node=self.reader.own_node,
        )
        snapshot = bind_machine(Snapshot(facts, None, shared.data, now), self.inventory)
        sources = (
            Source(f"node {name}", _index_source(node), counts.age),
            Source("the fence record", "a read shared by concurrent requests", record_age),
            Source("the cluster counts", "the watch-fed node index", counts.age),
        )
        decision = decider(snapshot)
        stood = refusal_on_cache(decision, sources)
        return decision, (stood, snapshot) if stood is not None else None

    async def _shared_record(self, deadline: Deadline, within: float) -> SharedRecord:
        """The fence record from a read at most ``within`` seconds old, else read now (one
        request, shared by every caller in flight, behind every request that acts)."""
        held = self._record
        written = self.reader.kube.flights.last_write.get(self._record_key, -1.0)
        if held is not None and written < held.read_at and self.clock() - held.read_at <= within:
            # Not older than ``within``, and no write of the record by this process since.
            return held
        started = self.clock()
        with reads_at(Priority.REFUSAL):
            dated = await self.reader.record(deadline)
        self.stats.record_reads += 1
        record, data = fence_record.from_configmap(dated.body)
        shared = SharedRecord(record, data, started)
        if self._record is None or self._record.read_at <= started:
            self._record = shared
        return shared
