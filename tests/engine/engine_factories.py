"""Builders for engine inputs: a dead worker node that every guard would let nodefence fence,
so each test changes exactly the fact it is about."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from nodefence.engine import ledger
from nodefence.engine.model import (
    OUT_OF_SERVICE_KEY,
    OUT_OF_SERVICE_VALUE,
    AlertEvent,
    AlertStatus,
    ClusterFacts,
    Condition,
    Facts,
    LeaseFacts,
    Ledger,
    NodeFacts,
    PodFacts,
    Taint,
)
from nodefence.policy import Policy, parse_policy

NOW = datetime(2026, 11, 30, 8, 20, tzinfo=UTC)
NODE = "worker-1"
UID = "uid-worker-1"


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def policy(**overrides: Any) -> Policy:
    """A policy from a plain dict, the way YAML would give it; ``rule`` sets the single rule."""
    data: dict[str, Any] = dict(overrides)
    rule = data.pop("rule", None)
    if rule is not None:
        data["rules"] = [{"name": "default", **rule}]
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
    ledger_: Ledger | None = None,
    annotations: dict[str, str] | None = None,
) -> NodeFacts:
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
        ledger=ledger_ or Ledger(),
    )


def our_taint(effect: str = "NoExecute") -> Taint:
    return Taint(OUT_OF_SERVICE_KEY, effect, OUT_OF_SERVICE_VALUE)


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


def facts(
    the_node: NodeFacts | None = None,
    *,
    lease_age: float | None = 900,
    pods: tuple[PodFacts, ...] = (),
    cluster_: ClusterFacts | None = None,
) -> Facts:
    lease = None if lease_age is None else LeaseFacts(renew_time=ago(lease_age), holder=NODE)
    return Facts(
        node=the_node if the_node is not None else node(),
        lease=lease,
        pods=pods,
        cluster=cluster_ or cluster(),
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


def fenced_ledger(
    *, uid: str = UID, fenced_at: float = 3600, boot_id: str = "boot-1", rule: str = "default"
) -> Ledger:
    """The ledger as the executor leaves it after a fence, read back through the parser."""
    the_node = node(uid=uid, boot_id=boot_id)
    notes = ledger.fence_annotations(the_node, event(), ago(fenced_at), "NoExecute", rule=rule)
    return ledger.parse_ledger(notes)


def fenced_node(
    *, ready: str | None = "Unknown", since: float = 1200, uid: str = UID, **kw: Any
) -> NodeFacts:
    return node(
        ready=ready, since=since, uid=uid, taints=(our_taint(),), ledger_=fenced_ledger(**kw)
    )
