"""Kubernetes JSON objects to the engine's fact types (pure, tolerant of missing fields)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from nodefence.engine import readiness
from nodefence.engine.evidence import PowerEvidence
from nodefence.engine.model import (
    Condition,
    LeaseFacts,
    NodeFacts,
    PodFacts,
    Taint,
    VolumeAttachmentFacts,
)
from nodefence.engine.wording import parse_instant

Json = dict[str, Any]


def _str_map(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {str(k): str(v) for k, v in value.items() if v is not None}


def ready_condition(node: Json) -> Condition | None:
    for cond in node.get("status", {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return Condition(
                type="Ready",
                status=str(cond.get("status", "Unknown")),
                last_transition=parse_instant(cond.get("lastTransitionTime")),
                last_heartbeat=parse_instant(cond.get("lastHeartbeatTime")),
                reason=str(cond.get("reason") or ""),
                message=str(cond.get("message") or ""),
            )
    return None


def ready_since(node: Json, cond: Condition | None) -> datetime | None:
    """When a Ready node became Ready, on the API server's clock (the storm cooldown counts
    recent recoveries by it). The kubelet stamps the condition's lastTransitionTime with its
    own clock; a clock minutes behind would date a recovery of a moment ago outside the
    cooldown. Its offset is read from the same object: the heartbeat it wrote against the API
    server's stamp on that write (``managedFields``). That stamp is never earlier than the
    write, so the corrected time is never earlier than the true one: at worst a recovery
    counts a little longer. ``cond`` is the node's Ready condition, already parsed."""
    if cond is None or cond.status != "True" or cond.last_transition is None:
        return None
    offset = _kubelet_clock_offset(node, cond.last_heartbeat)
    return cond.last_transition - offset if offset is not None else cond.last_transition


# How long after its creation a Node's Ready transition is still its first one, taken as
# joining rather than recovering. A kubelet registers its Node NotReady and turns it Ready once
# its container runtime and network are up, within a minute or two; a node slower than this
# counts as a recovery, which only makes the storm cooldown hold fences longer.
JOINING_SECONDS = 300


def recovered_since(node: Json, cond: Condition | None) -> datetime | None:
    """When a Ready node came back Ready after an outage, for the storm cooldown; None when it
    is not Ready, or when its Ready began within ``JOINING_SECONDS`` of the Node's creation (the
    API server's stamp, so both on its clock). A node's first Ready after joining is no recovery:
    counted as one, every node of a cluster minutes old, or a batch of nodes just added, looked
    like a storm that just ended and held every fence for the whole cooldown. A node that goes
    NotReady within its first minutes and comes back is not seen as a recovery either; the
    storm guard still counts it while it is NotReady."""
    since = ready_since(node, cond)
    if since is None:
        return None
    created = parse_instant((node.get("metadata") or {}).get("creationTimestamp"))
    if created is not None and since - created <= timedelta(seconds=JOINING_SECONDS):
        return None
    return since


def _kubelet_clock_offset(node: Json, heartbeat: datetime | None) -> timedelta | None:
    if heartbeat is None:
        return None
    written = _latest(e for e in _managed(node) if _owns_ready_heartbeat(e))
    return heartbeat - written if written is not None else None


def _owns_ready_heartbeat(entry: Json) -> bool:
    conditions = _owned(entry, ("f:status", "f:conditions"))
    if not isinstance(conditions, dict):
        return False
    for key, owned in conditions.items():
        if not key.startswith("k:") or not isinstance(owned, dict):
            continue
        try:
            element = json.loads(key[2:])
        except ValueError:
            continue
        if isinstance(element, dict) and element.get("type") == "Ready":
            return "f:lastHeartbeatTime" in owned
    return False


def is_ready(node: Json) -> bool:
    return readiness.is_ready(ready_condition(node))


def node_facts(node: Json) -> NodeFacts:
    meta = node.get("metadata", {})
    spec = node.get("spec", {})
    annotations = _str_map(meta.get("annotations"))
    taints = tuple(
        Taint(
            key=str(t.get("key", "")),
            effect=str(t.get("effect", "")),
            value=str(t.get("value") or ""),
            time_added=parse_instant(t.get("timeAdded")),
        )
        for t in spec.get("taints") or []
    )
    return NodeFacts(
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        labels=_str_map(meta.get("labels")),
        annotations=annotations,
        taints=taints,
        ready=ready_condition(node),
        boot_id=str(node.get("status", {}).get("nodeInfo", {}).get("bootID") or ""),
        system_uuid=str(node.get("status", {}).get("nodeInfo", {}).get("systemUUID") or ""),
        provider_id=str(spec.get("providerID") or ""),
        unschedulable=bool(spec.get("unschedulable", False)),
        status_written=_latest(
            entry
            for entry in _managed(node)
            if entry.get("subresource") == "status" or _owns(entry, ("f:status",))
        ),
        taints_written_by=tuple(
            sorted(
                {
                    str(entry.get("manager") or "")
                    for entry in _managed(node)
                    if _owns(entry, ("f:spec", "f:taints"))
                }
            )
        ),
    )


