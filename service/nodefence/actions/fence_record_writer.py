"""Writes to the fence record, each with the precondition that keeps it safe.

A claim spends budget, so it is written on exactly the record version the decision was made on
and fails on any concurrent change: the caller then reads and decides again. The other changes
(confirm, release, observe) never spend budget, so they are applied to whatever the record holds
now, read-modify-write with the resourceVersion, as long as the entry they change is still the
one they were decided on.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from nodefence.actions.executor import ActionResult, Outcome
from nodefence.engine import record as fence_record
from nodefence.engine.action_kinds import (
    CLAIMED,
    CONFIRMED,
    CONTRADICTED,
    RECOVERED,
    RELEASED,
    SEEN_READY,
)
from nodefence.engine.model import (
    ClaimAction,
    ConfirmAction,
    ObserveReadyAction,
    ProofContradictedAction,
    RecordRecoveryAction,
    ReleaseAction,
)
from nodefence.engine.record import FenceEntry, FenceRecord, Phase, RecordedReading
from nodefence.engine.wording import instant
from nodefence.errors import ClusterUnavailableError
from nodefence.kube.client import Dated, Deadline, Json, KubeClient, KubeError
from nodefence.kube.ratelimit import Priority, reads_at

Change = Callable[[FenceRecord, FenceEntry, datetime], FenceRecord]
# A change of the record as a whole (None: nothing to write), at the API server's time of the read.
ApprovalChange = Callable[[FenceRecord, datetime], FenceRecord | None]
Step = Callable[[FenceRecord, datetime], FenceRecord | ActionResult]


def _held(
    record: FenceRecord, kind: str, node: str, uid: str, claimed_by: str
) -> FenceEntry | ActionResult:
    """The entry of node object ``uid``, if it is still there and, with ``claimed_by``, still
    that claim; otherwise why the change is skipped."""
    entry = record.entry(node)
    if entry is None or entry.uid != uid:
        return ActionResult(kind, node, Outcome.SKIPPED, "the entry is no longer there")
    if claimed_by and entry.claimed_by != claimed_by:
        return ActionResult(
            kind, node, Outcome.SKIPPED, f"the entry is now {entry.claimed_by}'s claim"
        )
    return entry


def _now(reply: Dated) -> datetime:
    return reply.server_time or datetime.now(UTC)


class FenceRecordWriter:
    def __init__(
        self, kube: KubeClient, namespace: str, identity: str, *, keep_releases_seconds: float
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.identity = identity
        self.keep_releases_seconds = keep_releases_seconds

    def _configmap(self, data: Mapping[str, str], resource_version: str, read: Json) -> Json:
        """The ConfigMap to write; the labels and annotations of the one read (``read``: its
        metadata) are kept, since a PUT replaces them too and others may have set them (a
        backup tool's, a GitOps owner's)."""
        labels = {**(read.get("labels") or {}), "app.kubernetes.io/name": "nodefence"}
        meta: Json = {"name": fence_record.CONFIGMAP, "namespace": self.namespace, "labels": labels}
        if read.get("annotations"):
            meta["annotations"] = dict(read["annotations"])
        if resource_version:
            meta["resourceVersion"] = resource_version
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": dict(data)}

    async def _write(
        self, data: Mapping[str, str], resource_version: str, deadline: Deadline, read: Json
    ) -> Dated:
        body = self._configmap(data, resource_version, read)
        if not resource_version:
            return await self.kube.create_configmap(self.namespace, body, deadline)
        return await self.kube.replace_configmap(
            self.namespace, fence_record.CONFIGMAP, body, deadline
        )

    def new_token(self) -> str:
        """Names one claim, so only the request that made it (or the reconcile pass, once the
        claim is stale) completes or rolls it back."""
        return f"{self.identity}/{uuid.uuid4().hex[:12]}"

    async def claim(
        self,
        action: ClaimAction,
        raw: Mapping[str, str],
        token: str,
        deadline: Deadline,
        *,
        metadata: Json,
    ) -> ActionResult:
        """``raw`` and ``metadata``: the ConfigMap's data and metadata as the decision read
        them, at the version it was made on."""
        node = action.entry.node
        current = fence_record.decode(raw, action.record_version)
        entry = dataclasses.replace(action.entry, claimed_by=token)
        data = fence_record.encode(fence_record.with_entry(current, entry), raw)
        try:
            await self._write(data, action.record_version, deadline, metadata)
        except KubeError as exc:
            if exc.status == 409:
                return ActionResult(
                    CLAIMED.name, node, Outcome.CONFLICT, "the fence record changed"
                )
            return ActionResult(CLAIMED.name, node, Outcome.FAILED, str(exc))
        return ActionResult(CLAIMED.name, node, Outcome.DONE, f"budget slot claimed ({token})")

    async def _change(
        self,
        kind: str,
        node: str,
        uid: str,
        change: Change,
        deadline: Deadline,
        *,
        claimed_by: str = "",
        expected: FenceEntry | None = None,
    ) -> ActionResult:
        """``expected``: the entry exactly as the decision read it; the change is made only
        on that entry, so a step that another replica has overtaken does nothing (S7)."""

        def step(current: FenceRecord, now: datetime) -> FenceRecord | ActionResult:
            if not current.exists:
                return ActionResult(kind, node, Outcome.SKIPPED, "no fence record")
            entry = _held(current, kind, node, uid, claimed_by)
            if isinstance(entry, ActionResult):
                return entry
            if expected is not None and fence_record.moved_on(expected, entry):
                return ActionResult(
                    kind,
                    node,
                    Outcome.CONFLICT,
                    "the entry moved on since the decision read it "
                    f"({fence_record.progress(expected)} then, {fence_record.progress(entry)} "
                    "now); this step is not taken",
                )
            return change(current, entry, now)

        return await self._update(kind, node, step, deadline)

    async def _update(self, kind: str, node: str, step: Step, deadline: Deadline) -> ActionResult:
        """The record's read-modify-write: read it, let ``step`` change it (or answer without a
        write), write it with the resourceVersion read. The ConfigMap is shared by every node,
        so a 409 mostly means another node's key changed: the change is applied again to what
        is there now, and ``step`` checks again what the decision rested on (this node object's
        entry, its claim, the entry exactly as read). When that moved, the step answers
        CONFLICT or SKIPPED and the shell's loop reads and decides again; only the claim, which
        spends budget, is written on the very version its decision read. An absent record
        reads as an empty one (``step`` says whether to create it)."""
        while True:
            try:
                reply = await self.kube.get_configmap_dated(
                    self.namespace, fence_record.CONFIGMAP, deadline
                )
            except KubeError as exc:
                if exc.status != 404:
                    return ActionResult(kind, node, Outcome.FAILED, str(exc))
                reply = Dated({}, None)
            current, raw = fence_record.from_configmap(reply.body)
            changed = step(current, _now(reply))
            if isinstance(changed, ActionResult):
                return changed
            try:
                await self._write(
                    fence_record.encode(changed, raw),
                    current.resource_version,
                    deadline,
                    reply.body.get("metadata") or {},
                )
            except KubeError as exc:
                # 409: written since it was read (or created meanwhile, for a create).
                if exc.status != 409:
                    return ActionResult(kind, node, Outcome.FAILED, str(exc))
                if deadline.expired:
                    raise ClusterUnavailableError(
                        "the fence record kept changing while nodefence tried to write it"
                    ) from None
                continue
            return ActionResult(kind, node, Outcome.DONE)

    async def approval_request(
        self, kind: str, node: str, change: ApprovalChange, deadline: Deadline
    ) -> ActionResult:
        """Change the node's approval request in the record (``change`` returns None to leave
        the record as it is: SKIPPED), creating the record if there is none yet. The same
        optimistic concurrency as a fence entry's, so two replicas never both claim the one
        question, and nothing a node can write takes part."""

        def step(current: FenceRecord, now: datetime) -> FenceRecord | ActionResult:
            changed = change(current, now)
            if changed is None:
                return ActionResult(kind, node, Outcome.SKIPPED, "nothing to change")
            return changed

        return await self._update(kind, node, step, deadline)

    async def confirm(
        self,
        action: ConfirmAction,
        token: str,
        fenced_at: datetime | None,
        deadline: Deadline,
        *,
        taint: tuple[datetime | None, str] = (None, ""),
    ) -> ActionResult:
        """``taint``: the ``timeAdded`` and node resourceVersion of the taint write's reply,
        kept as nodefence's proof of authorship (S4)."""
        added, version = taint

        def fenced(record: FenceRecord, entry: FenceEntry, now: datetime) -> FenceRecord:
            done = dataclasses.replace(
                entry,
                phase=Phase.FENCED,
                fenced_at=fenced_at or now,
                proof=action.proof or entry.proof,
                approval=action.approval or entry.approval,
                taint_added=added or action.taint_added or entry.taint_added,
                taint_version=version or entry.taint_version,
            )
            return fence_record.with_entry(record, done)

        claim = action.claimed_by or token
        return await self._change(
            CONFIRMED.name, action.node, action.node_uid, fenced, deadline, claimed_by=claim
        )

    async def release(self, action: ReleaseAction, deadline: Deadline) -> ActionResult:
        def released(record: FenceRecord, entry: FenceEntry, now: datetime) -> FenceRecord:
            dropped = fence_record.without_entry(
                record, entry.node, entry.uid, at=now, why=action.why, remember=action.remember
            )
            return fence_record.prune_releases(dropped, now, self.keep_releases_seconds)

        result = await self._change(
            RELEASED.name,
            action.node,
            action.node_uid,
            released,
            deadline,
            claimed_by=action.claimed_by,
        )
        return dataclasses.replace(result, detail=result.detail or action.why)

    async def power_sent(
        self,
        node: str,
        uid: str,
        claimed_by: str,
        operation: str,
        deadline: Deadline,
        *,
        expected: FenceEntry | None = None,
    ) -> ActionResult:
        """Written before the power action goes out: a duplicate delivery, another replica or a
        retry after a crash then reads the state instead of sending the action again. With
        ``expected`` (the entry the decision read), only on that very entry: a replica whose
        step was delayed while another finished the incident finds the entry moved on and sends
        nothing (a stale ForceOff would take down the machine just powered on again)."""

        def sent(record: FenceRecord, entry: FenceEntry, now: datetime) -> FenceRecord:
            if operation == "on":
                marked = dataclasses.replace(
                    entry, power_on_sent_at=now, power_on_count=entry.power_on_count + 1
                )
            else:
                marked = dataclasses.replace(entry, power_off_sent_at=now)
            return fence_record.with_entry(record, marked)

        return await self._change(
            f"power-{operation}",
            node,
            uid,
            sent,
            deadline,
            claimed_by=claimed_by,
            expected=expected,
        )

    async def claim_lost(
        self,
        node: str,
        uid: str,
        claimed_by: str,
        claimed_at: datetime | None,
        deadline: Deadline,
    ) -> str:
        """The fencing token of a power action, shown right before it is sent: the record
        read now, and why the claim that decided the action no longer holds ("" while it
        does: ``engine.record.claim_lost``). A record that cannot be read holds nothing, so
        nothing is sent. Read at the priority of the reads an action rests on."""
        try:
            with reads_at(Priority.LIVE):
                reply = await self.kube.get_configmap_dated(
                    self.namespace, fence_record.CONFIGMAP, deadline
                )
        except KubeError as exc:
            if exc.status != 404:
                return f"the fence record could not be read to check the claim ({exc})"
            reply = Dated({}, None)
        except ClusterUnavailableError as exc:
            return f"the fence record could not be read to check the claim ({exc})"
        current, _raw = fence_record.from_configmap(reply.body)
        return fence_record.claim_lost(current, node, uid, claimed_by, claimed_at)

    async def reading(
        self,
        node: str,
        uid: str,
        claimed_by: str,
        make: Callable[[datetime], tuple[RecordedReading, str]],
        deadline: Deadline,
        *,
        unsent: bool = False,
    ) -> ActionResult:
        """The power step's reading, written into the record so the request decides on what
        the record holds; ``make`` words it, and the proof when it proves the machine off, with
        the API server's time of this very write. The proof goes into the entry before the
        taint: a replica that dies between taint and confirm leaves it in the record.
        ``unsent``: the driver sent nothing although the entry says a power-off went out; the
        mark is taken back, so with no action out the claim is rolled back at once instead of
        being held for the claim timeout, and the first delivery after the fix goes ahead. The
        entry is changed only while it is this node object's and ``claimed_by``'s (empty:
        anybody's); otherwise nothing is written and the request decides nothing on it."""
        kind = "power-reading"

        def read(current: FenceRecord, now: datetime) -> FenceRecord | ActionResult:
            if not current.exists:
                return ActionResult(kind, node, Outcome.SKIPPED, "no fence record")
            answer, proof = make(now)
            changed = fence_record.with_reading(current, answer)
            if not (proof or unsent):
                return changed
            entry = _held(current, kind, node, uid, claimed_by)
            if isinstance(entry, ActionResult):
                return entry
            if proof:
                entry = dataclasses.replace(entry, proof=proof)
            if unsent:
                entry = dataclasses.replace(entry, power_off_sent_at=None)
            return fence_record.with_entry(changed, entry)

        return await self._update(kind, node, read, deadline)

    async def contradicted(
        self, action: ProofContradictedAction, deadline: Deadline
    ) -> ActionResult:
        """The node came back with its fence-time boot ID: the entry says so from now on (at
        the API server's time of this write), and its taint is held until a person releases
        it. The first sighting stands; a later one changes nothing."""

        def held(record: FenceRecord, entry: FenceEntry, now: datetime) -> FenceRecord:
            if entry.proof_contradicted_at is not None:
                return record
            return fence_record.with_entry(
                record, dataclasses.replace(entry, proof_contradicted_at=now)
            )

        result = await self._change(CONTRADICTED.name, action.node, action.node_uid, held, deadline)
        why = f"back with boot ID {action.boot_id}, the one it had when fenced"
        return dataclasses.replace(result, detail=result.detail or why)

    async def observe(self, action: ObserveReadyAction, deadline: Deadline) -> ActionResult:
        def seen(record: FenceRecord, entry: FenceEntry, now: datetime) -> FenceRecord:
            observed = dataclasses.replace(
                entry, ready_seen_at=now, ready_transition=action.ready_transition
            )
            return fence_record.with_entry(record, observed)

        return await self._change(SEEN_READY.name, action.node, action.node_uid, seen, deadline)

    async def recovered(self, action: RecordRecoveryAction, deadline: Deadline) -> ActionResult:
        """The incident measured (``engine.recovery``): written only into the entry of node
        object ``node_uid`` that is not measured yet, on the record's resourceVersion. The one
        write that finds it unmeasured is DONE and counts it; any other (another replica, a
        pass that read the record before that write) is ALREADY and counts nothing."""
        kind = RECOVERED.name

        def measured(current: FenceRecord, now: datetime) -> FenceRecord | ActionResult:
            entry = _held(current, kind, action.node, action.node_uid, "")
            if isinstance(entry, ActionResult):
                return entry
            if entry.recovered_at is not None:
                return ActionResult(
                    kind,
                    action.node,
                    Outcome.ALREADY,
                    f"measured already (running elsewhere since {instant(entry.recovered_at)})",
                )
            done = dataclasses.replace(entry, recovered_at=action.recovered_at)
            return fence_record.with_entry(current, done)

        result = await self._update(kind, action.node, measured, deadline)
        return dataclasses.replace(result, detail=result.detail or action.words)
