"""Which node an alert is about, and which rule of the policy governs it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

from nodefence.engine.labels import parse_selector
from nodefence.engine.model import AlertEvent, NodeFacts
from nodefence.policy import Policy, Rule


def host_of_instance(instance: str) -> str:
    """The host part of a Prometheus ``instance`` label.

    Handles ``host:port``, ``[ipv6]:port``, a bare IPv6 address (several colons, no brackets,
    left as it is) and a URL such as a blackbox probe target.
    """
    value = instance.strip()
    if "://" in value:
        return urlsplit(value).hostname or value
    if value.startswith("["):
        closing = value.find("]")
        return value[1:closing] if closing > 0 else value
    if value.count(":") == 1:
        return value.split(":", 1)[0]
    return value


def node_from_labels(labels: Mapping[str, str], node_labels: Sequence[str]) -> str | None:
    """The node named by the first of ``node_labels`` that the alert carries, in policy order;
    ``instance`` is read as its host (``host_of_instance``). The webhook's events and the
    engine's own reading of an event's labels use this one function, so they cannot disagree
    on which node an alert is about."""
    for label in node_labels:
        value = (labels.get(label) or "").strip()
        if not value:
            continue
        node = host_of_instance(value) if label == "instance" else value
        if node:
            return node
    return None


def rule_matches(rule: Rule, policy: Policy, event: AlertEvent, node: NodeFacts) -> bool:
    """A fallback event (no alert arrived) has no alert name or labels of its own, so a rule
    that asks for alert names or labels never matches it: it was written for a particular
    alert (a ``driver: none`` rule meant for one alert must not fence a node no alert
    named), and which alert would have fired cannot be known."""
    if event.fallback:
        return fallback_may_use(rule) and selector_matches(rule, node)
    names = rule.match.alertnames or policy.alerts.names
    if event.alertname not in names:
        return False
    if any(event.labels.get(k) != v for k, v in rule.match.alert_labels.items()):
        return False
    return parse_selector(rule.match.node_selector).matches(node.labels)


def fallback_may_use(rule: Rule) -> bool:
    """Whether the fallback may choose ``rule``: only one that names no alert."""
    return not rule.match.alert_labels and not rule.match.alertnames


def selector_matches(rule: Rule, node: NodeFacts) -> bool:
    """Rule choice without an alert (the reconcile pass): only the node selector is judged."""
    return parse_selector(rule.match.node_selector).matches(node.labels)


def match_rule(policy: Policy, event: AlertEvent, node: NodeFacts) -> Rule | None:
    return next((r for r in policy.rules if rule_matches(r, policy, event, node)), None)
