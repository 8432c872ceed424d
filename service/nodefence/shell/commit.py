"""Carrying out one decision's actions, in order, one handler per action type.

Each action carries its own precondition (the record version for a claim, uid and
resourceVersion for the node, UIDs for pods), and each step's precondition is the previous
step's result. A claim whose taint write lost a race is judged again on the next read (and
completed or rolled back by the same request); one whose taint write failed outright is rolled
back at once. So a half-written fence is only left by a crash, and the next delivery or the
reconcile pass completes or removes it.

A new action type in the engine's ``Action`` union needs a handler in ``HANDLERS``; an action
without one is an error, never taken for another kind.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from nodefence.actions.executor import ActionResult, Executor, Outcome, taint_written
from nodefence.actions.fence_record_writer import FenceRecordWriter
from nodefence.engine import mirror
from nodefence.engine import record as fence_record
from nodefence.engine.action_kinds import (
    APPROVAL,
    ASKED,
    REJECTION,
    UNDONE,
    WITHDRAWAL,
    UnknownActionError,
)
from nodefence.engine.model import (
    Action,
    AskApprovalAction,
    ClaimAction,
    ConfirmAction,
    Decision,
    FenceAction,
    ObserveReadyAction,
    PowerAction,
    ProofContradictedAction,
    PurgePodAction,
    RecordApprovalAction,
    RecordRecoveryAction,
    RecordRejectionAction,
    ReleaseAction,
    ReleaseFenceAction,
    ReleaseVolumeAttachmentAction,
    UnfenceAction,
    WithdrawQuestionAction,
)
from nodefence.kube.client import Deadline, Json
from nodefence.kube.facts import Snapshot
from nodefence.shell.approval_requester import ApprovalRequester
from nodefence.shell.power_step import PowerStep

# Writes that tidy the record rather than act on the node: one that did not go through does
# not stop the actions after it.
HOUSEKEEPING = (ReleaseAction, ObserveReadyAction)


@dataclasses.dataclass(frozen=True)
class Committed:
    results: list[ActionResult]
    # Read and decide again: a precondition failed, the BMC's answer was written into the fence
    # record for the next decision to stand on, or only housekeeping was done (a stale entry let
    # go, a Ready sighting recorded) and the node is now to be judged on what is left.
    again: bool = False
    # The out-of-service taint write went through in this commit.
    fenced: bool = False


@dataclasses.dataclass
class _Progress:
    """What this commit's earlier actions wrote, for the actions after them."""

    decision: Decision
    snapshot: Snapshot
    token: str
    deadline: Deadline
    results: list[ActionResult] = dataclasses.field(default_factory=list)
    purges: list[PurgePodAction] = dataclasses.field(default_factory=list)
    volumes: list[ReleaseVolumeAttachmentAction] = dataclasses.field(default_factory=list)
    claim: ClaimAction | None = None
    claimed: fence_record.FenceEntry | None = None
    fenced_at: datetime | None = None
    fenced_node: Json | None = None
    fenced_effect: str = ""
    fenced: bool = False

    def end(self, *, again: bool = False) -> Committed:
        return Committed(self.results, again=again, fenced=self.fenced)


# A handler's answer: a result to judge like any other, the end of this commit, or nothing yet.
Step = ActionResult | Committed | None


