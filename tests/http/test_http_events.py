"""Webhook parsing and event extraction: node resolution, fingerprints, deduplication."""

from __future__ import annotations

from typing import Any

import pytest
from http_support import load_payload
from pydantic import ValidationError

from nodefence.alerts.events import extract_events, label_fingerprint
from nodefence.alerts.webhook import WebhookPayload
from nodefence.engine.alerts import host_of_instance
from nodefence.engine.model import AlertStatus

NAMES = ("KubeNodeNotReady",)
NODE_LABELS = ("node", "kubernetes_node", "instance")


def payload_with(*alerts: dict[str, Any]) -> WebhookPayload:
    return WebhookPayload.model_validate(
        {"version": "4", "status": "firing", "receiver": "nodefence", "alerts": list(alerts)}
    )


def alert(labels: dict[str, str], **fields: Any) -> dict[str, Any]:
    return {"status": "firing", "labels": {"alertname": "KubeNodeNotReady", **labels}, **fields}


def events_of(*alerts: dict[str, Any]) -> list[Any]:
    return extract_events(payload_with(*alerts), alert_names=NAMES, node_labels=NODE_LABELS)


def test_real_alertmanager_payload_parses_with_zero_end_time_unset() -> None:
    payload = WebhookPayload.model_validate(load_payload("am_firing.json"))
    events = extract_events(payload, alert_names=NAMES, node_labels=NODE_LABELS)

    assert [e.node for e in events] == ["worker-1", "worker-2"]
    assert [e.fingerprint for e in events] == ["b9301a748b8da117", "3ab6a6c582863f6a"]
    assert all(e.status is AlertStatus.FIRING for e in events)
    assert events[0].ends_at is None
    assert events[0].starts_at is not None
    assert events[0].starts_at.year == 2026
    assert events[0].labels["severity"] == "warning"


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ({"node": "worker-1", "instance": "10.0.0.9:9100"}, "worker-1"),
        ({"kubernetes_node": "worker-2", "instance": "10.0.0.9:9100"}, "worker-2"),
        ({"instance": "10.0.0.9:9100"}, "10.0.0.9"),
        ({"instance": "worker-3:10250"}, "worker-3"),
        ({"instance": "[fd00::12]:9100"}, "fd00::12"),
        ({"instance": "fd00::12"}, "fd00::12"),
        ({"instance": "worker-4"}, "worker-4"),
        ({"node": "", "instance": "worker-5:9100"}, "worker-5"),
        ({"job": "kube-state-metrics"}, None),
    ],
)
def test_node_resolved_from_first_present_label(
    labels: dict[str, str], expected: str | None
) -> None:
    [event] = events_of(alert(labels))
    assert event.node == expected


def test_instance_port_is_stripped_only_for_instance_label() -> None:
    [event] = extract_events(
        payload_with(alert({"host": "odd:name"})), alert_names=NAMES, node_labels=("host",)
    )
    assert event.node == "odd:name"
    assert host_of_instance("https://probe.example:443/x") == "probe.example"


def test_unhandled_alert_still_yields_event_without_node() -> None:
    [event] = events_of(
        {"status": "firing", "labels": {"alertname": "DiskFull", "node": "worker-1"}}
    )
    assert event.alertname == "DiskFull"
    assert event.node is None


def test_alert_without_any_node_label_yields_event_without_node() -> None:
    [event] = events_of(alert({"severity": "warning"}))
    assert event.node is None
    assert event.alertname == "KubeNodeNotReady"


def test_fingerprint_matches_alertmanager_when_absent() -> None:
    # Both values were read back from a real Alertmanager 0.25 after posting these labels.
    assert (
        label_fingerprint(
            {
                "alertname": "ProbeFailure",
                "instance": "https://server.example.org",
                "job": "http_checks",
                "monitor": "master",
                "severity": "critical",
            }
        )
        == "fe986f5dcb3e6510"
    )
    assert label_fingerprint({"alertname": "KubeNodeNotReady", "node": "wörker-1"}) == (
        "0344673896fa0a0f"
    )
    real = load_payload("am_firing.json")["alerts"][0]
    assert label_fingerprint(real["labels"]) == real["fingerprint"]


def test_missing_fingerprint_is_computed_and_independent_of_label_order() -> None:
    first = alert({"node": "worker-1", "severity": "warning"})
    second = {"status": "firing", "labels": dict(reversed(list(first["labels"].items())))}
    events = events_of(first, second)
    assert len(events) == 1
    assert events[0].fingerprint == label_fingerprint(first["labels"])


def test_duplicates_collapse_keeping_latest_starts_at() -> None:
    older = alert(
        {"node": "worker-1"}, fingerprint="aaaa", startsAt="2024-01-01T10:00:00Z", extra="x"
    )
    newer = alert({"node": "worker-1"}, fingerprint="aaaa", startsAt="2024-01-01T11:00:00Z")
    other = alert({"node": "worker-2"}, fingerprint="bbbb", startsAt="2024-01-01T09:00:00Z")
    events = events_of(newer, other, older)

    assert [e.fingerprint for e in events] == ["aaaa", "bbbb"]
    assert events[0].starts_at is not None
    assert events[0].starts_at.hour == 11


def test_same_alert_firing_and_resolved_are_distinct_events() -> None:
    firing = alert({"node": "worker-1"}, fingerprint="aaaa")
    resolved = {**alert({"node": "worker-1"}, fingerprint="aaaa"), "status": "resolved"}
    events = events_of(firing, resolved)
    assert [e.status for e in events] == [AlertStatus.FIRING, AlertStatus.RESOLVED]


@pytest.mark.parametrize(
    "document",
    [
        {"version": "3", "status": "firing", "alerts": []},
        {"version": 4, "status": "firing", "alerts": []},
        {"version": "4", "status": "firing"},
        {"version": "4", "status": "burning", "alerts": []},
        {"version": "4", "status": "firing", "alerts": [{"status": "firing", "labels": {"a": 1}}]},
    ],
)
def test_invalid_payloads_are_rejected(document: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        WebhookPayload.model_validate(document)


def test_unknown_fields_are_kept() -> None:
    document = load_payload("am_firing.json")
    document["orgId"] = 7
    document["alerts"][0]["silenceURL"] = "http://x"
    payload = WebhookPayload.model_validate(document)
    assert payload.model_extra == {"orgId": 7}
    assert payload.group_key == '{}:{alertname="KubeNodeNotReady"}'
