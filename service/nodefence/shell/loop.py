"""The one loop: read a snapshot, decide, commit; on a failed precondition read again.

A snapshot is the node, its Lease and pods, the fence record, the cluster's counts and the API
server's clock. The BMC's answer to a power step is read from the fence record too: the step
writes it into the record beside the node's entry, and the turn after it decides on it.
``decide`` is pure. No lock is held between replicas: the claim written on the record version
the decision read is what keeps two replicas from both spending the last budget slot, however
slow either is. What only some decisions rest on is read for them alone, and
the engine decides again with it: the machine's power state, read-only, for a decision only
waits its state may end hold back (``shell.early_power``), the Nodes sharing the machine's
systemUUID before a power action, the node's VolumeAttachments for a decision that says what
becomes of them, and in a dry run the BMC its power action would have asked, read-only
(``shell.dry_run_power``).

After a fence the same loop turns again (``Loop.settle``): the taint manager evicts the node's
remaining pods, which on a dead node hang Terminating too, and each turn commits whatever the
engine decides next on fresh facts: purging them, then, for a rule that reboots, the power-on
(the engine decides it once nothing it may purge is left, and the fence record keeps it to one
send), and the VolumeAttachments the rule lets nodefence delete once no pod uses a claim.
Whatever the request has no time left for is the reconcile pass's to finish. The fence is
reported as the engine decides it again on its own snapshot with what those turns decided of the
node's volumes (``with_settled``).

The same loop commits what people ask for: an operator's release (``engine.release``) and a
person's answer to an approval question (``engine.answer``) are decisions like the others, so
their writes carry the same preconditions and a node that changed under them is read again.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Sequence

from nodefence.actions.executor import ActionResult
from nodefence.actions.fence_record_writer import FenceRecordWriter
from nodefence.engine import power_reading, volumes
from nodefence.engine.model import Decision, VolumeAttachmentFacts
from nodefence.errors import ClusterUnavailableError
from nodefence.fencing.inventory import Inventory
from nodefence.kube.client import Deadline, KubeClient
from nodefence.kube.convert import volume_attachment_facts
from nodefence.kube.facts import FactsReader, Snapshot
from nodefence.kube.ratelimit import Priority, reads_at
from nodefence.shell.cached_refusal import CachedRefusal
from nodefence.shell.commit import Commit
from nodefence.shell.dry_run_power import DryRunPower
from nodefence.shell.early_power import EarlyPower
from nodefence.shell.machine_binding import bind_machine, live_twins, twins_to_list, with_twins
from nodefence.shell.report import Reporter

MAX_DECIDE_ATTEMPTS = 5
# How often a settling node is read again while its pods are still being evicted.
SETTLE_POLL_SECONDS = 0.2

Decider = Callable[[Snapshot], Decision]


class KeptChangingError(ClusterUnavailableError):
    """Every attempt's precondition failed: the node kept changing under the writes. A
    webhook answers it as any unavailability (Alertmanager retries); an operator's command
    says to try again."""


@dataclasses.dataclass(frozen=True)
class Pass:
    """One turn of the loop: the last decision, everything its commits did, and the snapshot
    it was made on."""

    decision: Decision
    results: list[ActionResult]
    snapshot: Snapshot
    # The out-of-service taint write went through during this pass.
    fenced: bool = False

    @property
    def node_uid(self) -> str:
        node = self.snapshot.facts.node
        return node.uid if node is not None else ""


class Loop:
    def __init__(
        self,
        reader: FactsReader,
        commit: Commit,
        records: FenceRecordWriter,
        reporter: Reporter,
        inventory: Inventory | None,
        *,
        early: EarlyPower | None = None,
        dry_run: DryRunPower | None = None,
    ) -> None:
        self.reader = reader
        self.early = early
        self.dry_run = dry_run
        self.commit = commit
        self.records = records
        self.reporter = reporter
        self.inventory = inventory
        self.cached = CachedRefusal(reader, inventory)

    async def run(
        self,
        name: str,
        decider: Decider,
        deadline: Deadline,
        *,
        prepare: Callable[[Snapshot], Awaitable[Snapshot]] | None = None,
        token: str = "",
        cached: bool = False,
    ) -> Pass:
        """Read, decide, commit; on a failed precondition (or after housekeeping) again.
        ``token`` names any claim this request writes, across its attempts; ``prepare`` adds
        to each snapshot what is read from outside the cluster before deciding. ``cached``:
        first decide on cached facts (``shell.cached_refusal``); that decision stands only as
        a refusal without any action, otherwise it is discarded and everything read live."""
        if cached:
            refused = await self.cached.run(name, decider, deadline)
            if refused is not None:
                return Pass(refused[0], [], refused[1])
        token = token or self.records.new_token()
        results: list[ActionResult] = []
        fenced = False
        # S10: the Nodes sharing this node's systemUUID, listed live once for this request when
        # no fresh index knows them (``machine_binding.twins_to_list``); kept for every pass.
        twins: tuple[str, ...] | None = None
        for _attempt in range(MAX_DECIDE_ATTEMPTS):
            snapshot = bind_machine(
                await self.reader.read(name, deadline), self.inventory, self.reader.nodes
            )
            if twins is not None:
                snapshot = with_twins(snapshot, twins)
            if prepare is not None:
                snapshot = await prepare(snapshot)
            # The BMC's answer to this request's power step, as the fence record holds it.
            snapshot = dataclasses.replace(
                snapshot, facts=power_reading.with_reading(snapshot.facts, token)
            )
            decision = decider(snapshot)
            unvouched = twins_to_list(decision, snapshot, self.reader.nodes)
            if twins is None and unvouched is not None:
                twins = await live_twins(self.reader.kube, unvouched, deadline)
                snapshot = with_twins(snapshot, twins)
                decision = decider(snapshot)
            if decision.needs_power_reading and self.early is not None:
                # Only waits hold the decision back, and the machine's state may end them:
                # read it, read-only, and decide again (``engine.power_waits``).
                early = await self.early.read(decision, snapshot.facts, deadline)
                early = dataclasses.replace(early, at=snapshot.now)
                facts = dataclasses.replace(snapshot.facts, early_power=early)
                snapshot = dataclasses.replace(snapshot, facts=facts)
                decision = decider(snapshot)
            if decision.needs_attachments:
                # Only a decision on a node found down, on a server that may not detach its
                # volumes itself, says what becomes of them; read for it alone, live.
                attached = await node_attachments(self.reader.kube, name, deadline)
                facts = dataclasses.replace(snapshot.facts, attachments=attached)
                snapshot = dataclasses.replace(snapshot, facts=facts)
                decision = decider(snapshot)
            if decision.dry_run:
                # S8: nothing is committed. The line logged is the decision on what the cluster
                # showed; a plan that would ask the node's BMC then has it asked, read-only, and
                # is decided again with what it said (``shell.dry_run_power``).
                self.reporter.log_decision(decision)
                if decision.dry_run_read is not None and self.dry_run is not None:
                    read = await self.dry_run.read(
                        decision.dry_run_read, decision, snapshot.facts, deadline
                    )
                    facts = dataclasses.replace(snapshot.facts, dry_run_power=read)
                    snapshot = dataclasses.replace(snapshot, facts=facts)
                    decision = decider(snapshot)
                return Pass(decision, results, snapshot, fenced)
            if not decision.actions:
                return Pass(decision, results, snapshot, fenced)
            committed = await self.commit(decision, snapshot, token, deadline)
            results.extend(committed.results)
            fenced = fenced or committed.fenced
            if not committed.again:
                return Pass(decision, results, snapshot, fenced)
        raise KeptChangingError(f"node {name} kept changing while nodefence tried to write it")

    async def settle(
        self, name: str, decider: Decider, deadline: Deadline, seconds: float
    ) -> list[Pass]:
        """Turn the loop again, for at most ``seconds`` of the request's time, until a decision
        holds no action and no pod on the node is still running (not yet evicted); every turn
        commits what the engine decided. One pass per turn, in order."""
        turns: list[Pass] = []
        settling = Deadline(min(seconds, deadline.remaining))
        while not settling.expired:
            turn = await self.run(name, decider, deadline)
            turns.append(turn)
            running = any(not pod.terminating for pod in turn.snapshot.facts.pods)
            if not turn.decision.actions and not running:
                break
            await asyncio.sleep(SETTLE_POLL_SECONDS)
        return turns


def with_settled(snapshot: Snapshot, turns: Sequence[Pass]) -> Snapshot:
    """The fence's ``snapshot`` with what the loop's turns after it (``turns``, in order)
    decided of the node's volumes (``Facts.settled_volumes``): deciding the fence again on it
    gives the decision the request reports."""
    seen = tuple(volumes.seen(turn.decision) for turn in turns)
    facts = dataclasses.replace(snapshot.facts, settled_volumes=seen)
    return dataclasses.replace(snapshot, facts=facts)


async def node_attachments(
    kube: KubeClient, name: str, deadline: Deadline
) -> tuple[VolumeAttachmentFacts, ...]:
    """The VolumeAttachments of node ``name``, from one live list: deletes may rest on it."""
    with reads_at(Priority.LIVE):
        listed = await kube.list_volume_attachments(deadline)
    return tuple(a for a in map(volume_attachment_facts, listed) if a.node_name == name)
