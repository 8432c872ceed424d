"""Alertmanager webhook payloads (version 4) as Alertmanager sends them for kube-prometheus'
node alerts; the demo and the tests post these to the receiver."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

ZERO_TIME = "0001-01-01T00:00:00Z"


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def fingerprint(labels: dict[str, str]) -> str:
    """Stable per label set, like Alertmanager's (a hash of the sorted labels)."""
    text = "\x00".join(f"{k}\x00{v}" for k, v in sorted(labels.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def node_alert(
    node: str,
    *,
    status: str = "firing",
    alertname: str = "KubeNodeNotReady",
    starts_at: datetime | None = None,
    ends_at: datetime | None = None,
    node_label: str = "node",
) -> dict[str, Any]:
    labels = {
        "alertname": alertname,
        "condition": "Ready",
        "container": "kube-state-metrics",
        "endpoint": "http",
        "job": "kube-state-metrics",
        "namespace": "monitoring",
        node_label: node,
        "service": "kube-state-metrics",
        "severity": "warning",
        "status": "true",
    }
    started = starts_at or datetime.now(UTC)
    return {
        "status": status,
        "labels": labels,
        "annotations": {
            "description": f"{node} has been unready for more than 15 minutes.",
            "runbook_url": "https://runbooks.prometheus-operator.dev/runbooks/kubernetes/kubenodenotready",
            "summary": "Node is not ready.",
        },
        "startsAt": _iso(started),
        "endsAt": _iso(ends_at) if ends_at else ZERO_TIME,
        "generatorURL": "http://prometheus:9090/graph?g0.expr=kube_node_status_condition",
        "fingerprint": fingerprint(labels),
    }


def webhook(alerts: list[dict[str, Any]], *, receiver: str = "nodefence") -> dict[str, Any]:
    status = "firing" if any(a["status"] == "firing" for a in alerts) else "resolved"
    first = alerts[0]["labels"] if alerts else {}
    group = {k: first[k] for k in ("alertname", "node") if k in first}
    return {
        "version": "4",
        "groupKey": "{}/{}:" + "{" + ", ".join(f'{k}="{v}"' for k, v in group.items()) + "}",
        "truncatedAlerts": 0,
        "status": status,
        "receiver": receiver,
        "groupLabels": group,
        "commonLabels": dict(first),
        "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093",
        "alerts": alerts,
    }
