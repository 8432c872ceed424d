"""``nodefence check-fencing``: whether proof can be had, known before an incident needs it.

Every inventory node's power state is read through the driver its entry names, read-only (a
``status``, never an action), a bounded number at a time; a wrong password, an unreachable BMC or a
missing agent shows up here with the node's name rather than during an outage. With the cluster,
nodes a powering rule matches but the inventory lacks, and rule/entry driver disagreements, are
named too: those nodes could not be fenced either. So is every target not shown to control its
node's machine (S10, ``fencing.binding``): the inventory mapping two nodes to one machine, and,
with the cluster, a target whose reported identity is not its Node's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from nodefence.engine.printable import printable, printable_lines
from nodefence.fencing.binding import (
    IdentityCheck,
    NodeIdentity,
    identity_problems,
    inventory_problems,
)
from nodefence.fencing.inventory import Inventory
from nodefence.fencing.registry import conflicts, entry_driver

if TYPE_CHECKING:
    from nodefence.policy import Policy

DEFAULT_CONCURRENCY = 8
DEFAULT_TIMEOUT_SECONDS = 30.0
CLOSE_GRACE_SECONDS = 2.0


@dataclass(frozen=True)
class NodeCheck:
    """One node's answer. ``target`` names where the driver points, never a credential."""

    node: str
    driver: str
    target: str
    state: str
    seconds: float
    error: str = ""

    @property
    def answered(self) -> bool:
        return self.state in ("on", "off")


@dataclass
class FencingCheck:
    nodes: list[NodeCheck] = field(default_factory=list)
    # Cluster nodes a powering rule matches that have no inventory entry.
    uncovered: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    cluster: str = "not checked"
    # Per inventory node, with the cluster: whether its target reports the Node's machine.
    identities: list[IdentityCheck] = field(default_factory=list)
    # How long the whole check took, for the operator timing a fleet's BMCs.
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return (
            all(n.answered for n in self.nodes)
            and not self.uncovered
            and not self.conflicts
            and all(c.bound for c in self.identities)
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "nodes": [{**asdict(n), "answered": n.answered} for n in self.nodes],
            "uncovered": self.uncovered,
            "conflicts": self.conflicts,
            "cluster": self.cluster,
            "identities": [asdict(c) for c in self.identities],
            "seconds": self.seconds,
        }


async def read_node(inventory: Inventory, node: str, timeout: float) -> NodeCheck:  # noqa: ASYNC109
    """One node's power state through its entry's driver: ``status`` only."""
    started = time.monotonic()
    driver_name = entry_driver(inventory, node)
    if driver_name is None:
        return NodeCheck(node, "", "", "unknown", 0.0, "not in the BMC inventory")
    driver = inventory.driver_for(node)
    if driver is None:
        return NodeCheck(node, driver_name, "", "unknown", 0.0, "no driver for this entry")
    try:
        # The driver bounds each exchange; this bounds the node's whole read (its retries
        # and a close that hangs included), so one dead BMC costs the operator ``timeout``.
        async with asyncio.timeout(timeout + CLOSE_GRACE_SECONDS):
            try:
                reading = await driver.status(timeout)
            finally:
                await driver.close()
    except TimeoutError:
        seconds = round(time.monotonic() - started, 3)
        return NodeCheck(
            node, driver_name, "", "unknown", seconds, f"no answer within {timeout:g}s"
        )
    seconds = round(time.monotonic() - started, 3)
    target = _target(reading.source, driver_name)
    return NodeCheck(node, driver_name, target, reading.state, seconds, reading.detail)


def _target(source: str, driver: str) -> str:
    # A reading's source is "<driver> <where>"; the driver has its own column.
    prefix = f"{driver} "
    return source[len(prefix) :] if source.startswith(prefix) else source


async def read_nodes(
    inventory: Inventory,
    nodes: Sequence[str],
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,  # noqa: ASYNC109
) -> list[NodeCheck]:
    """Each node read at most ``concurrency`` at a time, in the order given."""
    limit = asyncio.Semaphore(max(1, concurrency))

    async def one(node: str) -> NodeCheck:
        async with limit:
            return await read_node(inventory, node, timeout)

    return list(await asyncio.gather(*(one(node) for node in nodes)))


