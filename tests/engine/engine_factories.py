"""Builders for engine inputs: a dead worker node that every guard would let nodefence fence,
so each test changes exactly the fact it is about.

Times are on the API server's clock (``NOW`` is the ``Date`` of the replies) unless a builder
says it stamps the kubelet's: a Lease's ``renew_time`` and the Ready condition's timestamps are
written by the kubelet (or whoever wrote the condition) and may be minutes off.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from nodefence.engine.authorship import FIELD_MANAGER
from nodefence.engine.evidence import PowerEvidence
from nodefence.engine.model import (
    API_SERVER_CLOCK,
    OUT_OF_SERVICE_KEY,
    OUT_OF_SERVICE_VALUE,
    AlertEvent,
    AlertStatus,
    ClusterFacts,
    Condition,
    Facts,
    LeaseFacts,
    NodeFacts,
    PodFacts,
    Taint,
    VolumeAttachmentFacts,
)
from nodefence.engine.record import FenceEntry, FenceRecord, Phase, Release
from nodefence.policy import Policy, parse_policy

NOW = datetime(2026, 11, 30, 8, 20, tzinfo=UTC)
NODE = "worker-1"
UID = "uid-worker-1"
RECORD_VERSION = "7"
CLAIM_TOKEN = "replica-a/0123456789ab"
LOCAL_CLOCK = "nodefence's own clock (no Date header from the API server)"


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


INFERENCE = {"driver": "none"}


def policy(**overrides: Any) -> Policy:
    """A policy from a plain dict, the way YAML would give it; ``rule`` sets the single rule.

    Every rule that chooses no fencing of its own fences on inference alone (``fencing.driver:
    none``), so a test's outcome turns on the guard it is about, not on power-off proof."""
    data: dict[str, Any] = dict(overrides)
    rule = data.pop("rule", None)
    if rule is not None:
        data["rules"] = [{"name": "default", **rule}]
    rules = data.get("rules") or [{"name": "default"}]
    data["rules"] = [
        r if "fencing" in r or "power_off_proof" in r else {**r, "fencing": INFERENCE}
        for r in rules
    ]
    return parse_policy(data, "<test>")


def node(
    *,
    name: str = NODE,
    uid: str = UID,
    ready: str | None = "Unknown",
    since: float = 1200,
    labels: dict[str, str] | None = None,
    taints: tuple[Taint, ...] = (),
    boot_id: str = "boot-1",
    annotations: dict[str, str] | None = None,
    unschedulable: bool = False,
    taints_written_by: tuple[str, ...] = (),
) -> NodeFacts:
    """``since``: how long ago the Ready condition's lastTransitionTime says it changed;
    ``taints_written_by``: the field managers managedFields shows owning spec.taints."""
    condition = None if ready is None else Condition("Ready", ready, ago(since), ago(since))
    return NodeFacts(
        name=name,
        uid=uid,
        resource_version="41",
        labels=labels or {},
        annotations=annotations or {},
        taints=taints,
        ready=condition,
        boot_id=boot_id,
        unschedulable=unschedulable,
        taints_written_by=taints_written_by,
    )


def our_taint(effect: str = "NoExecute") -> Taint:
    """The taint as nodefence writes it: stamped with the API server's time of its decision."""
    return Taint(OUT_OF_SERVICE_KEY, effect, OUT_OF_SERVICE_VALUE, time_added=NOW)


def lease(server_age: float | None = 900, *, kubelet_behind: float = 0) -> LeaseFacts:
    """A kubelet Lease the API server last saw renewed ``server_age`` seconds ago (its
    managedFields stamp); ``renew_time`` is what a kubelet whose clock runs ``kubelet_behind``
    seconds behind (negative: ahead) wrote at that renewal."""
    server = None if server_age is None else ago(server_age)
    kubelet = ago((server_age or 0) + kubelet_behind)
    return LeaseFacts(renew_time=kubelet, holder=NODE, server_renewed=server)


def pod(
    name: str,
    *,
    node_name: str = NODE,
    terminating: bool = True,
    namespace: str = "default",
    owner_kind: str | None = "StatefulSet",
    finalizers: tuple[str, ...] = (),
    has_pvc: bool = False,
) -> PodFacts:
    return PodFacts(
        namespace=namespace,
        name=name,
        uid=f"uid-{namespace}-{name}",
        node_name=node_name,
        deletion_timestamp=ago(600) if terminating else None,
        finalizers=finalizers,
        owner_kind=owner_kind,
        has_pvc=has_pvc,
    )


