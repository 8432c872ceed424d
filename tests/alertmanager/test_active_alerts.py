"""The client against a real Alertmanager: exactly the node alerts that would notify someone."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodefence.alertmanager.client import AlertmanagerUnavailableError, active_alerts
from nodefence.alertmanager.config import AlertmanagerConfig
from nodefence.alerts.events import label_fingerprint
from nodefence.engine.model import AlertEvent, AlertStatus
from nodefence.policy import DEFAULT_ALERT_NAMES

from .conftest import INHIBITOR, Starter, alert, poll

NAMES = list(DEFAULT_ALERT_NAMES)
NODE_LABELS = ["node"]


def by_node(events: list[AlertEvent]) -> dict[str, AlertEvent]:
    nodes = [e.node for e in events]
    assert len(nodes) == len(set(nodes)), f"a node twice: {nodes}"
    return {e.node: e for e in events if e.node is not None}


async def test_only_active_unsilenced_uninhibited_handled_alerts_naming_a_node(
    start_alertmanager: Starter,
) -> None:
    am = start_alertmanager()
    config = AlertmanagerConfig(url=am.url)
    await am.post_alerts(
        alert("KubeNodeNotReady", node="n1", severity="warning"),
        alert("KubeNodeUnreachable", node="n2"),
        alert("KubeNodeNotReady", node="n3"),  # silenced below
        alert("KubeNodeNotReady", node="n4", ends_in=-timedelta(minutes=1)),  # resolved
        alert("KubeNodeNotReadyX", node="n5"),  # another name, with a handled one as prefix
        alert("KubePodCrashLooping", node="n5", namespace="default"),
        alert("KubeNodeNotReady", instance="10.0.0.7:9100"),  # no node label
        alert("KubeNodeNotReady", node="n6"),  # inhibited below
        alert(INHIBITOR, node="n6"),
    )
    await am.silence(alertname="KubeNodeNotReady", node="n3")

    async def settled() -> list[AlertEvent] | None:
        events = await active_alerts(config, NAMES, NODE_LABELS)
        return events if set(by_node(events)) == {"n1", "n2"} else None

    events = await poll(settled, within=60, what="only n1 and n2 returned")
    found = by_node(events)
    first = found["n1"]
    assert first.alertname == "KubeNodeNotReady"
    assert first.status is AlertStatus.FIRING
    assert first.labels == {"alertname": "KubeNodeNotReady", "node": "n1", "severity": "warning"}
    # Alertmanager's fingerprint, which is also the one a webhook delivery of it carries.
    assert first.fingerprint == label_fingerprint(first.labels)
    assert first.starts_at is not None
    assert first.ends_at is not None
    assert first.starts_at < first.ends_at
    assert found["n2"].alertname == "KubeNodeUnreachable"


async def test_the_node_comes_from_the_policy_labels(start_alertmanager: Starter) -> None:
    am = start_alertmanager()
    await am.post_alerts(
        alert("KubeNodeNotReady", instance="worker-7:9100"),
        alert("KubeNodeNotReady", instance="[fd00::7]:9100", job="node"),
    )
    config = AlertmanagerConfig(url=am.url)
    events = await active_alerts(config, NAMES, ["node", "instance"])
    assert sorted(e.node for e in events if e.node) == ["fd00::7", "worker-7"]
    assert await active_alerts(config, NAMES, ["node"]) == []


async def test_names_are_matched_literally_on_the_server(start_alertmanager: Starter) -> None:
    """A name with regex metacharacters selects only itself: unescaped, ``Node(Ready)+``
    would select ``NodeReadyReady`` and miss the alert of that very name."""
    am = start_alertmanager()
    await am.post_alerts(
        alert("Node(Ready)+", node="n1"),
        alert("NodeReadyReady", node="n2"),
        alert('Quote"d\\Name', node="n3"),
    )
    config = AlertmanagerConfig(url=am.url)
    events = await active_alerts(config, ["Node(Ready)+", 'Quote"d\\Name'], NODE_LABELS)
    assert sorted((e.alertname, e.node) for e in events) == [
        ("Node(Ready)+", "n1"),
        ('Quote"d\\Name', "n3"),
    ]


async def test_other_alerts_are_filtered_by_alertmanager_and_an_oversized_answer_fails(
    start_alertmanager: Starter,
) -> None:
    """Many unrelated alerts do not count against the response bound, because Alertmanager
    filters them out; an answer over the bound is refused rather than cut short."""
    am = start_alertmanager()
    noise = [
        alert("KubePodCrashLooping", node=f"n{i}", pod=f"pod-{i}", namespace="default")
        for i in range(200)
    ]
    await am.post_alerts(alert("KubeNodeNotReady", node="dead"), *noise)
    small = AlertmanagerConfig(url=am.url, max_response_bytes=4096)
    events = await active_alerts(small, NAMES, NODE_LABELS)
    assert [e.node for e in events] == ["dead"]

    with pytest.raises(AlertmanagerUnavailableError) as caught:
        await active_alerts(small, [*NAMES, "KubePodCrashLooping"], NODE_LABELS)
    message = str(caught.value)
    assert am.url in message
    assert "more than 4096 bytes" in message or "over the 4096" in message
