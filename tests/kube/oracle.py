"""The cluster counts as a full list of the Nodes gives them, written out plainly from the Node
JSON, so that the watch-fed index (``kube.node_index``) is checked against an independent
count rather than against its own summaries.

Ready, "takes workloads" and the out-of-service taint are read here without the product's
helpers; only the clock-corrected "Ready since" (``convert.ready_since``, with its own tests in
``test_ready_since``) is shared, since restating it would copy its managedFields arithmetic. A
node's first Ready, within five minutes of its creation, is no recovery.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from nodefence.engine.model import ClusterFacts
from nodefence.kube.convert import ready_condition, ready_since

Json = dict[str, Any]

OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"
CONTROL_PLANE = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")
FENCED_BY = "nodefence.io/fenced-by"


def _ready(node: Json) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    return ready is not None and ready.get("status") == "True"


def _out_of_service(node: Json) -> bool:
    return any(t.get("key") == OUT_OF_SERVICE for t in (node.get("spec") or {}).get("taints") or [])


def _takes_workloads(node: Json) -> bool:
    return (
        _ready(node)
        and not (node.get("spec") or {}).get("unschedulable")
        and not _out_of_service(node)
    )


def _control_plane(node: Json) -> bool:
    labels = (node.get("metadata") or {}).get("labels") or {}
    return any(label in labels for label in CONTROL_PLANE)


def _name(node: Json) -> str:
    return str((node.get("metadata") or {}).get("name", ""))


def _mirrored(node: Json) -> bool:
    notes = (node.get("metadata") or {}).get("annotations") or {}
    return notes.get(FENCED_BY) == "nodefence"


def _recovered(node: Json) -> datetime | None:
    since = ready_since(node, ready_condition(node))
    created = (node.get("metadata") or {}).get("creationTimestamp")
    if since is None or not created:
        return since
    joined = datetime.fromisoformat(created.replace("Z", "+00:00"))
    return since if since > joined + timedelta(minutes=5) else None


def cluster_facts(nodes: list[Json]) -> ClusterFacts:
    """What the budget, quorum and storm guards would count from one list of all nodes."""
    control_plane = [n for n in nodes if _control_plane(n)]
    recovered = tuple(since for n in nodes if (since := _recovered(n)) is not None)
    return ClusterFacts(
        total_nodes=len(nodes),
        ready_nodes=sum(1 for n in nodes if _ready(n)),
        control_plane_total=len(control_plane),
        control_plane_ready=sum(1 for n in control_plane if _ready(n)),
        schedulable_ready=sum(1 for n in nodes if _takes_workloads(n)),
        ready_since=recovered,
        out_of_service=tuple(sorted(_name(n) for n in nodes if _out_of_service(n))),
        mirrored=tuple(sorted(_name(n) for n in nodes if _out_of_service(n) and _mirrored(n))),
    )
