"""The imperative shell around the engine: read facts, decide, act, record.

One alert event goes through: read live facts -> ``decide`` (pure) -> execute the actions, each
with its wire precondition -> Events on the Node, a log line, metrics. The fence step runs under
the cluster-wide lock and re-reads the facts inside it, so the decision that is acted on is the
one made on the freshest state; a precondition failure (the node changed under us) loops back to
reading and deciding instead of forcing the write.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Protocol

import structlog

from nodefence.actions.executor import ActionResult, Executor, Outcome
from nodefence.engine.alerts import match_rule
from nodefence.engine.decide import decide, decide_reconcile
from nodefence.engine.model import (
    AlertEvent,
    AlertStatus,
    Approval,
    ClusterFacts,
    Decision,
    Facts,
    FenceAction,
    PurgePodAction,
    UnfenceAction,
    Verdict,
)
from nodefence.engine.render import describe
from nodefence.engine.volumes import (
    AUTOMATIC_DETACH_FROM,
    VolumeAttachmentFacts,
    plan_volume_release,
    server_minor,
)
from nodefence.errors import ClusterUnavailableError
from nodefence.kube.client import Deadline, KubeClient, KubeError
from nodefence.kube.convert import node_facts, volume_attachment_facts
from nodefence.kube.events import EventRecorder
from nodefence.kube.facts import PAUSE_REFRESH_SECONDS, FactsReader, Snapshot
from nodefence.kube.lock import FenceLock
from nodefence.observability.metrics import Metrics
from nodefence.policy import Policy, Rule
from nodefence.power import probe_power

log = structlog.get_logger(__name__)

MAX_DECIDE_ATTEMPTS = 5
FENCED_GAUGE_SECONDS = 60.0
CLOSE_WAIT_SECONDS = 5.0
SETTLE_POLL_SECONDS = 0.2


def utcnow() -> datetime:
    return datetime.now(UTC)


class FenceNotifier(Protocol):
    """Tells people (Slack) about fences and unfences that were actually written."""

    async def notify(self, decision: Decision, results: list[ActionResult]) -> None:
        """Best effort: a notification that fails must not fail the action it reports."""


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
    lock_ttl_seconds: int = 15


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
    ) -> None:
        self.kube = kube
        self.policy = policy
        self.metrics = metrics
        self.options = options or PipelineOptions()
        self.clock = clock
        self.reader = FactsReader(kube, self.options.namespace)
        self.executor = Executor(kube, purge_concurrency=self.options.purge_concurrency)
        self.events = EventRecorder(kube, self.options.identity)
        self.lock = FenceLock(
            kube,
            self.options.namespace,
            self.options.identity,
            ttl_seconds=self.options.lock_ttl_seconds,
        )
        self._pause_refresher: asyncio.Task[None] | None = None
        self._closing = False
        self.approvals: ApprovalRequester | None = None
        self.notifier: FenceNotifier | None = None
        self.alert_names = list(policy.alerts.names)
        self.node_labels = list(policy.alerts.node_labels)

    async def close(self) -> None:
        """Stop the background refresh, then the client. The loop also checks ``_closing``:
        Python 3.11's ``wait_for`` can swallow a cancel that races a reply, so cancelling alone
        could leave it running and shutdown waiting on it."""
        self._closing = True
        if self._pause_refresher is not None:
            self._pause_refresher.cancel()
            await asyncio.wait({self._pause_refresher}, timeout=CLOSE_WAIT_SECONDS)
        await self.kube.close()

    def _keep_pause_fresh(self) -> None:
        """While serving, re-read the pause switch in the background, off the request path, and
        now and then publish which nodes nodefence has fenced (from the ledgers, so a restarted
        replica reports them too)."""
        if self._pause_refresher is not None or self._closing:
            return

        async def refresh() -> None:
            since_gauges = FENCED_GAUGE_SECONDS
            while not self._closing:
                try:
                    if since_gauges >= FENCED_GAUGE_SECONDS:
                        since_gauges = 0.0
                        await self._publish_fenced(Deadline(PAUSE_REFRESH_SECONDS))
                    await self.reader.refresh_pause(Deadline(PAUSE_REFRESH_SECONDS))
                except (ClusterUnavailableError, KubeError) as exc:
                    log.warning("background_refresh_failed", error=str(exc))
                await asyncio.sleep(PAUSE_REFRESH_SECONDS)
                since_gauges += PAUSE_REFRESH_SECONDS

        self._pause_refresher = asyncio.create_task(refresh(), name="background-refresh")

    async def _publish_fenced(self, deadline: Deadline) -> None:
        nodes = await self.kube.list_nodes(deadline)
        fenced = {}
        for facts in map(node_facts, nodes):
            ledger = facts.ledger
            if ledger.fenced and ledger.node_uid == facts.uid and ledger.fenced_at is not None:
                fenced[facts.name] = ledger.fenced_at.timestamp()
        self.metrics.fenced_nodes_are(fenced)

    async def ready(self) -> tuple[bool, str]:
        """Reachable now, not once: the probe asks the API server every time it is called."""
        self._keep_pause_fresh()
        try:
            info = await self.kube.version(Deadline(3.0))
        except (ClusterUnavailableError, KubeError) as exc:
            return False, str(exc)
        return True, f"Kubernetes API reachable ({info.get('gitVersion', 'unknown version')})"

    # ------------------------------------------------------------------ alerts
    async def handle_events(self, events: list[AlertEvent]) -> list[Decision]:
        """Events for different nodes run concurrently; events for one node run in order."""
        deadline = Deadline(self.options.deadline_seconds)
        self._keep_pause_fresh()
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
            self._log(decision)
            return decision
        snapshot, decision = await self._read_and_decide(event, deadline, approval)
        if decision.dry_run:
            self._log(decision)
            return decision
        if decision.verdict is Verdict.AWAIT_APPROVAL and self.approvals is not None:
            await self.approvals.request(decision, snapshot, deadline)
        if event.status is AlertStatus.FIRING:
            decision, results = await self._fence_and_purge(event, decision, deadline, approval)
        else:
            decision, results = await self._unfence(event, decision, deadline)
        await self._record(decision, results, _uid(snapshot), deadline)
        return decision

    async def _read_and_decide(
        self, event: AlertEvent, deadline: Deadline, approval: Approval | None = None
    ) -> tuple[Snapshot, Decision]:
        """Decide without the node's Lease first: for a node already handled that settles it (a
        repeated alert costs two reads). Anything else is decided again with the Lease, and, for
        a rule that asks for it, with proof that the machine is powered off."""
        assert event.node is not None
        snapshot = await self.reader.read(event.node, deadline, with_lease=False)
        decision = decide(event, snapshot.facts, self.policy, self.clock(), approval=approval)
        if _settled_without_lease(decision, snapshot):
            return snapshot, decision
        snapshot = await self.reader.with_lease(snapshot, deadline)
        snapshot = await self._with_power(event, snapshot)
        decision = decide(event, snapshot.facts, self.policy, self.clock(), approval=approval)
        return snapshot, decision

    async def _with_power(self, event: AlertEvent, snapshot: Snapshot) -> Snapshot:
        node = snapshot.facts.node
        if node is None or event.status is not AlertStatus.FIRING:
            return snapshot
        rule = match_rule(self.policy, event, node)
        if rule is None or rule.power_off_proof.mode != "http":
            return snapshot
        proof = rule.power_off_proof
        evidence = await probe_power(proof.url, node.name, proof.timeout_seconds)
        facts = dataclasses.replace(snapshot.facts, power=evidence)
        return dataclasses.replace(snapshot, facts=facts)

    async def _fence_and_purge(
        self,
        event: AlertEvent,
        decision: Decision,
        deadline: Deadline,
        approval: Approval | None = None,
    ) -> tuple[Decision, list[ActionResult]]:
        results: list[ActionResult] = []
        if any(isinstance(a, FenceAction) for a in decision.actions):
            async with self.lock.held(deadline):
                _snapshot, decision, fence_result = await self._decide_and_write(
                    event, deadline, self._fence_write, approval=approval
                )
            if fence_result is not None:
                results.append(fence_result)
                if fence_result.outcome is not Outcome.DONE:
                    return decision, results
        purge = [a for a in decision.actions if isinstance(a, PurgePodAction)]
        results.extend(await self.executor.purge(purge, deadline))
        if decision.verdict is Verdict.FENCE:
            results.extend(await self._settle(event, deadline))
        if decision.verdict in (Verdict.FENCE, Verdict.PURGE):
            decision, released = await self._release_volumes(decision, deadline)
            results.extend(released)
        return decision, results

    async def _release_volumes(
        self, decision: Decision, deadline: Deadline
    ) -> tuple[Decision, list[ActionResult]]:
        """Say whether the cluster frees the node's volumes; where it does not and the rule
        allows it, delete the node's VolumeAttachments once its pods are gone."""
        if decision.node is None:
            return decision, []
        rule = self.policy.rule_named(decision.rule) or Rule()
        minor = server_minor(self.reader.server_version)
        attachments: tuple[VolumeAttachmentFacts, ...] = ()
        snapshot = await self.reader.read(decision.node, deadline, with_lease=False)
        if minor is None or minor < AUTOMATIC_DETACH_FROM:
            attachments = tuple(
                volume_attachment_facts(a)
                for a in await self.kube.list_volume_attachments(deadline)
            )
        plan = plan_volume_release(
            snapshot.facts, attachments, cleanup_allowed=rule.volume_attachment_cleanup
        )
        results = [await self.executor.release_volume(a.name, deadline) for a in plan.delete]
        return dataclasses.replace(decision, reasons=(*decision.reasons, plan.reason)), results

    async def _fence_write(
        self, snapshot: Snapshot, decision: Decision, deadline: Deadline
    ) -> ActionResult | None:
        action = next((a for a in decision.actions if isinstance(a, FenceAction)), None)
        if action is None or snapshot.node is None:
            return None
        return await self.executor.fence(snapshot.node, action, deadline)

    async def _unfence_write(
        self, snapshot: Snapshot, decision: Decision, deadline: Deadline
    ) -> ActionResult | None:
        action = next((a for a in decision.actions if isinstance(a, UnfenceAction)), None)
        if action is None or snapshot.node is None or snapshot.facts.node is None:
            return None
        effect = snapshot.facts.node.ledger.taint_effect
        return await self.executor.unfence(snapshot.node, action, effect, deadline)

    async def _decide_and_write(
        self,
        event: AlertEvent | None,
        deadline: Deadline,
        write: Callable[[Snapshot, Decision, Deadline], Awaitable[ActionResult | None]],
        node: str | None = None,
        approval: Approval | None = None,
    ) -> tuple[Snapshot, Decision, ActionResult | None]:
        """Re-read, re-decide, write; on a failed precondition do it all again (bounded)."""
        name = event.node if event is not None else node
        assert name is not None
        result: ActionResult | None = None
        for _attempt in range(MAX_DECIDE_ATTEMPTS):
            if event is not None:
                snapshot, decision = await self._read_and_decide(event, deadline, approval)
            else:
                snapshot = await self.reader.read(name, deadline)
                decision = decide_reconcile(snapshot.facts, self.policy, self.clock())
            result = await write(snapshot, decision, deadline)
            if result is None or result.outcome is not Outcome.CONFLICT:
                return snapshot, decision, result
        raise ClusterUnavailableError(
            f"node {name} kept changing while nodefence tried to write it"
        )

    async def _settle(self, event: AlertEvent, deadline: Deadline) -> list[ActionResult]:
        """After the taint, the taint manager evicts the remaining pods; on a dead node they
        hang Terminating too. Purge them while the request still has time; whatever is left is
        the reconcile pass's to finish."""
        assert event.node is not None
        results: list[ActionResult] = []
        settle = Deadline(min(self.options.settle_seconds, deadline.remaining))
        while not settle.expired:
            snapshot = await self.reader.read(event.node, deadline)
            decision = decide(event, snapshot.facts, self.policy, self.clock())
            purge = [a for a in decision.actions if isinstance(a, PurgePodAction)]
            if purge:
                results.extend(await self.executor.purge(purge, deadline))
            if not any(not p.terminating for p in snapshot.facts.pods) and not purge:
                break
            await asyncio.sleep(SETTLE_POLL_SECONDS)
        return results

    async def _unfence(
        self, event: AlertEvent, decision: Decision, deadline: Deadline
    ) -> tuple[Decision, list[ActionResult]]:
        if not any(isinstance(a, UnfenceAction) for a in decision.actions):
            return decision, []
        _snapshot, decision, result = await self._decide_and_write(
            event, deadline, self._unfence_write
        )
        return decision, [result] if result is not None else []

    # --------------------------------------------------------------- reconcile
    async def reconcile(self) -> list[Decision]:
        """Finish what lost or failed deliveries left: purge leftovers, unfence recovered nodes."""
        deadline = Deadline(self.options.deadline_seconds)
        await self.reader.server_version_string(deadline)
        _cluster, nodes = await self.reader.cluster(deadline)
        decisions: list[Decision] = []
        for raw in nodes:
            annotations = raw["metadata"].get("annotations") or {}
            if not any(key.startswith("nodefence.io/fenced") for key in annotations):
                continue
            name = raw["metadata"]["name"]
            snapshot = await self.reader.read(name, deadline)
            decision = decide_reconcile(snapshot.facts, self.policy, self.clock())
            results: list[ActionResult] = []
            if not decision.dry_run:
                if any(isinstance(a, UnfenceAction) for a in decision.actions):
                    _s, decision, result = await self._decide_and_write(
                        None, deadline, self._unfence_write, node=name
                    )
                    results = [result] if result is not None else []
                else:
                    purge = [a for a in decision.actions if isinstance(a, PurgePodAction)]
                    results = await self.executor.purge(purge, deadline)
                    if snapshot.facts.node is not None and snapshot.facts.node.ledger.fenced:
                        decision, released = await self._release_volumes(decision, deadline)
                        results.extend(released)
                await self._record(decision, results, _uid(snapshot), deadline)
            else:
                self._log(decision)
            decisions.append(decision)
        return decisions

    # ------------------------------------------------------------------ record
    async def _record(
        self, decision: Decision, results: list[ActionResult], node_uid: str, deadline: Deadline
    ) -> None:
        self._log(decision, results)
        if self.notifier is not None:
            await self.notifier.notify(decision, results)
        for result in results:
            self.metrics.action_executed(result.action, result.outcome.value)
            if result.outcome is Outcome.DONE and decision.node is not None:
                if result.action == "fence":
                    self.metrics.node_fenced(decision.node, self.clock().timestamp())
                elif result.action == "unfence":
                    self.metrics.node_unfenced(decision.node)
        purged = sum(1 for r in results if r.action == "purge" and r.outcome is Outcome.DONE)
        if purged:
            self.metrics.pod_purged(purged)
        event = _node_event(decision, results, purged)
        if event is None or decision.node is None:
            return
        reason, message, warning = event
        refusal = reason in REFUSAL_REASONS
        blocking = next((r.guard for r in decision.reasons if not r.passed), "")
        await self.events.node_event(
            dedupe_key=f"{decision.status}:{blocking}" if refusal else None,
            node=decision.node,
            node_uid=node_uid,
            reason=reason,
            message=message,
            warning=warning,
            deadline=deadline,
        )

    def _log(self, decision: Decision, results: list[ActionResult] | None = None) -> None:
        blocking = next((r.guard for r in decision.reasons if not r.passed), "ok")
        log.info(
            "decision",
            node=decision.node,
            alertname=decision.alertname,
            fingerprint=decision.fingerprint,
            status=decision.status,
            verdict=decision.verdict.value,
            dry_run=decision.dry_run,
            reasons=[r.message for r in decision.reasons],
            blocked_by=None if blocking == "ok" else blocking,
            results=[r.as_dict() for r in results or []],
            summary=describe(decision),
        )


