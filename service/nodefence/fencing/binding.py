"""Which machine each inventory entry reaches, and whether two nodes reach the same one (S10).

The power step asks the target which machine it controls before any power action and again with
the proof (``nodefence.engine.machine``); this module gives it the inventory's side: the target
as a person reads it (no secret), the identity the entry states, and the other nodes resolving to
the same target. ``check-config`` reports :func:`inventory_problems` without touching a BMC;
``check-fencing`` can call :func:`identity_problems` to ask every BMC which machine it controls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from nodefence.engine.identity import (
    MachineBinding,
    Reported,
    canonical_identity,
    contradicted,
    judge,
)
from nodefence.fencing.inventory import Inventory

DEFAULT_CONCURRENCY = 8


def shared(inventory: Inventory) -> dict[str, tuple[str, ...]]:
    """For every node that shares its machine with another: the others. Two entries share a
    machine when they reach the same target, spell the same machine another way (``redfish``
    at ``https://10.0.0.11`` and ``fence_redfish`` at ``ip: 10.0.0.11:443``, the entries'
    ``machine_keys``), or state the same identity. What only the BMCs can tell (a host name and
    its address, two addresses of one BMC) is left to the UUIDs they report
    (:func:`identity_problems`) and the judgement before every power action."""
    groups: dict[str, set[str]] = {}
    for node, entry in inventory.nodes.items():
        groups.setdefault("target " + entry.target(), set()).add(node)
        for key in entry.machine_keys():
            groups.setdefault("machine " + key, set()).add(node)
        explicit = entry.stated()
        if explicit:
            groups.setdefault("identity " + canonical_identity(explicit), set()).add(node)
    others: dict[str, set[str]] = {}
    for members in groups.values():
        if len(members) > 1:
            for node in members:
                others.setdefault(node, set()).update(members - {node})
    return {node: tuple(sorted(names)) for node, names in sorted(others.items())}


def machine_binding(
    inventory: Inventory | None,
    node: str,
    shared_with: Mapping[str, tuple[str, ...]] | None = None,
) -> MachineBinding | None:
    """What the inventory says of ``node``'s machine, for the engine's facts; None without an
    entry. ``shared_with`` is :func:`shared`'s answer when the caller has it already."""
    if inventory is None:
        return None
    entry = inventory.nodes.get(node)
    if entry is None:
        return None
    sharing = shared(inventory) if shared_with is None else shared_with
    return MachineBinding(
        node=node,
        target=entry.target(),
        driver=entry.driver,
        expected=entry.stated(),
        unchecked=entry.unchecked(),
        shared_with=sharing.get(node, ()),
    )


def inventory_problems(inventory: Inventory | None) -> list[str]:
    """Configuration errors visible in the inventory alone: machines two nodes share, and
    identities that cannot be compared (neither a UUID nor a name a machine could report)."""
    if inventory is None:
        return []
    problems: list[str] = []
    reported: set[frozenset[str]] = set()
    for node, others in shared(inventory).items():
        group = frozenset({node, *others})
        if group in reported:
            continue
        reported.add(group)
        names = sorted(group)
        targets = sorted({inventory.nodes[n].target() for n in names})
        problems.append(
            f"configuration error: the BMC inventory maps nodes {', '.join(names)} to one "
            f"machine ({'; '.join(targets)}): a power state read there proves nothing about "
            "any of them, so none of them is fenced through it (give each node its own system)"
        )
    for node, entry in sorted(inventory.nodes.items()):
        problems += entry.problems(node)
    return problems


def _machine_read(reported: Reported) -> str:
    """One machine's name as read, the same for two targets that reached it: a system UUID
    from a native driver or through an agent's BMC alike, a plug within its agent's scope."""
    return f"{reported.basis} {reported.scope} {canonical_identity(reported.value)}"


@dataclass(frozen=True)
class NodeIdentity:
    """One node's side of the check: the facts its Node carries."""

    name: str
    system_uuid: str = ""
    provider_id: str = ""


def stated_identity_problems(inventory: Inventory, nodes: Iterable[NodeIdentity]) -> list[str]:
    """Stated identities that contradict the systemUUID their own Node reports, found without
    asking any BMC (``check-config`` with the cluster): the target reports a system UUID, so
    the Node is a second witness the statement must agree with. A plug's statement is judged
    on the agent's own ``list`` (``check-fencing``, and at fence time)."""
    problems: list[str] = []
    for node in sorted(nodes, key=lambda n: n.name):
        entry = inventory.nodes.get(node.name)
        if entry is None or not (stated := entry.stated()) or not entry.reads_uuid():
            continue
        against = contradicted(
            stated, uuid_basis=True, system_uuid=node.system_uuid, provider_id=node.provider_id
        )
        if against:
            problems.append(f"configuration error: node {node.name}: {against}")
    return problems


@dataclass(frozen=True)
class IdentityCheck:
    node: str
    target: str
    bound: bool
    message: str
    reported: str = ""


async def identity_problems(
    inventory: Inventory,
    nodes: Iterable[NodeIdentity],
    *,
    timeout: float = 10.0,  # noqa: ASYNC109
    concurrency: int = DEFAULT_CONCURRENCY,
) -> list[IdentityCheck]:
    """Ask each listed node's BMC or agent which machine it controls (read-only, at most
    ``concurrency`` at once) and judge the answer against the Node; two nodes whose targets
    report one machine are both unbound. One entry per node, in name order."""
    sharing = shared(inventory)
    limit = asyncio.Semaphore(concurrency)

    async def read(node: NodeIdentity) -> tuple[NodeIdentity, MachineBinding, Reported | None]:
        binding = machine_binding(inventory, node.name, sharing)
        assert binding is not None
        if binding.unchecked or binding.shared_with:
            return node, binding, None
        driver = inventory.driver_for(node.name)
        if driver is None:
            return node, binding, Reported("", binding.target, detail="no driver for the entry")
        async with limit:
            try:
                return node, binding, await driver.identity(timeout)
            finally:
                await driver.close()

    listed = [n for n in nodes if n.name in inventory.nodes]
    answers = await asyncio.gather(*(read(n) for n in listed))
    by_machine: dict[str, list[str]] = {}
    for node, _binding, reported in answers:
        if reported is not None and reported.value.strip():
            key = _machine_read(reported)
            by_machine.setdefault(key, []).append(node.name)
    checks: list[IdentityCheck] = []
    for node, binding, reported in sorted(answers, key=lambda a: a[0].name):
        said = reported.value.strip() if reported is not None else ""
        key = _machine_read(reported) if reported is not None else ""
        twins = sorted(set(by_machine.get(key, [])) - {node.name}) if said else []
        if twins:
            checks.append(
                IdentityCheck(
                    node.name,
                    binding.target,
                    False,
                    f"{binding.target} reports the machine {said}, as the target of "
                    f"{', '.join(twins)} does: one machine for several nodes proves nothing "
                    "about any of them",
                    said,
                )
            )
            continue
        verdict = judge(
            binding,
            reported,
            node=node.name,
            system_uuid=node.system_uuid,
            provider_id=node.provider_id,
        )
        checks.append(
            IdentityCheck(node.name, binding.target, verdict.bound, verdict.message, said)
        )
    return checks