class Commit:
    def __init__(
        self,
        records: FenceRecordWriter,
        executor: Executor,
        power_step: PowerStep,
        approvals: ApprovalRequester | None = None,
    ) -> None:
        self.records = records
        self.executor = executor
        self.power_step = power_step
        self.approvals = approvals

    async def __call__(
        self, decision: Decision, snapshot: Snapshot, token: str, deadline: Deadline
    ) -> Committed:
        """The decision's actions in order; ``token`` names the claim this request writes."""
        progress = _Progress(decision, snapshot, token, deadline)
        for action in decision.actions:
            step = await handler_for(action)(self, action, progress)
            if isinstance(step, Committed):
                return step
            if step is None:
                continue
            progress.results.append(step)
            if step.outcome is Outcome.CONFLICT:
                return progress.end(again=True)
            if step.outcome is not Outcome.DONE and not isinstance(action, HOUSEKEEPING):
                return progress.end()
        progress.results.extend(await self.executor.purge(progress.purges, deadline))
        for volume in progress.volumes:
            progress.results.append(
                await self.executor.release_volume(volume.name, volume.uid, deadline)
            )
        housekeeping = all(isinstance(a, HOUSEKEEPING) for a in decision.actions)
        done = all(r.outcome in (Outcome.DONE, Outcome.SKIPPED) for r in progress.results)
        return progress.end(again=housekeeping and done)

    async def _claim(self, action: ClaimAction, at: _Progress) -> Step:
        snapshot = at.snapshot
        result = await self.records.claim(
            action, snapshot.record_data, at.token, at.deadline, metadata=snapshot.record_meta
        )
        at.claim = action
        at.claimed = dataclasses.replace(action.entry, claimed_by=at.token)
        return result

    async def _fence(self, action: FenceAction, at: _Progress) -> Step:
        assert at.snapshot.node is not None
        written = await self.executor.fence(at.snapshot.node, action, at.deadline)
        result = written.result
        at.fenced = result.outcome is Outcome.DONE
        at.fenced_at, at.fenced_node, at.fenced_effect = (
            written.server_time,
            written.body,
            action.effect,
        )
        failed = result.outcome not in (Outcome.DONE, Outcome.CONFLICT)
        if failed and at.claim is not None:
            at.results.append(result)
            at.results.append(await self._roll_back(at.claim, at.token, result, at.deadline))
            return at.end()
        return result

    async def _confirm(self, action: ConfirmAction, at: _Progress) -> Step:
        result = await self.records.confirm(
            action,
            at.token,
            at.fenced_at,
            at.deadline,
            taint=taint_written(at.fenced_node, at.fenced_effect),
        )
        if result.outcome is Outcome.SKIPPED and at.fenced_node is not None:
            at.results.append(result)
            at.results.append(
                await self._undo_taint(action, at.fenced_node, at.fenced_effect, at.deadline)
            )
            return at.end()
        return result

    async def _power(self, action: PowerAction, at: _Progress) -> Step:
        # S7: the power step moves on only the entry this very commit claimed.
        step = action
        if action.entry is None and at.claimed is not None:
            step = dataclasses.replace(action, entry=at.claimed)
        result, read = await self.power_step.run(
            step, at.decision, at.token, at.deadline, facts=at.snapshot.facts
        )
        at.results.append(result)
        if result.outcome is Outcome.CONFLICT:
            return at.end(again=True)
        # The answer is in the fence record: the next turn reads it and decides on it.
        # A power-on's answer decides nothing now: the node coming back does.
        return at.end(again=read and action.operation != "on")

    async def _purge(self, action: PurgePodAction, at: _Progress) -> Step:
        """Pods are purged together, after the node's writes, with bounded concurrency."""
        at.purges.append(action)
        return None

    async def _release_volume(self, action: ReleaseVolumeAttachmentAction, at: _Progress) -> Step:
        """After the node's writes and the purges, like them: the engine decides the deletes
        only once no pod on the node uses a claim, and one that fails stops nothing else."""
        at.volumes.append(action)
        return None

    async def _unfence(self, action: UnfenceAction, at: _Progress) -> Step:
        assert at.snapshot.node is not None
        return (await self.executor.unfence(at.snapshot.node, action, at.deadline)).result

    async def _release(self, action: ReleaseAction, at: _Progress) -> Step:
        return await self.records.release(action, at.deadline)

    async def _release_fence(self, action: ReleaseFenceAction, at: _Progress) -> Step:
        """The node first, then the record entry: stopped half-way, an entry whose taint is
        gone is let go by the next reconcile pass; never a taint without its entry."""
        if action.touches_node:
            assert at.snapshot.node is not None
            written = await self.executor.release_node(at.snapshot.node, action, at.deadline)
            if written.outcome is not Outcome.DONE:
                return written
            at.results.append(written)
        return await self.records.release(
            ReleaseAction(action.node, action.node_uid, action.why), at.deadline
        )

    async def _observe_ready(self, action: ObserveReadyAction, at: _Progress) -> Step:
        return await self.records.observe(action, at.deadline)

    async def _proof_contradicted(self, action: ProofContradictedAction, at: _Progress) -> Step:
        return await self.records.contradicted(action, at.deadline)

    async def _record_recovery(self, action: RecordRecoveryAction, at: _Progress) -> Step:
        return await self.records.recovered(action, at.deadline)

    async def _ask_approval(self, action: AskApprovalAction, at: _Progress) -> Step:
        if self.approvals is None:
            return ActionResult(
                ASKED.name, action.node, Outcome.SKIPPED, "no approval channel is configured"
            )
        return await self.approvals.request(action, at.decision, at.snapshot, at.deadline)

    async def _record_rejection(self, action: RecordRejectionAction, at: _Progress) -> Step:
        if self.approvals is None:
            return ActionResult(REJECTION.name, action.node, Outcome.SKIPPED, "no approval channel")
        return await self.approvals.reject(action, at.snapshot.node, at.deadline)

    async def _record_approval(self, action: RecordApprovalAction, at: _Progress) -> Step:
        if self.approvals is None:
            return ActionResult(APPROVAL.name, action.node, Outcome.SKIPPED, "no approval channel")
        return await self.approvals.approve(action, at.deadline)

    async def _withdraw_question(self, action: WithdrawQuestionAction, at: _Progress) -> Step:
        if self.approvals is None:
            return ActionResult(
                WITHDRAWAL.name, action.node, Outcome.SKIPPED, "no approval channel"
            )
        return await self.approvals.withdraw(action, at.deadline)

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
            result, action=UNDONE.name, detail=result.detail or "claim lost; taint taken off"
        )


Handler = Callable[[Commit, Any, _Progress], Awaitable[Step]]

HANDLERS: dict[type[Any], Handler] = {
    ClaimAction: Commit._claim,
    FenceAction: Commit._fence,
    ConfirmAction: Commit._confirm,
    PowerAction: Commit._power,
    PurgePodAction: Commit._purge,
    UnfenceAction: Commit._unfence,
    ReleaseAction: Commit._release,
    ObserveReadyAction: Commit._observe_ready,
    ProofContradictedAction: Commit._proof_contradicted,
    AskApprovalAction: Commit._ask_approval,
    ReleaseVolumeAttachmentAction: Commit._release_volume,
    ReleaseFenceAction: Commit._release_fence,
    RecordRejectionAction: Commit._record_rejection,
    RecordApprovalAction: Commit._record_approval,
    WithdrawQuestionAction: Commit._withdraw_question,
    RecordRecoveryAction: Commit._record_recovery,
}


def handler_for(action: Action) -> Handler:
    handler = HANDLERS.get(type(action))
    if handler is None:
        raise UnknownActionError(f"nodefence has no commit handler for {type(action).__name__}")
    return handler
