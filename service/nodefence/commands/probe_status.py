"""``nodefence status``'s section on proof paths: each inventory node's last power-state probe.

The serving replicas write their rounds to the ConfigMap ``nodefence-fencing-probes``
(``fencing.probe_record``); this reads it and says, per node, the driver, the state read, how long
ago on the API server's clock, and the error. A probe older than twice its writer's interval is
flagged stale: the failure an operator must hear of is a probe that stopped, which would otherwise
keep showing its last good answer. Nodes of the local inventory (when ``NODEFENCE_BMC_INVENTORY``
is set where status runs) without an entry are named as "no probe recorded".
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from nodefence.engine.printable import printable
from nodefence.engine.wording import instant
from nodefence.fencing import probe_record
from nodefence.fencing.inventory import Inventory
from nodefence.fencing.probe_record import ProbeEntry
from nodefence.kube.client import Deadline, KubeClient

NO_PROBE = "no probe recorded"


def _age(entry: ProbeEntry, now: datetime | None) -> float | None:
    return None if now is None else max(0.0, round((now - entry.at).total_seconds(), 1))


def _node(entry: ProbeEntry, now: datetime | None) -> dict[str, Any]:
    age = _age(entry, now)
    limit = probe_record.STALE_INTERVALS * entry.interval_seconds
    return {
        "node": entry.node,
        "driver": entry.driver,
        "target": entry.target,
        "state": entry.state,
        "answered": entry.answered,
        "error": entry.error or None,
        "seconds": entry.seconds,
        "at": instant(entry.at),
        "ageSeconds": age,
        "intervalSeconds": entry.interval_seconds,
        "stale": bool(age is not None and limit > 0 and age > limit),
        "by": entry.by or None,
    }


async def probe_view(
    kube: KubeClient, namespace: str, inventory: Inventory | None, deadline: Deadline
) -> dict[str, Any]:
    """The ``fencingProbes`` key of ``status``."""
    view, now = await probe_record.read_probes(kube, namespace, deadline)
    nodes = [_node(e, now) for e in view.entries]
    recorded = {n["node"] for n in nodes} | set(view.unreadable)
    listed = sorted(inventory.nodes) if inventory is not None else []
    return {
        "configMap": f"{namespace}/{probe_record.CONFIGMAP}",
        "note": view.note if not nodes else None,
        "nodes": nodes,
        "unreadable": view.unreadable,
        "omitted": view.omitted,
        "notRecorded": [n for n in listed if n not in recorded],
    }


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "at an unknown age"
    if seconds < 120:
        return f"{seconds:.0f}s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m ago"
    if seconds < 172800:
        return f"{seconds / 3600:.0f}h ago"
    return f"{seconds / 86400:.0f}d ago"


def probe_lines(status: dict[str, Any]) -> list[str]:
    probes = status.get("fencingProbes")
    if probes is None:
        return []
    nodes = probes["nodes"]
    if not nodes and not probes["unreadable"]:
        return [
            f"Power-state probes: {NO_PROBE} ({probes['note']}; nodefence serve writes it after "
            "each probe round when a BMC inventory is set, NODEFENCE_FENCING_PROBE_INTERVAL is "
            "not 0 and it is not in dry-run)"
        ]
    failing = sum(1 for n in nodes if not n["answered"])
    stale = sum(1 for n in nodes if n["stale"])
    counts = [f"{len(nodes)} recorded"]
    if failing:
        counts.append(f"{failing} NOT ANSWERING")
    if stale:
        counts.append(f"{stale} STALE")
    lines = [f"Power-state probes (ConfigMap {probes['configMap']}): " + ", ".join(counts)]
    columns = ("node", "driver", "state")
    # Aligned as shown: a value's escapes are wider than the characters they stand for.
    widths = {key: max((len(printable(n[key])) for n in nodes), default=0) for key in columns}
    for n in nodes:
        cells = [printable(n[key]).ljust(widths[key]) for key in columns]
        line = f"  {'  '.join(cells)}  {_ago(n['ageSeconds'])} ({n['at']})"
        if n["stale"]:
            line += (
                f"  STALE: older than {probe_record.STALE_INTERVALS}x its "
                f"{n['intervalSeconds']:g}s interval (is the probe running?)"
            )
        lines.append(line)
        if n["error"]:
            lines.append(f"      error: {n['error']}")
    for name in probes["unreadable"]:
        lines.append(f"  {name}  {NO_PROBE} (its entry could not be read)")
    for name in probes["notRecorded"]:
        lines.append(f"  {name}  {NO_PROBE}")
    if probes["omitted"]:
        lines.append(
            f"  ({probes['omitted']} nodes that answered were left out to keep the ConfigMap "
            "small; nodefence check-fencing reads every node)"
        )
    return lines