def _managed(obj: Json) -> list[Json]:
    entries = (obj.get("metadata") or {}).get("managedFields") or []
    return [e for e in entries if isinstance(e, dict)]


def _owned(entry: Json, path: tuple[str, ...]) -> Any:
    """What a managedFields entry owns at ``path`` in its FieldsV1 set, or None."""
    fields = entry.get("fieldsV1")
    for step in path:
        if not isinstance(fields, dict) or step not in fields:
            return None
        fields = fields[step]
    return fields


def _owns(entry: Json, path: tuple[str, ...]) -> bool:
    return _owned(entry, path) is not None


def _latest(entries: Iterable[Json]) -> datetime | None:
    """The latest time the API server stamped on these entries (``parse_instant`` takes only
    times with an offset)."""
    stamped = [t for t in (parse_instant(e.get("time")) for e in entries) if t is not None]
    return max(stamped) if stamped else None


def server_stamped(obj: Json) -> datetime | None:
    """The latest time the API server stamped on the object's managedFields: when anyone last
    changed it, on the API server's clock, whoever wrote it and whatever their own clock says."""
    return _latest(_managed(obj))


def power_proof(configmap: Json, annotation: str, source: str) -> PowerEvidence:
    """External fencing's written proof: ``annotation`` on the node's proof ConfigMap, "off" (or
    "true"). It is dated by the API server's stamp on the managedFields entry that owns the
    annotation (when its writer last changed it), else by the object's creation, which is never
    later than the write; what the writer says about time is not read."""
    notes = _str_map((configmap.get("metadata") or {}).get("annotations"))
    value = notes.get(annotation, "").strip().lower()
    path = ("f:metadata", "f:annotations", f"f:{annotation}")
    written = _latest(e for e in _managed(configmap) if _owns(e, path))
    at = written or parse_instant((configmap.get("metadata") or {}).get("creationTimestamp"))
    if value in ("off", "true"):
        return PowerEvidence("off", source, f"{annotation}={value}", at=at)
    if value in ("on", "false"):
        return PowerEvidence("on", source, f"{annotation}={value}", at=at)
    detail = f"{annotation}={value}, not off" if value else f"no annotation {annotation}"
    return PowerEvidence("unknown", source, detail, at=at)


def lease_facts(lease: Json) -> LeaseFacts:
    spec = lease.get("spec", {})
    duration = spec.get("leaseDurationSeconds")
    return LeaseFacts(
        renew_time=parse_instant(spec.get("renewTime")),
        holder=str(spec.get("holderIdentity") or ""),
        duration_seconds=int(duration) if isinstance(duration, int) else None,
        server_renewed=server_stamped(lease),
    )


def pod_facts(pod: Json) -> PodFacts:
    meta = pod.get("metadata", {})
    spec = pod.get("spec", {})
    owner = next(
        (ref for ref in meta.get("ownerReferences") or [] if ref.get("controller")),
        None,
    )
    volumes = spec.get("volumes") or []
    return PodFacts(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        node_name=str(spec.get("nodeName") or ""),
        deletion_timestamp=parse_instant(meta.get("deletionTimestamp")),
        finalizers=tuple(str(f) for f in meta.get("finalizers") or []),
        owner_kind=str(owner["kind"]) if owner else None,
        owner_name=str(owner["name"]) if owner else None,
        phase=str(pod.get("status", {}).get("phase") or ""),
        has_pvc=any("persistentVolumeClaim" in v for v in volumes if isinstance(v, dict)),
        created=parse_instant(meta.get("creationTimestamp")),
        changed=server_stamped(pod),
        template_hash=str(_str_map(meta.get("labels")).get("pod-template-hash", "")),
    )


def volume_attachment_facts(attachment: Json) -> VolumeAttachmentFacts:
    spec = attachment.get("spec", {})
    return VolumeAttachmentFacts(
        name=str(attachment.get("metadata", {}).get("name", "")),
        node_name=str(spec.get("nodeName") or ""),
        persistent_volume=str((spec.get("source") or {}).get("persistentVolumeName") or ""),
        attached=bool((attachment.get("status") or {}).get("attached", False)),
        created=parse_instant(attachment.get("metadata", {}).get("creationTimestamp")),
        deleting=bool(attachment.get("metadata", {}).get("deletionTimestamp")),
        uid=str(attachment.get("metadata", {}).get("uid") or ""),
    )
