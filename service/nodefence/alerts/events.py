"""Turn a parsed webhook into one engine event per distinct alert.

Every alert becomes an event, including alerts nodefence does not handle and alerts without a
node label: the engine answers those with a ``skip`` decision whose reason the operator can read,
rather than the alert disappearing without a trace.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from nodefence.alerts.webhook import WebhookAlert, WebhookPayload
from nodefence.engine.alerts import node_from_labels
from nodefence.engine.model import AlertEvent, AlertStatus

_FNV64_OFFSET = 14695981039346656037
_FNV64_PRIME = 1099511628211
_MASK64 = (1 << 64) - 1
_SEPARATOR = 0xFF


def label_fingerprint(labels: Mapping[str, str]) -> str:
    """Alertmanager's fingerprint of a label set, as 16 lowercase hex digits.

    Same as ``LabelSet.Fingerprint`` in Prometheus' common model: FNV-1a 64 over the label
    names sorted, each name and each value followed by the byte 0xFF (which cannot occur in
    UTF-8). Computing it the same way means an alert keeps one identity whether or not the
    sender included the ``fingerprint`` field.
    """
    digest = _FNV64_OFFSET
    for name in sorted(labels):
        for part in (name.encode(), labels[name].encode()):
            for byte in part:
                digest = ((digest ^ byte) * _FNV64_PRIME) & _MASK64
            digest = ((digest ^ _SEPARATOR) * _FNV64_PRIME) & _MASK64
    return f"{digest:016x}"


def _event(
    alert: WebhookAlert, alert_names: Sequence[str], node_labels: Sequence[str]
) -> AlertEvent:
    alertname = alert.labels.get("alertname", "")
    # The node is resolved only for alerts nodefence handles: an unrelated alert that happens
    # to carry an instance label must never be read as naming a node to act on.
    node = node_from_labels(alert.labels, node_labels) if alertname in alert_names else None
    return AlertEvent(
        alertname=alertname,
        status=AlertStatus(alert.status),
        node=node,
        fingerprint=alert.fingerprint or label_fingerprint(alert.labels),
        labels=dict(alert.labels),
        starts_at=alert.starts_at,
        ends_at=alert.ends_at,
    )


def extract_events(
    payload: WebhookPayload,
    *,
    alert_names: Sequence[str],
    node_labels: Sequence[str],
) -> list[AlertEvent]:
    """One event per alert, deduplicated by (fingerprint, status), in first-seen order.

    When the same alert appears twice with the same status, the copy with the latest
    ``startsAt`` wins (the later occurrence on a tie), since it describes the most recent firing.
    """
    chosen: dict[tuple[str, AlertStatus], AlertEvent] = {}
    for alert in payload.alerts:
        event = _event(alert, alert_names, node_labels)
        key = (event.fingerprint, event.status)
        previous = chosen.get(key)
        if previous is None or _not_older(event, previous):
            chosen[key] = event
    return list(chosen.values())


def _not_older(candidate: AlertEvent, current: AlertEvent) -> bool:
    if candidate.starts_at is None:
        return current.starts_at is None
    if current.starts_at is None:
        return True
    return candidate.starts_at >= current.starts_at
