"""The fence record: nodefence's authority on what it fenced, kept in its own namespace.

A node's credentials can write the node's annotations, labels, conditions and Lease, so none of
those may decide whether nodefence owns a taint or how much of the fence budget is spent. The
record lives in a ConfigMap of nodefence's namespace, which no kubelet can write, and every change
that can spend budget is written with the resourceVersion it was decided on: two replicas that
both decide to fence cannot both succeed, whatever their clocks or however slow they are.
The approval requests live here too (``approval.<node>``, ``engine.approval_request``), for the
same reason: whether a person was asked, and what they answered, is not the node's to write.
So do the power steps' readings (``reading.<node>``): what the machine's BMC or fence agent
answered, which the request that asked decides on (``engine.power_reading``).

Every timestamp of a fence entry or release comes from the API server's clock (the ``Date`` of
a response), never from a replica's; an approval request's are the requester's, the clock that
signs its buttons' expiry (they only decide when to ask again, never whether to fence).
Everything in it is bounded, so that it stays far below the API server's 1 MiB per object,
whose every write would otherwise fail, and every fence with it: each field said by someone else
(a BMC's identity and error, a node's boot ID, a person's name, a reason) is kept to its cap in
``engine.caps.FIELD_CAPS``, applied as the value is made; how many readings, approvals and
releases it keeps is capped here (``MAX_READINGS`` a node for at most ``MAX_READING_NODES``
nodes, ``MAX_APPROVALS``, ``MAX_RELEASES``), and its entries by the policy's fence budget
(``policy.MAX_FENCED_NODES`` at most).

This module is pure: it turns ConfigMap data into values and back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from dataclasses import field as dataclass_field
from dataclasses import fields as dataclass_fields
from datetime import datetime
from enum import StrEnum
from typing import Any

from nodefence.engine.approval_request import (
    APPROVAL_PREFIX,
    ApprovalRequest,
    outlived,
    parse_request,
    request_json,
)
from nodefence.engine.caps import FIELD_CAPS, field
from nodefence.engine.evidence import PowerEvidence
from nodefence.engine.held_pods import HeldPods, held_json, parse_held
from nodefence.engine.identity import Reported
from nodefence.engine.wording import instant, parse_instant

CONFIGMAP = "nodefence-fences"
FENCE_PREFIX = "fence."
RELEASED_PREFIX = "released."
READING_PREFIX = "reading."
FORMAT = 1
# Every key prefix nodefence owns in the ConfigMap; other keys are someone else's.
OWN_PREFIXES = (FENCE_PREFIX, RELEASED_PREFIX, APPROVAL_PREFIX, READING_PREFIX)


# Readings kept per node: enough for the requests that may work on one node at once (one
# completing another's claim, a reconcile pass), few enough to keep the ConfigMap small.
MAX_READINGS = 4
# A reading only serves the request that asked, which lives for seconds; it is kept an hour
# for people (``nodefence status``) and then dropped at the next reading's write.
READING_KEEP_SECONDS = 3600.0
# A driver's message is kept to this many bytes (a BMC's error page can be long).
MAX_DETAIL = FIELD_CAPS["reading.detail"]
# Nodes whose readings are kept: a reading serves only its own request, so beyond the nodes
# being fenced now (at most the fence budget) the newest ones are kept for people.
MAX_READING_NODES = 32
# Approval requests kept, newest first: one dropped is at worst asked again (never a fence).
MAX_APPROVALS = 32
# Releases kept for the flap guard, newest first.
MAX_RELEASES = 64


class Phase(StrEnum):
    # The budget slot is taken; the taint may or may not have been written yet.
    CLAIMED = "claimed"
    # The taint is on the node and nodefence owns it.
    FENCED = "fenced"


@dataclass(frozen=True, kw_only=True)
class RecordedReading(PowerEvidence):
    """A BMC's or fence agent's answer to one request's power step on node object ``uid``, as
    the power step wrote it into the record: the answer itself, and who asked. The request
    (``by``, its token) reads it back as the machine's power state. ``at`` is the API server's
    time of that write, after the answer came. A reading counts only for the request that
    asked; any other asks the machine itself. It is kept beside the node's entry, not in it: a
    claim rolled back on a reading that proves nothing takes its entry away, while the request
    must still see that it has asked."""

    node: str
    uid: str
    by: str
    operation: str
    at: datetime


# A fence entry's fields from outside and their caps' keys.
_ENTRY_CAPS = (
    ("proof", "fence.proof"),
    ("approval", "fence.approval"),
    ("boot_id", "fence.bootID"),
    ("fingerprint", "fence.fingerprint"),
)


@dataclass(frozen=True)
class FenceEntry:
    """One node nodefence has fenced, or is fencing (for this very node object: ``uid``)."""

    node: str
    uid: str
    phase: Phase
    claimed_at: datetime
    rule: str
    alertname: str
    fingerprint: str
    boot_id: str
    effect: str
    control_plane: bool = False
    claimed_by: str = ""
    fenced_at: datetime | None = None
    proof: str = ""
    approval: str = ""
    # When nodefence first saw the node Ready again, on the API server's clock, and the Ready
    # condition's lastTransitionTime it saw then: the healthy delay counts from the later of the
    # two, so a kubelet clock that runs behind cannot shorten it.
    ready_seen_at: datetime | None = None
    ready_transition: datetime | None = None
    power_off_sent_at: datetime | None = None
    power_on_sent_at: datetime | None = None
    # S4: the taint write's own reply: the ``timeAdded`` nodefence stamped on its taint (as the
    # API server stored it) and the node's resourceVersion after that write. A taint on the node
    # is nodefence's only if it still carries that ``timeAdded``.
    taint_added: datetime | None = None
    taint_version: str = ""
    # How many power-ons were sent in this incident (a reboot whose machine stays off is
    # powered on once more, never without bound).
    power_on_count: int = 0
    # When nodefence saw the node back with the boot ID it had at fence time (API server clock):
    # the machine was never off, so the proof was false, and the taint is held for a person.
    proof_contradicted_at: datetime | None = None
    # For ``nodefence_recovery_seconds`` (``engine.recovery``): the node's last sign of life as
    # the API server saw it when the fence was claimed (its Lease's stamped renewal), the pods
    # it held that should come back elsewhere, and, once measured, the API server's time at
    # which the last of them was Running elsewhere: set once, so replicas count it once.
    silent_since: datetime | None = None
    held: HeldPods = dataclass_field(default_factory=HeldPods)
    recovered_at: datetime | None = None

    def __post_init__(self) -> None:
        """The fields said by others kept to their caps (``engine.caps``) as the entry is
        made, decided or read back alike, so a decision compares what the record holds."""
        for name, key in _ENTRY_CAPS:
            object.__setattr__(self, name, field(key, getattr(self, name)))


@dataclass(frozen=True)
class Release:
    """When nodefence last let go of a node object, and why (the flap guard reads it)."""

    node: str
    uid: str
    at: datetime
    why: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "why", field("released.why", self.why))


@dataclass(frozen=True)
class FenceRecord:
    entries: tuple[FenceEntry, ...] = ()
    released: tuple[Release, ...] = ()
    # Keys whose value could not be read. They still count against the budget: an entry nobody
    # can read is not proof that a slot is free.
    unreadable: tuple[str, ...] = ()
    resource_version: str = ""
    # The approval requests (``engine.approval_request``), one per node at most.
    approvals: tuple[ApprovalRequest, ...] = ()
    # Approval keys whose value could not be read: carried over as they are, and counted as no
    # request (at worst a person is asked again; a fence still needs an approval).
    unreadable_approvals: tuple[str, ...] = ()
    # The power steps' readings (``RecordedReading``), grouped by node, oldest first in each.
    readings: tuple[RecordedReading, ...] = ()

    @property
    def exists(self) -> bool:
        return bool(self.resource_version)

    def entry(self, node: str) -> FenceEntry | None:
        return next((e for e in self.entries if e.node == node), None)

    def approval(self, node: str) -> ApprovalRequest | None:
        return next((a for a in self.approvals if a.node == node), None)

    def release(self, node: str, uid: str) -> Release | None:
        return next((r for r in self.released if r.node == node and r.uid == uid), None)

    @property
    def holders(self) -> tuple[str, ...]:
        """Every node that holds a budget slot, unreadable entries included."""
        names = {e.node for e in self.entries}
        names.update(key.removeprefix(FENCE_PREFIX) for key in self.unreadable)
        return tuple(sorted(names))

    @property
    def control_plane_holders(self) -> tuple[str, ...]:
        """Control-plane nodes holding a slot; an unreadable entry might be one, so it counts."""
        names = {e.node for e in self.entries if e.control_plane}
        names.update(key.removeprefix(FENCE_PREFIX) for key in self.unreadable)
        return tuple(sorted(names))


def _required_time(value: Any) -> datetime:
    parsed = parse_instant(value)
    if parsed is None:
        raise ValueError("missing or unreadable timestamp")
    return parsed


def _entry(raw: Mapping[str, Any]) -> FenceEntry:
    return FenceEntry(
        node=str(raw["node"]),
        uid=str(raw["uid"]),
        phase=Phase(raw["phase"]),
        claimed_at=_required_time(raw.get("claimedAt")),
        rule=str(raw.get("rule", "")),
        alertname=str(raw.get("alertname", "")),
        fingerprint=str(raw.get("fingerprint", "")),
        boot_id=str(raw.get("bootID", "")),
        effect=str(raw["effect"]),
        control_plane=bool(raw.get("controlPlane", False)),
        claimed_by=str(raw.get("claimedBy", "")),
        fenced_at=parse_instant(raw.get("fencedAt")),
        proof=str(raw.get("proof", "")),
        approval=str(raw.get("approval", "")),
        ready_seen_at=parse_instant(raw.get("readySeenAt")),
        ready_transition=parse_instant(raw.get("readyTransition")),
        power_off_sent_at=parse_instant(raw.get("powerOffSentAt")),
        power_on_sent_at=parse_instant(raw.get("powerOnSentAt")),
        taint_added=parse_instant(raw.get("taintAdded")),
        taint_version=str(raw.get("taintVersion", "")),
        power_on_count=int(raw.get("powerOnCount", 0)),
        proof_contradicted_at=parse_instant(raw.get("proofContradictedAt")),
        silent_since=parse_instant(raw.get("silentSince")),
        held=parse_held(raw.get("held")),
        recovered_at=parse_instant(raw.get("recoveredAt")),
    )


def _reported(raw: Any) -> Reported | None:
    """Every field of what the target said, as written: the identity judgement (S10) is made
    again on it, so a field lost on the way could change whose machine it names."""
    if raw is None:
        return None
    fields = _object(raw)
    values: dict[str, Any] = {}
    for f in dataclass_fields(Reported):
        if f.name not in fields:
            continue
        value = fields[f.name]
        if f.name == "aliases":
            if not isinstance(value, list):
                raise TypeError("aliases is not a list")
            values[f.name] = tuple(str(a) for a in value)
        else:
            values[f.name] = str(value)
    return Reported(**values)


def _reading(node: str, raw: Any) -> RecordedReading:
    fields = _object(raw)
    return RecordedReading(
        node=node,
        uid=str(fields["uid"]),
        by=str(fields["by"]),
        operation=str(fields["operation"]),
        state=str(fields["state"]),
        source=str(fields["source"]),
        at=_required_time(fields.get("at")),
        detail=str(fields.get("detail", "")),
        action_sent=fields.get("actionSent") is True,
        reset_sent=fields.get("resetSent") is True,
        identity=_reported(fields.get("identity")),
    )


def _readings(key: str, raw: Any) -> tuple[RecordedReading, ...]:
    """A reading that cannot be read is left out: without it the request asks the machine
    again, where a wrongly read one could stand as proof."""
    if not isinstance(raw, list):
        return ()
    kept: list[RecordedReading] = []
    for item in raw:
        try:
            kept.append(_reading(key.removeprefix(READING_PREFIX), item))
        except (ValueError, TypeError, KeyError):
            continue
    return tuple(kept)


def _reported_json(reported: Reported) -> dict[str, Any]:
    out = asdict(reported)
    out["aliases"] = list(reported.aliases)
    return out


def reading_json(reading: RecordedReading) -> dict[str, Any]:
    out: dict[str, Any] = {
        "uid": reading.uid,
        "by": reading.by,
        "operation": reading.operation,
        "state": reading.state,
        "source": reading.source,
        "at": instant(reading.at),
    }
    if reading.detail:
        out["detail"] = reading.detail
    if reading.action_sent:
        out["actionSent"] = True
    if reading.reset_sent:
        out["resetSent"] = True
    if reading.identity is not None:
        out["identity"] = _reported_json(reading.identity)
    return out


_KEYS = {
    "node": "node",
    "uid": "uid",
    "phase": "phase",
    "claimed_at": "claimedAt",
    "rule": "rule",
    "alertname": "alertname",
    "fingerprint": "fingerprint",
    "boot_id": "bootID",
    "effect": "effect",
    "control_plane": "controlPlane",
    "claimed_by": "claimedBy",
    "fenced_at": "fencedAt",
    "proof": "proof",
    "approval": "approval",
    "ready_seen_at": "readySeenAt",
    "ready_transition": "readyTransition",
    "power_off_sent_at": "powerOffSentAt",
    "power_on_sent_at": "powerOnSentAt",
    "taint_added": "taintAdded",
    "taint_version": "taintVersion",
    "power_on_count": "powerOnCount",
    "proof_contradicted_at": "proofContradictedAt",
    "silent_since": "silentSince",
    "held": "held",
    "recovered_at": "recoveredAt",
}


def entry_json(entry: FenceEntry) -> dict[str, Any]:
    out: dict[str, Any] = {"format": FORMAT}
    for field_name, value in asdict(entry).items():
        if field_name == "held":
            if entry.held.count or entry.held.left_out:
                out[_KEYS[field_name]] = held_json(entry.held)
            continue
        if value is None or value == "":
            continue
        out[_KEYS[field_name]] = instant(value) if isinstance(value, datetime) else value
    return out


def _object(raw: Any) -> Mapping[str, Any]:
    if not isinstance(raw, dict):
        raise TypeError("not an object")
    return raw


def _keyed_entry(key: str, raw: Any) -> FenceEntry:
    entry = _entry(_object(raw))
    if entry.node != key.removeprefix(FENCE_PREFIX):
        raise ValueError("key and node name differ")
    return entry


def _release(key: str, raw: Any) -> Release:
    fields = _object(raw)
    return Release(
        node=key.removeprefix(RELEASED_PREFIX),
        uid=str(fields["uid"]),
        at=_required_time(fields.get("at")),
        why=str(fields.get("why", "")),
    )


def decode(data: Mapping[str, str] | None, resource_version: str) -> FenceRecord:
    """Read the ConfigMap's data; what cannot be read is kept aside, never silently dropped,
    except a power step's reading: one that cannot be read is no reading, and its request asks
    the machine again."""
    entries: list[FenceEntry] = []
    readings: list[RecordedReading] = []
    released: list[Release] = []
    unreadable: list[str] = []
    approvals: list[ApprovalRequest] = []
    unreadable_approvals: list[str] = []
    for key, text in sorted((data or {}).items()):
        try:
            raw = json.loads(text)
            if key.startswith(FENCE_PREFIX):
                entries.append(_keyed_entry(key, raw))
            elif key.startswith(RELEASED_PREFIX):
                released.append(_release(key, raw))
            elif key.startswith(APPROVAL_PREFIX):
                approvals.append(parse_request(key, raw))
            elif key.startswith(READING_PREFIX):
                readings.extend(_readings(key, raw))
        except (ValueError, TypeError, KeyError):
            if key.startswith(FENCE_PREFIX):
                unreadable.append(key)
            elif key.startswith(APPROVAL_PREFIX):
                unreadable_approvals.append(key)
    return FenceRecord(
        tuple(entries),
        tuple(released),
        tuple(unreadable),
        resource_version,
        tuple(approvals),
        tuple(unreadable_approvals),
        tuple(readings),
    )


def from_configmap(configmap: Mapping[str, Any]) -> tuple[FenceRecord, dict[str, str]]:
    """The record held in a ConfigMap (``{}`` for an absent one) and its raw data, which a
    write carries over for the keys it cannot read."""
    raw = {str(k): str(v) for k, v in (configmap.get("data") or {}).items()}
    version = str((configmap.get("metadata") or {}).get("resourceVersion") or "")
    return decode(raw, version), raw


def foreign_keys(raw: Mapping[str, str] | None) -> tuple[str, ...]:
    """Keys of the ConfigMap that are not nodefence's (neither an entry, a release, an approval
    request nor a reading): someone else put them there, and nodefence's writes keep them as they
    are."""
    return tuple(sorted(k for k in raw or {} if not k.startswith(OWN_PREFIXES)))


def encode(record: FenceRecord, raw: Mapping[str, str] | None = None) -> dict[str, str]:
    """ConfigMap data for the record; unreadable keys, and keys nodefence does not own, are
    carried over untouched from ``raw``."""
    data: dict[str, str] = {}
    for key in (*record.unreadable, *record.unreadable_approvals, *foreign_keys(raw)):
        if raw is not None and key in raw:
            data[key] = raw[key]
    for entry in record.entries:
        data[FENCE_PREFIX + entry.node] = json.dumps(entry_json(entry), sort_keys=True)
    for release in record.released:
        data[RELEASED_PREFIX + release.node] = json.dumps(
            {"uid": release.uid, "at": instant(release.at), "why": release.why}, sort_keys=True
        )
    for request in record.approvals:
        data[APPROVAL_PREFIX + request.node] = json.dumps(request_json(request), sort_keys=True)
    by_node: dict[str, list[dict[str, Any]]] = {}
    for reading in record.readings:
        by_node.setdefault(reading.node, []).append(reading_json(reading))
    for node, listed in by_node.items():
        data[READING_PREFIX + node] = json.dumps(listed, sort_keys=True)
    return data


def progress(entry: FenceEntry) -> str:
    """How far the incident has come, in the order its steps move it (S7): claimed, power-off
    sent, fenced, power-on sent. A step is taken only on the entry its decision read."""
    if entry.phase is Phase.CLAIMED:
        return "power-off sent" if entry.power_off_sent_at is not None else "claimed"
    if entry.power_on_sent_at is not None:
        return f"fenced, power-on sent ({entry.power_on_count}x)"
    return "fenced"


def moved_on(expected: FenceEntry, current: FenceEntry) -> bool:
    """Whether the entry changed since a decision read it (as stored: compared in the form it
    is written in, so a value's round trip through the ConfigMap is no change)."""
    return entry_json(expected) != entry_json(current)


def claim_lost(
    record: FenceRecord, node: str, uid: str, claimed_by: str, claimed_at: datetime | None
) -> str:
    """Why a power action decided under the claim ``claimed_by`` of node object ``uid`` (made
    at ``claimed_at``, when the decision read it) may not go out now, or "" while that claim is
    still the record's entry for the node: the fencing token a power step shows right before
    each send. A claim rolled back and taken afresh by another replica is another incident; its
    machine may have been powered on again already."""
    entry = record.entry(node)
    mine = claimed_by or "the claim it was decided under"
    if entry is None:
        return f"the fence record no longer holds {mine} for node {node} (rolled back or released)"
    if entry.uid != uid:
        return f"the fence record's entry for node {node} is now for another node object"
    same_time = claimed_at is None or entry.claimed_at == claimed_at
    if entry.claimed_by != claimed_by or not same_time:
        now = entry.claimed_by or "another claim"
        return (
            f"the fence record's entry for node {node} is now {now} "
            f"(claimed at {instant(entry.claimed_at)}; {progress(entry)}), not {mine}"
        )
    return ""


def with_reading(record: FenceRecord, reading: RecordedReading) -> FenceRecord:
    """The record with ``reading`` as its node's newest (its request's earlier one replaced):
    at most ``MAX_READINGS`` a node, none older than ``READING_KEEP_SECONDS`` before it, for
    at most ``MAX_READING_NODES`` nodes (those whose newest reading is newest)."""
    cut = reading.at.timestamp() - READING_KEEP_SECONDS
    kept = [r for r in record.readings if r.at.timestamp() >= cut]
    mine = [r for r in kept if r.node == reading.node and r.by != reading.by]
    others = [r for r in kept if r.node != reading.node]
    newest: dict[str, float] = {}
    for r in others:
        newest[r.node] = max(newest.get(r.node, 0.0), r.at.timestamp())
    room = sorted(newest, key=lambda node: newest[node], reverse=True)[: MAX_READING_NODES - 1]
    others = [r for r in others if r.node in room]
    return replace(record, readings=(*others, *[*mine, reading][-MAX_READINGS:]))


def reading_by(record: FenceRecord, node: str, uid: str, token: str) -> RecordedReading | None:
    """The reading the request named ``token`` wrote for node object ``uid``, if it is still
    there."""
    if not token:
        return None
    mine = (r for r in reversed(record.readings) if (r.node, r.uid, r.by) == (node, uid, token))
    return next(mine, None)


def with_entry(record: FenceRecord, entry: FenceEntry) -> FenceRecord:
    others = tuple(e for e in record.entries if e.node != entry.node)
    return replace(record, entries=(*others, entry))


def without_entry(
    record: FenceRecord, node: str, uid: str, *, at: datetime, why: str, remember: bool = True
) -> FenceRecord:
    """Drop the entry of this node object and, if asked, remember when and why it was let go."""
    entries = tuple(e for e in record.entries if not (e.node == node and e.uid == uid))
    if not remember:
        return replace(record, entries=entries)
    released = tuple(r for r in record.released if r.node != node)
    newest = sorted(released, key=lambda r: r.at)[-(MAX_RELEASES - 1) :]
    return replace(record, entries=entries, released=(*newest, Release(node, uid, at, why)))


def prune_releases(record: FenceRecord, now: datetime, keep_seconds: float) -> FenceRecord:
    """Releases older than every flap window are of no use to any guard; they would only grow
    the ConfigMap towards its size limit."""
    kept = tuple(r for r in record.released if (now - r.at).total_seconds() < keep_seconds)
    return replace(record, released=kept)


def with_approval(record: FenceRecord, request: ApprovalRequest) -> FenceRecord:
    """The record with ``request`` as its node's only approval request (an unreadable one of
    that node is replaced too)."""
    key = APPROVAL_PREFIX + request.node
    others = [a for a in record.approvals if a.node != request.node]
    # The newest kept (by when each was asked, an answer without a question first to go).
    others = sorted(others, key=_asked_at)[-(MAX_APPROVALS - 1) :]
    unreadable = tuple(k for k in record.unreadable_approvals if k != key)
    return replace(record, approvals=(*others, request), unreadable_approvals=unreadable)


def _asked_at(request: ApprovalRequest) -> float:
    moment = request.requested_at or request.expires_at
    return moment.timestamp() if moment is not None else 0.0


def without_approval(record: FenceRecord, node: str) -> FenceRecord:
    return replace(record, approvals=tuple(a for a in record.approvals if a.node != node))


def prune_approvals(record: FenceRecord, now: datetime) -> FenceRecord:
    """Requests long expired hold no question and no rejection that matters any more."""
    return replace(record, approvals=tuple(a for a in record.approvals if not outlived(a, now)))
