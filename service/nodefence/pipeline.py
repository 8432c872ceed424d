"""The imperative shell around the engine: one loop of read, decide, commit.

Each event: read a snapshot (node, Lease, pods, fence record, cluster counts, the API server's
clock) -> ``decide`` (pure) -> commit the decision's actions in order, each carrying its own
precondition (the record version for a claim, uid and resourceVersion for the node, UIDs for
pods) -> on a failed precondition, read and decide again. No lock is held between replicas: the
claim written on the record version the decision read is what keeps two replicas from both
spending the last budget slot, however slow either is. Then Events on the Node, a log line,
metrics.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Protocol

import structlog

from nodefence.actions.executor import ActionResult, Executor, Outcome, taint_written
from nodefence.actions.power_binding import bind_machine
from nodefence.actions.record import RecordWriter
from nodefence.alertmanager.client import AlertmanagerUnavailableError, active_alerts
from nodefence.alertmanager.config import AlertmanagerConfig
from nodefence.engine import mirror
from nodefence.engine import record as fence_record
from nodefence.engine.decide import decide, decide_reconcile
from nodefence.engine.model import (
    AlertEvent,
    Approval,
    ClaimAction,
    ClusterFacts,
    ConfirmAction,
    Decision,
    Facts,
    FenceAction,
    ObserveReadyAction,
    PowerAction,
    PowerEvidence,
    PurgePodAction,
    ReleaseAction,
    UnfenceAction,
    Verdict,
)
from nodefence.errors import ClusterUnavailableError
from nodefence.fencing.inventory import Inventory
from nodefence.kube.client import Deadline, Json, KubeClient, KubeError
from nodefence.kube.events import EventRecorder
from nodefence.kube.facts import FactsReader, Snapshot
from nodefence.observability.metrics import Metrics
from nodefence.policy import Policy
from nodefence.shell.power_step import PowerStep
from nodefence.shell.proof import ExternalProof
from nodefence.shell.refresh import BackgroundRefresh, read_fence_record
from nodefence.shell.report import FenceNotifier, Reporter
from nodefence.shell.settle import Settle
from nodefence.shell.volumes import VolumeRelease

log = structlog.get_logger(__name__)

MAX_DECIDE_ATTEMPTS = 5


def utcnow() -> datetime:
    return datetime.now(UTC)


class ApprovalRequester(Protocol):
    """Asks a person to approve a fence (Slack); the pipeline calls it for ``await-approval``."""

    async def request(self, decision: Decision, snapshot: Snapshot, deadline: Deadline) -> None:
        """Post the request unless one is already pending; raise ClusterUnavailableError (or a
        subclass) when the approval channel is down, so the alert is retried."""


@dataclasses.dataclass(frozen=True)
class PipelineOptions:
    namespace: str = "nodefence"
    identity: str = "nodefence"
    deadline_seconds: float = 20.0
    settle_seconds: float = 3.0
    purge_concurrency: int = 16


@dataclasses.dataclass
class _Commit:
    results: list[ActionResult]
    # What the BMC said in this commit: the proof the next decision is made on.
    power: PowerEvidence | None = None
    # Read and decide again: a precondition failed, or only housekeeping was done (a stale
    # entry let go, a Ready sighting recorded) and the node is now to be judged on what is left.
    again: bool = False
    fenced: bool = False


Decider = Callable[[Snapshot], Decision]

HOUSEKEEPING = (ReleaseAction, ObserveReadyAction)


class Pipeline:
    """Stateless: everything it knows comes from the cluster at the time of each request."""

    def __init__(
        self,
        kube: KubeClient,
        policy: Policy,
        metrics: Metrics,
        options: PipelineOptions | None = None,
        *,
        clock: Callable[[], datetime] = utcnow,
        inventory: Inventory | None = None,
        alertmanager: AlertmanagerConfig | None = None,
    ) -> None:
        self.kube = kube
        self.inventory = inventory
        self.alertmanager = alertmanager
        self.policy = policy
        self.metrics = metrics
        self.options = options or PipelineOptions()
        self.clock = clock
        self.reader = FactsReader(kube, self.options.namespace)
        self.executor = Executor(kube, purge_concurrency=self.options.purge_concurrency)
        keep = max((r.flap_window_seconds for r in policy.rules), default=0)
        self.records = RecordWriter(
            kube, self.options.namespace, self.options.identity, keep_releases_seconds=keep
        )
        self.events = EventRecorder(kube, self.options.identity)
        self.reporter = Reporter(metrics, self.events, clock)
        self.power_step = PowerStep(policy, inventory, self.records, self.reporter)
        self.proof = ExternalProof(self.reader, policy)
        self.settle = Settle(self.reader, self.executor)
        self.volumes = VolumeRelease(kube, self.reader, self.executor, policy)
        self.refresh = BackgroundRefresh(self.reader, metrics)
        self.approvals: ApprovalRequester | None = None
        self.alert_names = list(policy.alerts.names)
        self.node_labels = list(policy.alerts.node_labels)

    @property
    def notifier(self) -> FenceNotifier | None:
        return self.reporter.notifier

    @notifier.setter
    def notifier(self, notifier: FenceNotifier | None) -> None:
        self.reporter.notifier = notifier

    async def close(self) -> None:
        """Stop the background refresh, then the client."""
        await self.refresh.stop()
        await self.reader.close()
        await self.kube.close()

    async def read_record(self, deadline: Deadline) -> fence_record.FenceRecord:
        return await read_fence_record(self.reader, deadline)

    async def ready(self) -> tuple[bool, str]:
        """Reachable now, not once: the probe asks the API server every time it is called.
        Only a serving receiver is probed, so this is also where the node index starts."""
        self.refresh.start()
        self.reader.follow_nodes()
        try:
            info = await self.kube.version(Deadline(3.0))
        except (ClusterUnavailableError, KubeError) as exc:
            return False, str(exc)
        return True, f"Kubernetes API reachable ({info.get('gitVersion', 'unknown version')})"

    # ------------------------------------------------------------------ alerts
    async def handle_events(self, events: list[AlertEvent]) -> list[Decision]:
        """Events for different nodes run concurrently; events for one node run in order."""
        deadline = Deadline(self.options.deadline_seconds)
        self.refresh.start()
        await self.reader.server_version_string(deadline)
        by_node: dict[str | None, list[int]] = {}
        for index, event in enumerate(events):
            by_node.setdefault(event.node, []).append(index)
        results: list[Decision | None] = [None] * len(events)

        async def run_node(indexes: list[int]) -> None:
            for index in indexes:
                results[index] = await self.handle_event(events[index], deadline)

        await asyncio.gather(*(run_node(ix) for ix in by_node.values()))
        return [d for d in results if d is not None]

    async def handle_event(
        self, event: AlertEvent, deadline: Deadline, *, approval: Approval | None = None
    ) -> Decision:
        """One event; ``approval`` is a person's answer, and every other guard still applies."""
        if event.node is None or event.alertname not in self.alert_names:
            empty = Facts(None, None, (), ClusterFacts(total_nodes=0, ready_nodes=0))
            decision = decide(event, empty, self.policy, self.clock())
            self.reporter.log_decision(decision)
            return decision
        await self.reader.server_version_string(deadline)

        async def with_power(snapshot: Snapshot) -> Snapshot:
            return await self.proof.read(event, snapshot, deadline)

        token = self.records.new_token()

        def decider(snapshot: Snapshot) -> Decision:
            return decide(
                event,
                snapshot.facts,
                self.policy,
                snapshot.now,
                approval=approval,
                own_claim=token,
            )

        decision, results, snapshot = await self._run(
            event.node, decider, deadline, prepare=with_power, token=token
        )
        if decision.dry_run:
            return decision
        if decision.verdict is Verdict.AWAIT_APPROVAL and self.approvals is not None:
            await self.approvals.request(decision, snapshot, deadline)
        if decision.verdict is Verdict.FENCE and _fenced(results):
            results.extend(
                await self.settle.run(event.node, decider, deadline, self.options.settle_seconds)
            )
            if self._reboots(decision):
                # The purge is done (or as done as this request can make it): one more turn of
                # the loop powers the machine on again, once, through its BMC.
                _again, more, _snapshot = await self._run(event.node, decider, deadline)
                results.extend(more)
        decision, released = await self.volumes.release(decision, _uid(snapshot), deadline)
        results.extend(released)
        return await self.reporter.report(
            decision, results, _uid(snapshot), deadline, fenced=_fenced(results)
        )

    def _reboots(self, decision: Decision) -> bool:
        rule = self.policy.rule_named(decision.rule)
        fencing = rule.fencing if rule is not None else None
        return fencing is not None and fencing.powers and fencing.action == "reboot"

    async def _run(
        self,
        name: str,
        decider: Decider,
        deadline: Deadline,
        *,
        prepare: Callable[[Snapshot], Awaitable[Snapshot]] | None = None,
        token: str = "",
    ) -> tuple[Decision, list[ActionResult], Snapshot]:
        """Read, decide, commit; on a failed precondition (or after housekeeping) again.
        ``token`` names any claim this request writes, across its attempts."""
        token = token or self.records.new_token()
        results: list[ActionResult] = []
        power: PowerEvidence | None = None
        for _attempt in range(MAX_DECIDE_ATTEMPTS):
            snapshot = bind_machine(await self.reader.read(name, deadline), self.inventory)
            if prepare is not None:
                snapshot = await prepare(snapshot)
            if power is not None:
                # Timed on the API server's clock by the first read after the BMC answered.
                evidence = dataclasses.replace(power, at=power.at or snapshot.server_time)
                power = evidence
                facts = dataclasses.replace(snapshot.facts, power=evidence)
                snapshot = dataclasses.replace(snapshot, facts=facts)
            decision = decider(snapshot)
            if decision.dry_run or not decision.actions:
                if decision.dry_run:
                    self.reporter.log_decision(decision)
                return decision, results, snapshot
            commit = await self._commit(decision, snapshot, token, deadline)
            results.extend(commit.results)
            power = commit.power or power
            if not commit.again:
                return decision, results, snapshot
        raise ClusterUnavailableError(
            f"node {name} kept changing while nodefence tried to write it"
        )

    async def _commit(
        self, decision: Decision, snapshot: Snapshot, token: str, deadline: Deadline
    ) -> _Commit:
        """The decision's actions in order; each step's precondition is the previous step's
        result. A claim whose taint write lost a race is judged again on the next read (and
        completed or rolled back by this request); one whose taint write failed outright is
        rolled back at once. So a half-written fence is only left by a crash, and the next
        delivery or the reconcile pass completes or removes it."""
        results: list[ActionResult] = []
        claim: ClaimAction | None = None
        fenced_at: datetime | None = None
        fenced_node: Json | None = None
        fenced_effect = ""
        claimed: fence_record.FenceEntry | None = None
        purges = [a for a in decision.actions if isinstance(a, PurgePodAction)]
        for action in decision.actions:
            if isinstance(action, PurgePodAction):
                continue
            result: ActionResult
            if isinstance(action, ClaimAction):
                result = await self.records.claim(action, snapshot.record_data, token, deadline)
                claim = action
                claimed = dataclasses.replace(action.entry, claimed_by=token)
            elif isinstance(action, FenceAction):
                assert snapshot.node is not None
                written = await self.executor.fence(snapshot.node, action, deadline)
                result, fenced_at, fenced_node = written.result, written.server_time, written.body
                fenced_effect = action.effect
                failed = result.outcome not in (Outcome.DONE, Outcome.CONFLICT)
                if failed and claim is not None:
                    results.append(result)
                    results.append(await self._roll_back(claim, token, result, deadline))
                    return _Commit(results)
            elif isinstance(action, ConfirmAction):
                result = await self.records.confirm(
                    action,
                    token,
                    fenced_at,
                    deadline,
                    taint=taint_written(fenced_node, fenced_effect),
                )
                if result.outcome is Outcome.SKIPPED and fenced_node is not None:
                    results.append(result)
                    results.append(
                        await self._undo_taint(action, fenced_node, fenced_effect, deadline)
                    )
                    return _Commit(results)
            elif isinstance(action, UnfenceAction):
                assert snapshot.node is not None
                result = (await self.executor.unfence(snapshot.node, action, deadline)).result
            elif isinstance(action, ReleaseAction):
                result = await self.records.release(action, deadline)
            elif isinstance(action, PowerAction):
                # S7: the power step moves on only the entry this very commit claimed.
                step = action
                if action.entry is None and claimed is not None:
                    step = dataclasses.replace(action, entry=claimed)
                result, evidence = await self.power_step.run(
                    step, decision, token, deadline, facts=snapshot.facts
                )
                results.append(result)
                if result.outcome is Outcome.CONFLICT:
                    return _Commit(results, again=True)
                if action.operation == "on" or evidence is None:
                    return _Commit(results)
                return _Commit(results, power=evidence, again=True)
            else:
                result = await self.records.observe(action, deadline)
            results.append(result)
            if result.outcome is Outcome.CONFLICT:
                return _Commit(results, again=True)
            if result.outcome is not Outcome.DONE and not isinstance(action, HOUSEKEEPING):
                return _Commit(results)
        results.extend(await self.executor.purge(purges, deadline))
        housekeeping = all(isinstance(a, HOUSEKEEPING) for a in decision.actions)
        done = all(r.outcome in (Outcome.DONE, Outcome.SKIPPED) for r in results)
        return _Commit(results, again=housekeeping and done, fenced=fenced_at is not None)

    async def _roll_back(
        self, claim: ClaimAction, token: str, failed: ActionResult, deadline: Deadline
    ) -> ActionResult:
        why = f"the taint write did not go through ({failed.outcome.value}: {failed.detail})"
        entry = claim.entry
        return await self.records.release(
            ReleaseAction(entry.node, entry.uid, why, token, remember=False), deadline
        )

    async def _undo_taint(
        self, confirm: ConfirmAction, written: Json, effect: str, deadline: Deadline
    ) -> ActionResult:
        """The claim vanished while its taint was being written (it was taken for stale): the
        taint has no entry behind it, so the replica that wrote it takes it off again, on the
        very node version it wrote, rather than leave a taint nobody owns."""
        meta = written.get("metadata") or {}
        undo = UnfenceAction(
            node=confirm.node,
            node_uid=confirm.node_uid,
            resource_version=str(meta.get("resourceVersion") or ""),
            effect=effect,
            annotations={},
            remove_annotations=mirror.FENCE_KEYS,
        )
        result = (await self.executor.unfence(written, undo, deadline)).result
        return dataclasses.replace(
            result, action="undo-fence", detail=result.detail or "claim lost; taint taken off"
        )

    # --------------------------------------------------------------- reconcile
    async def reconcile(self) -> list[Decision]:
        """Finish what lost or failed deliveries left, for every node the fence record holds:
        purge leftovers, unfence recovered nodes, complete or roll back half-written fences."""
        deadline = Deadline(self.options.deadline_seconds)
        await self.reader.server_version_string(deadline)
        held = await self.read_record(deadline)
        for key in held.unreadable:
            log.warning("fence_record_unreadable", key=key)
        decisions: list[Decision] = []
        for entry in held.entries:
            name = entry.node

            def decider(snapshot: Snapshot, name: str = name) -> Decision:
                return decide_reconcile(snapshot.facts, self.policy, snapshot.now, name)

            decision, results, snapshot = await self._run(name, decider, deadline)
            if not decision.dry_run:
                decision, released = await self.volumes.release(
                    decision, _uid(snapshot) or entry.uid, deadline
                )
                results.extend(released)
                decision = await self.reporter.report(
                    decision,
                    results,
                    _uid(snapshot) or entry.uid,
                    deadline,
                    fenced=_fenced(results),
                )
            decisions.append(decision)
        handled = {entry.node for entry in held.entries}
        for event in await self._active_alerts():
            if event.node is None or event.node in handled or deadline.expired:
                continue
            handled.add(event.node)
            decisions.append(await self.handle_event(event, deadline))
        return decisions

    async def _active_alerts(self) -> list[AlertEvent]:
        """The node alerts Alertmanager still holds active: a fence refused for a passing reason
        (too early, budget full, storm cooldown) is judged again within one reconcile period,
        on every guard, instead of at Alertmanager's next repeat. Alertmanager being down only
        means that retry waits; the rest of the pass goes on."""
        if self.alertmanager is None:
            return []
        try:
            return await active_alerts(
                self.alertmanager, self.policy.alerts.names, self.policy.alerts.node_labels
            )
        except AlertmanagerUnavailableError as exc:
            log.warning("alertmanager_unavailable", error=str(exc))
            return []


def _fenced(results: list[ActionResult]) -> bool:
    return any(r.action == "fence" and r.outcome is Outcome.DONE for r in results)


def _uid(snapshot: Snapshot) -> str:
    return snapshot.facts.node.uid if snapshot.facts.node is not None else ""
