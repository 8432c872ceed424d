"""Which node an alert is about, and which rule of the policy governs it."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from nodefence.engine.labels import parse_selector
from nodefence.engine.model import AlertEvent, NodeFacts
from nodefence.policy import Policy, Rule

# ``host:port``, ``[v6::addr]:port``; a bare IPv6 address has several colons and is kept whole.
_HOST_PORT = re.compile(r"^(?:\[(?P<v6>[^\]]+)\]|(?P<host>[^:\[\]]+)):\d+$")


def strip_port(instance: str) -> str:
    m = _HOST_PORT.match(instance)
    if m is None:
        return instance
    return m.group("v6") or m.group("host")


def node_from_labels(labels: Mapping[str, str], node_labels: Sequence[str]) -> str | None:
    """The first non-empty node label, in policy order; ``instance`` loses its scrape port."""
    for key in node_labels:
        value = (labels.get(key) or "").strip()
        if not value:
            continue
        return strip_port(value) if key == "instance" else value
    return None


def rule_matches(rule: Rule, policy: Policy, event: AlertEvent, node: NodeFacts) -> bool:
    """A fallback event (no alert arrived) has no alert name or labels of its own: it stands
    for any handled alert, so ``alertnames`` is not judged, and a rule that asks for alert
    labels never matches it, since what the labels were meant to select cannot be known."""
    if event.fallback:
        return not rule.match.alert_labels and selector_matches(rule, node)
    names = rule.match.alertnames or policy.alerts.names
    if event.alertname not in names:
        return False
    if any(event.labels.get(k) != v for k, v in rule.match.alert_labels.items()):
        return False
    return parse_selector(rule.match.node_selector).matches(node.labels)


def selector_matches(rule: Rule, node: NodeFacts) -> bool:
    """Rule choice without an alert (the reconcile pass): only the node selector is judged."""
    return parse_selector(rule.match.node_selector).matches(node.labels)


def match_rule(policy: Policy, event: AlertEvent, node: NodeFacts) -> Rule | None:
    return next((r for r in policy.rules if rule_matches(r, policy, event, node)), None)