def uncovered_nodes(
    policy: Policy, inventory: Inventory | None, cluster_nodes: Mapping[str, Mapping[str, str]]
) -> list[str]:
    """Cluster nodes some powering rule's node selector matches, without an inventory entry."""
    from nodefence.engine.labels import parse_selector

    powering = [r for r in policy.rules if r.fencing is not None and r.fencing.powers]
    listed = inventory.nodes if inventory is not None else {}
    return sorted(
        name
        for name, labels in cluster_nodes.items()
        if name not in listed
        and any(parse_selector(r.match.node_selector).matches(labels) for r in powering)
    )


async def check_fencing(
    policy: Policy,
    inventory: Inventory | None,
    requested: Sequence[str],
    cluster_nodes: Mapping[str, Mapping[str, str]] | None,
    *,
    cluster_note: str = "",
    concurrency: int = DEFAULT_CONCURRENCY,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,  # noqa: ASYNC109
    identities: Sequence[NodeIdentity] = (),
) -> FencingCheck:
    result = FencingCheck()
    listed = sorted(inventory.nodes) if inventory is not None else []
    names = list(dict.fromkeys(requested)) if requested else listed
    if inventory is not None:
        result.nodes = await read_nodes(inventory, names, concurrency=concurrency, timeout=timeout)
    else:
        result.nodes = [
            NodeCheck(n, "", "", "unknown", 0.0, "no BMC inventory (NODEFENCE_BMC_INVENTORY)")
            for n in names
        ]
    if cluster_nodes is None:
        result.cluster = f"not checked: {cluster_note}" if cluster_note else "not checked"
        result.conflicts = conflicts(policy, inventory) + inventory_problems(inventory)
        return result
    result.cluster = f"checked: {len(cluster_nodes)} nodes"
    wanted = set(requested) if requested else None
    result.uncovered = [
        n
        for n in uncovered_nodes(policy, inventory, cluster_nodes)
        if wanted is None or n in wanted
    ]
    result.conflicts = conflicts(policy, inventory, cluster_nodes.items())
    result.conflicts += inventory_problems(inventory)
    if inventory is not None:
        asked = [i for i in identities if i.name in names]
        result.identities = await identity_problems(
            inventory, asked, timeout=timeout, concurrency=concurrency
        )
    return result


def _identity(checks: Mapping[str, IdentityCheck], node: str) -> str:
    """The identity column: which machine the target reported, and whether it is the Node's."""
    check = checks.get(node)
    if check is None:
        return "-"
    if not check.bound:
        return "NOT THIS NODE'S"
    return f"ok ({check.reported})" if check.reported else "ok"


def as_text(result: FencingCheck) -> str:
    """The table for a person. What a BMC or agent reported (its UUID, its error) is shown
    escaped, never obeyed; cells are aligned as shown."""
    lines = []
    checks = {c.node: c for c in result.identities}
    header = ("NODE", "DRIVER", "STATE", "SECONDS", "IDENTITY", "TARGET", "ERROR")
    rows = [
        tuple(
            printable(cell)
            for cell in (
                n.node,
                n.driver or "-",
                n.state,
                f"{n.seconds:.2f}",
                _identity(checks, n.node),
                n.target or "-",
                n.error or "",
            )
        )
        for n in result.nodes
    ]
    shown = len(header) - 1
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(shown)]
    for row in [header, *rows]:
        lines.append(
            "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:shown]))
            + (f"  {row[shown]}" if row[shown] else "")
        )
    for node in result.uncovered:
        lines.append(f"MISSING  {node}: a fencing rule matches it but the BMC inventory lacks it")
    for problem in result.conflicts:
        lines.append(f"CONFLICT {problem}")
    for check in result.identities:
        if not check.bound:
            lines.append(f"IDENTITY {check.node}: {check.message}")
    lines.append(f"cluster: {result.cluster}")
    answered = sum(1 for n in result.nodes if n.answered)
    verdict = "ok" if result.ok else "NOT OK"
    lines.append(
        f"{verdict}: {answered} of {len(result.nodes)} nodes answered in {result.seconds:.2f}s"
    )
    return printable_lines(lines)
