"""Which driver a node's power step may use: the one its rule names, and only if its inventory
entry is of that driver.

A rule names the driver it trusts, and a node's inventory entry names the driver that reaches its
machine. When the two disagree, acting through the entry's driver would be a silent substitution
(a rule that says ``redfish`` powering a node through IPMI, with metrics and logs saying
``redfish``), so it is a configuration error at start and a refusal at the power step.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from nodefence.fencing.model import PowerDriver

if TYPE_CHECKING:
    from nodefence.fencing.inventory import Inventory
    from nodefence.policy import Policy


def entry_driver(inventory: Inventory | None, node: str) -> str | None:
    """The driver the node's inventory entry names, or ``None`` without an entry."""
    if inventory is None:
        return None
    entry = inventory.nodes.get(node)
    return entry.driver if entry is not None else None


def power_driver(
    inventory: Inventory | None, node: str, wanted: str
) -> tuple[PowerDriver | None, str]:
    """The driver to act on ``node`` for a rule that wants ``wanted``, or ``None`` and why not.
    Never a different driver than the rule's."""
    if inventory is None:
        return None, "no BMC inventory is configured (NODEFENCE_BMC_INVENTORY)"
    has = entry_driver(inventory, node)
    if has is None:
        return None, f"node {node} has no BMC in the inventory (NODEFENCE_BMC_INVENTORY)"
    if has != wanted:
        return None, mismatch(node, wanted, has)
    return inventory.nodes[node].build(), ""


def mismatch(node: str, rule_driver: str, entry: str, rule: str = "") -> str:
    which = f"rule {rule!r}" if rule else "the rule"
    return (
        f"configuration error: {which} fences with driver {rule_driver} but the inventory entry "
        f"for node {node} is driver {entry}; nodefence does not substitute one for the other "
        f"(make them agree)"
    )


def conflicts(
    policy: Policy,
    inventory: Inventory | None,
    nodes: Iterable[tuple[str, Mapping[str, str]]] | None = None,
) -> list[str]:
    """Rule/entry driver disagreements. Without the cluster (``nodes`` ``None``): an entry whose
    driver no powering rule uses, while some rule powers with another. With the cluster's nodes
    (name, labels): every powering rule whose node selector matches a node with an entry of
    another driver."""
    from nodefence.engine.labels import parse_selector

    if inventory is None:
        return []
    powering = [r for r in policy.rules if r.fencing is not None and r.fencing.powers]
    if not powering:
        return []
    problems: list[str] = []
    if nodes is None:
        used = {r.fencing.driver for r in powering if r.fencing is not None}
        for node, entry in sorted(inventory.nodes.items()):
            if entry.driver not in used:
                rules = ", ".join(
                    f"{r.name!r} ({r.fencing.driver})" for r in powering if r.fencing is not None
                )
                problems.append(
                    f"configuration error: the inventory entry for node {node} is driver "
                    f"{entry.driver} but no rule fences with it (rules: {rules}); nodefence "
                    "does not substitute one driver for another"
                )
        return problems
    for node, labels in nodes:
        has = entry_driver(inventory, node)
        if has is None:
            continue
        for rule in powering:
            assert rule.fencing is not None
            wanted = rule.fencing.driver
            if wanted != has and parse_selector(rule.match.node_selector).matches(labels):
                problems.append(mismatch(node, wanted, has, rule.name))
    return problems