def _settled_without_lease(decision: Decision, snapshot: Snapshot) -> bool:
    """Nothing to do for a node nodefence already fenced, or a node that does not exist: the
    Lease could not change that. Everything else needs it."""
    if snapshot.facts.node is None:
        return True
    return (
        decision.verdict is Verdict.NOOP
        and snapshot.facts.node.ledger.fenced
        and all(r.passed for r in decision.reasons)
    )


REFUSAL_REASONS = frozenset(
    {"FenceRefused", "UnfenceRefused", "UnfenceDeferred", "FenceAwaitingApproval"}
)


def _uid(snapshot: Snapshot) -> str:
    return snapshot.facts.node.uid if snapshot.facts.node is not None else ""


def _node_event(
    decision: Decision, results: list[ActionResult], purged: int
) -> tuple[str, str, bool] | None:
    """The Event an operator sees in ``kubectl describe node``; None when nothing happened that
    is worth a line (a repeated alert for a node already handled)."""
    fenced = any(r.action == "fence" and r.outcome is Outcome.DONE for r in results)
    released = sum(1 for r in results if r.action == "release-volume" and r.outcome is Outcome.DONE)
    unfenced = any(r.action == "unfence" and r.outcome is Outcome.DONE for r in results)
    failed = [r for r in results if r.outcome is Outcome.FAILED]
    blocked = [r for r in decision.reasons if not r.passed]
    if fenced:
        volumes = f", {released} VolumeAttachment(s) deleted" if released else ""
        return (
            "NodeFenced",
            f"out-of-service taint applied; {purged} pods purged{volumes}. " + decision.summary,
            True,
        )
    if unfenced:
        return ("NodeUnfenced", "out-of-service taint removed: " + decision.summary, False)
    if failed:
        details = "; ".join(f"{r.target}: {r.detail}" for r in failed[:5])
        return ("NodefenceActionFailed", details, True)
    if purged:
        return ("PodsPurged", f"{purged} pods stuck Terminating deleted with grace 0", True)
    if released:
        return (
            "VolumesReleased",
            f"{released} VolumeAttachment(s) of the fenced node deleted",
            True,
        )
    if decision.verdict is Verdict.DEFERRED:
        return ("UnfenceDeferred", decision.summary, False)
    if decision.verdict in (Verdict.NOOP, Verdict.SKIP, Verdict.AWAIT_APPROVAL) and blocked:
        reason = "FenceRefused" if decision.status == AlertStatus.FIRING.value else "UnfenceRefused"
        if decision.verdict is Verdict.AWAIT_APPROVAL:
            reason = "FenceAwaitingApproval"
        return (reason, decision.summary, True)
    return None