def cluster(**overrides: Any) -> ClusterFacts:
    base = ClusterFacts(total_nodes=5, ready_nodes=4, control_plane_total=3, control_plane_ready=3)
    return replace(base, **overrides)


def entry(
    *,
    node_name: str = NODE,
    uid: str = UID,
    phase: Phase = Phase.FENCED,
    claimed: float = 3600,
    rule: str = "default",
    boot_id: str = "boot-1",
    effect: str = "NoExecute",
    control_plane: bool = False,
    claimed_by: str = CLAIM_TOKEN,
    ready_seen: float | None = None,
    ready_since: float | None = None,
) -> FenceEntry:
    """A fence record entry as the executor leaves it: claimed ``claimed`` seconds ago and, for
    ``FENCED``, confirmed a second later. ``ready_seen``: when nodefence first saw the node
    Ready, with the lastTransitionTime it saw then (``ready_since``, default the same)."""
    seen = None if ready_seen is None else ago(ready_seen)
    transition = None if seen is None else ago(ready_seen if ready_since is None else ready_since)
    return FenceEntry(
        node=node_name,
        uid=uid,
        phase=phase,
        claimed_at=ago(claimed),
        rule=rule,
        alertname="KubeNodeNotReady",
        fingerprint="fp-1",
        boot_id=boot_id,
        effect=effect,
        control_plane=control_plane,
        claimed_by=claimed_by,
        fenced_at=ago(claimed - 1) if phase is Phase.FENCED else None,
        ready_seen_at=seen,
        ready_transition=transition,
    )


def record(
    *entries: FenceEntry,
    released: tuple[Release, ...] = (),
    unreadable: tuple[str, ...] = (),
    version: str = RECORD_VERSION,
) -> FenceRecord:
    return FenceRecord(entries, released, unreadable, version)


def facts(
    the_node: NodeFacts | None = None,
    *,
    lease_age: float | None = 900,
    lease_: LeaseFacts | None = None,
    pods: tuple[PodFacts, ...] = (),
    cluster_: ClusterFacts | None = None,
    record_: FenceRecord | None = None,
    held: FenceEntry | None = None,
    clock: str = API_SERVER_CLOCK,
    power: PowerEvidence | None = None,
    attachments: tuple[VolumeAttachmentFacts, ...] | None = (),
) -> Facts:
    """``held``: the fence record holds this one entry (else ``record_``, else an empty record
    at ``RECORD_VERSION``). ``lease_age``: the Lease's server-stamped age (None: no Lease)."""
    if lease_ is None and lease_age is not None:
        lease_ = lease(lease_age)
    the_record = record_ or (record(held) if held is not None else record())
    return Facts(
        node=the_node if the_node is not None else node(),
        lease=lease_,
        pods=pods,
        cluster=cluster_ or cluster(),
        power=power,
        record=the_record,
        clock=clock,
        attachments=attachments,
    )


def event(
    status: AlertStatus = AlertStatus.FIRING,
    *,
    alertname: str = "KubeNodeNotReady",
    node_name: str | None = NODE,
    labels: dict[str, str] | None = None,
    fingerprint: str = "fp-1",
) -> AlertEvent:
    return AlertEvent(
        alertname=alertname,
        status=status,
        node=node_name,
        fingerprint=fingerprint,
        labels=labels if labels is not None else {"node": NODE},
    )


def fenced_node(
    *, ready: str | None = "Unknown", since: float = 1200, uid: str = UID, effect: str = "NoExecute"
) -> NodeFacts:
    """The node as a fence leaves it: nodefence's exact taint on it, written by nodefence's
    field manager."""
    return node(
        ready=ready,
        since=since,
        uid=uid,
        taints=(our_taint(effect),),
        taints_written_by=(FIELD_MANAGER,),
    )


def recovered(
    *, since: float = 900, seen: float | None = None, lease_age: float = 5, **kw: Any
) -> Facts:
    """A node nodefence fenced that has been Ready for ``since`` seconds, first seen Ready by
    nodefence ``seen`` seconds ago (default: at the transition), kubelet renewing again."""
    held = entry(ready_seen=since if seen is None else seen, ready_since=since)
    return facts(fenced_node(ready="True", since=since), lease_age=lease_age, held=held, **kw)
