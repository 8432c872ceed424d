"""nodefence's fencer: the two ways in, an alert event and the reconcile pass over what the
fence record holds, each turned into decisions the loop commits.

Both go through the one loop of ``nodefence.shell`` (read a snapshot, decide, commit, on a
failed precondition read again); this module only says in which order a request takes its
steps: the external proof before deciding (the approval question is decided by the engine and
asked by the commit), the loop's settle after a fence (purges, a reboot's power-on, the
VolumeAttachments, as the engine decides them), the fence decided again with what the settle
found of its volumes, and the report last. Events for different
nodes run concurrently, events for one node in order. The parts are built by
``nodefence.runtime``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Protocol, TypeVar

import structlog

from nodefence.actions.fence_record_writer import FenceRecordWriter
from nodefence.alertmanager.client import (
    AlertmanagerUnavailableError,
    active_alerts,
    active_silences,
    held_nodes,
)
from nodefence.alertmanager.config import AlertmanagerConfig
from nodefence.alertmanager.reachability import Reachability
from nodefence.alertmanager.silence_store import NOTHING, Known, SilenceStore, relevant
from nodefence.engine import fallback, recovery, silences
from nodefence.engine import record as fence_record
from nodefence.engine.decide import decide, decide_reconcile
from nodefence.engine.model import (
    AlertEvent,
    AlertStatus,
    Approval,
    ClusterFacts,
    Decision,
    Facts,
    Verdict,
)
from nodefence.engine.wording import instant
from nodefence.errors import ClusterUnavailableError
from nodefence.fencing.inventory import Inventory
from nodefence.kube.client import Deadline, KubeClient, KubeError
from nodefence.kube.facts import FactsReader, Snapshot
from nodefence.observability.metrics import Metrics
from nodefence.policy import Policy
from nodefence.shell.active_alerts import judge_active, one_per_node
from nodefence.shell.approval_requester import ApprovalRequester, report_waiting
from nodefence.shell.external_proof import ExternalProof
from nodefence.shell.loop import Loop, with_settled
from nodefence.shell.report import Reporter

log = structlog.get_logger(__name__)

T = TypeVar("T")

# Firing alerts remembered for wake-ups, at most (one per node).
MAX_FIRING = 10_000


class Waits(Protocol):
    """Where decisions that name the end of their wait arm a wake-up (``background.wakeups``)."""

    def after(self, decision: Decision) -> None: ...


@dataclasses.dataclass(frozen=True)
class FencerOptions:
    namespace: str = "nodefence"
    identity: str = "nodefence"
    # The node this replica runs on (``NODEFENCE_NODE_NAME``): its fence is left to another.
    node_name: str | None = None
    deadline_seconds: float = 20.0
    settle_seconds: float = 3.0
    purge_concurrency: int = 16
    # Refusals may stand on cached facts (``shell.cached_refusal``); off: every alert read live.
    cached_refusals: bool = True


class Fencer:
    """Stateless: everything it knows comes from the cluster at the time of each request."""

    def __init__(
        self,
        *,
        kube: KubeClient,
        policy: Policy,
        metrics: Metrics,
        options: FencerOptions,
        clock: Callable[[], datetime],
        reader: FactsReader,
        records: FenceRecordWriter,
        loop: Loop,
        reporter: Reporter,
        proof: ExternalProof,
        alertmanager: AlertmanagerConfig | None = None,
        reachability: Reachability | None = None,
        silences: SilenceStore | None = None,
        approvals: ApprovalRequester | None = None,
        inventory: Inventory | None = None,
    ) -> None:
        self.kube = kube
        self.policy = policy
        self.metrics = metrics
        # Read at each request (settle time, deadline), so a test may shorten them.
        self.options = options
        self.clock = clock
        self.reader = reader
        self.records = records
        self.loop = loop
        self.reporter = reporter
        self.proof = proof
        self.alertmanager = alertmanager
        self.reachability = reachability
        # Alertmanager's silences, as last read: they hold the fallback, also while it is down.
        self.silences = silences
        self.approvals = approvals
        # The BMC inventory the power step works with, also probed in the background.
        self.inventory = inventory
        # When a firing alert for each node last reached this process by webhook (monotonic):
        # the alert path is at work there, so the fallback leaves the node to it.
        self.delivered: dict[str, float] = {}
        # The last firing alert delivered for each node, until its resolve: what a wake-up for
        # the node judges again (``background.wakeups``).
        self.firing: dict[str, AlertEvent] = {}
        # Where a serving receiver arms its wake-ups (None: a one-shot command arms none).
        self.waits: Waits | None = None
        self.alert_names = list(policy.alerts.names)
        self.node_labels = list(policy.alerts.node_labels)
        self._passes = asyncio.Lock()

    async def close(self) -> None:
        """Close the client (the background loops that use it were stopped before)."""
        await self.kube.close()

    async def read_record(self, deadline: Deadline) -> fence_record.FenceRecord:
        return await self.reader.read_fence_record(deadline)

    async def ready(self) -> tuple[bool, str]:
        """Reachable now, not once: the probe asks the API server every time it is called."""
        try:
            info = await self.kube.version(Deadline(3.0))
        except (ClusterUnavailableError, KubeError) as exc:
            return False, str(exc)
        return True, f"Kubernetes API reachable ({info.get('gitVersion', 'unknown version')})"

    # ------------------------------------------------------------------ alerts
    async def handle_events(self, events: list[AlertEvent]) -> list[Decision]:
        """Events for different nodes run concurrently; events for one node run in order."""
        deadline = Deadline(self.options.deadline_seconds)
        await self.reader.server_version_string(deadline)
        by_node: dict[str | None, list[int]] = {}
        for index, event in enumerate(events):
            by_node.setdefault(event.node, []).append(index)
            self._remember(event)
        results: list[Decision | None] = [None] * len(events)

        async def run_node(indexes: list[int]) -> None:
            for index in indexes:
                results[index] = await self.handle_event(events[index], deadline)

        groups = list(by_node.values())
        if len(groups) == 1:
            # One node (Alertmanager's usual webhook): no task to start and gather.
            await run_node(groups[0])
        else:
            await asyncio.gather(*(run_node(ix) for ix in groups))
        return [d for d in results if d is not None]

    def _remember(self, event: AlertEvent) -> None:
        """What the fallback and the wake-ups need of a delivery: when a firing alert for the
        node came, and which one, until it resolves."""
        if event.node is None:
            return
        if event.status is AlertStatus.FIRING:
            self.delivered[event.node] = time.monotonic()
            self.firing.pop(event.node, None)
            if len(self.firing) >= MAX_FIRING:
                # The oldest delivery goes: its node is left to the next delivery or pass.
                self.firing.pop(next(iter(self.firing)))
            self.firing[event.node] = event
        else:
            self.firing.pop(event.node, None)

    async def judge_node(self, name: str) -> Decision | None:
        """Judge ``name`` now, not for a delivery (``background.wakeups``): a node the fence
        record holds as the reconcile pass does, else its last firing alert, else as the
        fallback judges a NotReady node no alert brought, before its wait for an alert is over
        (the ``alert-wait`` guard, which the machine's power state may end). None: nothing to
        judge (a Ready node nodefence holds nothing of)."""
        deadline = Deadline(self.options.deadline_seconds)
        await self.reader.server_version_string(deadline)
        held = await self.read_record(deadline)
        entry = held.entry(name)
        if entry is not None:
            return await self._reconcile_node(name, entry.uid, deadline)
        event = self.firing.get(name)
        if event is None:
            early = await self._fallback_events(set(), deadline, early=name)
            if not early:
                return None
            event = early[0]
        return await self.handle_event(event, deadline)

    async def handle_event(
        self, event: AlertEvent, deadline: Deadline, *, approval: Approval | None = None
    ) -> Decision:
        """One event; ``approval`` is a person's answer, and every other guard still applies."""
        handled = event.alertname in self.alert_names or bool(event.fallback)
        if event.node is None or not handled:
            empty = Facts(None, None, (), ClusterFacts(total_nodes=0, ready_nodes=0))
            decision = decide(event, empty, self.policy, self.clock())
            self.reporter.log_decision(decision)
            return decision
        await self.reader.server_version_string(deadline)

        async def with_power(snapshot: Snapshot) -> Snapshot:
            return await self.proof.read(event, snapshot, deadline)

        token = self.records.new_token()
        approvals = self.approvals

        def decider(snapshot: Snapshot) -> Decision:
            return decide(
                event,
                snapshot.facts,
                self.policy,
                snapshot.now,
                approval=approval,
                own_claim=token,
                asking_at=approvals.now() if approvals is not None else None,
            )

        # Refusals may stand on cached facts; anything that acts is read live (shell.loop).
        first = await self.loop.run(
            event.node,
            decider,
            deadline,
            prepare=with_power,
            token=token,
            cached=approval is None and self.options.cached_refusals,
        )
        decision, results, fenced = first.decision, list(first.results), first.fenced
        if self.waits is not None:
            self.waits.after(decision)
        if decision.dry_run:
            # S8: no write; the loop had the BMC only asked (``shell.dry_run_power``).
            return decision
        if approvals is not None:
            report_waiting(self.metrics, decision, first.snapshot.facts, approvals.now())
        if decision.verdict is Verdict.FENCE and fenced:
            settle = self.options.settle_seconds
            turns = await self.loop.settle(event.node, decider, deadline, settle)
            for turn in turns:
                results.extend(turn.results)
                fenced = fenced or turn.fenced
            # The fence is reported with what became of the node's volumes once it settled:
            # decided again on its own facts and what the turns after it found of them.
            decision = decider(with_settled(first.snapshot, turns))
        return await self.reporter.report(
            decision, results, first.node_uid, deadline, fenced=fenced
        )

    # --------------------------------------------------------------- reconcile
    async def reconcile(self) -> list[Decision]:
        """One pass at a time in this process: a pass asked for while one runs (``POST
        /reconcile`` during the loop's own pass) starts when that one has ended."""
        async with self._passes:
            return await self._reconcile_pass()

    async def _reconcile_pass(self) -> list[Decision]:
        """Finish what lost or failed deliveries left, for every node the fence record holds:
        purge leftovers, unfence recovered nodes, complete or roll back half-written fences."""
        deadline = Deadline(self.options.deadline_seconds)
        await self.reader.server_version_string(deadline)
        held = await self.read_record(deadline)
        for key in held.unreadable:
            log.warning("fence_record_unreadable", key=key)
        decisions: list[Decision] = []
        # First, while the nodes are still fenced: a node this pass unfences is not measured.
        for entry in held.entries:
            if recovery.wanted(entry):
                measured = await self._measure_recovery(entry.node, deadline)
                if measured is not None:
                    decisions.append(measured)
        uids = {entry.node: entry.uid for entry in held.entries}
        # S3: nodes whose mirror says nodefence fenced them but whose entry is gone (a deleted
        # or rolled-back record) are judged too: reported, and adopted back where proven.
        cluster = await self.reader.cluster(deadline)
        orphans = tuple(sorted(set(cluster.mirrored) - set(uids)))
        self.metrics.fences_without_record_are(orphans)
        for name in (*uids, *orphans):
            decisions.append(await self._reconcile_node(name, uids.get(name, ""), deadline))
        handled = {entry.node for entry in held.entries}
        active = one_per_node(await self._active_alerts(), handled)
        # Hundreds in an outage: judged as webhooks are, a bounded number at a time.
        decisions += await judge_active(
            active, self.handle_event, deadline_seconds=self.options.deadline_seconds
        )
        judged = handled | {event.node for event in active if event.node is not None}
        decisions += await judge_active(
            await self._fallback_events(judged, deadline),
            self.handle_event,
            deadline_seconds=self.options.deadline_seconds,
        )
        return decisions

    async def _reconcile_node(self, name: str, uid: str, deadline: Deadline) -> Decision:
        """The reconcile decision for one node the fence record (or its mirror) holds,
        committed and reported; ``uid``: the node object the record names, if any."""

        def decider(snapshot: Snapshot) -> Decision:
            return decide_reconcile(snapshot.facts, self.policy, snapshot.now, name)

        done = await self.loop.run(name, decider, deadline)
        decision, results = done.decision, list(done.results)
        if self.waits is not None:
            self.waits.after(decision)
        if decision.dry_run:
            return decision
        return await self.reporter.report(
            decision, results, done.node_uid or uid, deadline, fenced=done.fenced
        )

    async def _measure_recovery(self, name: str, deadline: Deadline) -> Decision | None:
        """Measure the incident of fenced node ``name`` (``engine.recovery``) on the pods of the
        namespaces it held pods in; the decision when it was measured now, else None. A
        measurement that cannot be made now (the API server unavailable, a namespace list
        refused) is tried again on the next pass and never stops this one."""

        async def with_pods(snapshot: Snapshot) -> Snapshot:
            entry = snapshot.facts.record.entry(name)
            if entry is None or not recovery.wanted(entry):
                return snapshot
            pods = await self.reader.pods_in(entry.held.namespaces(), deadline)
            facts = dataclasses.replace(snapshot.facts, elsewhere=pods)
            return dataclasses.replace(snapshot, facts=facts)

        def decider(snapshot: Snapshot) -> Decision:
            return recovery.decide(snapshot.facts, self.policy, snapshot.now, name)

        try:
            done = await self.loop.run(name, decider, deadline, prepare=with_pods)
        except (ClusterUnavailableError, KubeError) as exc:
            log.warning("recovery_not_measured", node=name, error=str(exc))
            return None
        if done.decision.dry_run or not done.results:
            return None
        return await self.reporter.report(
            done.decision, list(done.results), done.node_uid, deadline, fenced=False
        )

    async def _fallback_events(
        self, judged: set[str], deadline: Deadline, *, early: str | None = None
    ) -> list[AlertEvent]:
        """The NotReady nodes no alert brought (``engine.fallback``), as firing events: past
        ``cluster.fallback_after_seconds`` on the API server's clock, not judged in this pass
        already, no firing webhook for them within that time, and none held by Alertmanager
        where it can be asked (any state: a silence stops nodefence). ``early``: that node
        alone, whether or not its window has run (a wake-up's or the watch's judgement; the
        ``alert-wait`` guard then says whether the wait for an alert is over)."""
        after = self.policy.cluster.fallback_after_seconds
        if after <= 0:
            return []
        now = self.kube.server_clock.now()
        if now is None:
            # No reply has dated anything yet: no window can be judged on the API server's clock.
            return []
        recent = time.monotonic() - after
        self.delivered = {node: at for node, at in self.delivered.items() if at > recent}
        skip = judged | set(self.delivered)
        not_ready = await self.reader.not_ready_nodes(deadline)
        if early is None:
            due = fallback.due(not_ready, now, after, skip)
        else:
            since = not_ready.get(early)
            due = [(early, since)] if since is not None and early not in skip else []
        # Read on every pass, a node down or not, so that the silences set before an outage of
        # Alertmanager are kept where every replica finds them when it comes.
        known = await self._silences(now, deadline) if self.alertmanager is not None else NOTHING
        if not due:
            return []
        silence = fallback.not_configured()
        if self.alertmanager is not None:
            held_by_am: set[str] = await self._ask_alertmanager(held_nodes, set[str]())
            due = [(node, since) for node, since in due if node not in held_by_am]
            silence = self.reachability.silence() if self.reachability else fallback.holds_none()
        return [
            fallback.event(node, since, silence, self._silenced(node, known, now))
            for node, since in due
        ]

    async def fallback_preview(self, node: str, deadline: Deadline) -> tuple[AlertEvent, str]:
        """The event the fallback would judge ``node`` on now, silences included, whether or not
        its window has run yet (``nodefence explain --no-alert``), and when it would be due."""
        not_ready = await self.reader.not_ready_nodes(deadline)
        now = self.kube.server_clock.now() or self.clock()
        after = self.policy.cluster.fallback_after_seconds
        known = await self._silences(now, deadline) if self.alertmanager is not None else NOTHING
        silence = fallback.not_configured()
        if self.alertmanager is not None:
            silence = self.reachability.silence() if self.reachability else fallback.holds_none()
        since = not_ready.get(node)
        if after <= 0:
            due = "the fallback is off (cluster.fallback_after_seconds 0)"
        elif node not in not_ready:
            due = "the node is Ready: the fallback judges it only once it is NotReady"
        elif since is None:
            due = "its NotReady time is unknown: the fallback never judges it"
        else:
            due = f"the fallback judges it from {instant(since + timedelta(seconds=after))}"
        event = fallback.event(node, since or now, silence, self._silenced(node, known, now))
        return event, due

    async def silences_held(self, deadline: Deadline) -> Known:
        """The silences that hold nodes of this cluster now, as the fallback would take them
        (``nodefence status``): read from Alertmanager, or as last read while it cannot be."""
        if self.alertmanager is None:
            return NOTHING
        now = self.kube.server_clock.now() or self.clock()
        return await self._silences(now, deadline)

    async def _silences(self, now: datetime, deadline: Deadline) -> Known:
        """Alertmanager's silences that could hold a node of this cluster: as it answers now,
        kept for every replica; while it cannot be asked, as it last answered (a silence holds
        through Alertmanager's outage until it ends)."""
        assert self.alertmanager is not None
        config = self.alertmanager

        async def ask() -> Known:
            answer = await active_silences(config, observe=self.metrics.alertmanager_request)
            kept = relevant(answer, self.alert_names, self.node_labels, config.cluster_labels)
            return Known(kept, now, live=True)

        read = await self._ask(ask, NOTHING)
        if self.silences is None:
            return read
        if read.live:
            await self.silences.keep(read.silences, now, deadline)
            return read
        return await self.silences.recalled(now, deadline)

    def _silenced(self, node: str, known: Known, now: datetime) -> str:
        """The words of the silence that holds ``node``, or "" when none does."""
        assert self.alertmanager is not None or not known.silences
        cluster = self.alertmanager.cluster_labels if self.alertmanager is not None else {}
        labelsets = silences.alert_labels(node, self.alert_names, self.node_labels, cluster)
        holder = silences.holding(known.silences, labelsets, now)
        return holder.words() + known.source() if holder is not None else ""

    async def _ask_alertmanager(self, query: Callable[..., Awaitable[T]], unanswered: T) -> T:
        """One question to Alertmanager's API about the handled node alerts, its outcome kept
        by ``reachability``; ``unanswered`` when it cannot be asked."""
        assert self.alertmanager is not None
        config = self.alertmanager
        alerts = self.policy.alerts
        return await self._ask(
            lambda: query(
                config, alerts.names, alerts.node_labels, observe=self.metrics.alertmanager_request
            ),
            unanswered,
        )

    async def _ask(self, question: Callable[[], Awaitable[T]], unanswered: T) -> T:
        """Any question to Alertmanager's API, its outcome kept by ``reachability``."""
        try:
            answer = await question()
        except AlertmanagerUnavailableError as exc:
            if self.reachability is not None:
                await self.reachability.failed(str(exc))
            else:
                log.warning("alertmanager_unavailable", error=str(exc))
            return unanswered
        if self.reachability is not None:
            self.reachability.answered()
        return answer

    async def _active_alerts(self) -> list[AlertEvent]:
        """The node alerts Alertmanager still holds active: a fence refused for a passing reason
        (too early, budget full, storm cooldown) is judged again within one reconcile period,
        on every guard, instead of at Alertmanager's next repeat. Alertmanager being down only
        means that retry waits; the rest of the pass goes on."""
        if self.alertmanager is None:
            return []
        none: list[AlertEvent] = []
        return await self._ask_alertmanager(active_alerts, none)
