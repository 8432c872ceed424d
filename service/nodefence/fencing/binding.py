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
    UNCHECKED,
    MachineBinding,
    Reported,
    canonical_identity,
    contradicted,
    judge,
    parse_uuid,
)
from nodefence.fencing.agent_identity import entry_problems, reads_machine_uuid
from nodefence.fencing.fence_agent import TARGET_KEYS
from nodefence.fencing.inventory import FenceAgentBmc, Inventory, IpmiBmc, RedfishBmc
from nodefence.fencing.redfish import base_url, system_path
from nodefence.fencing.same_machine import machine_keys

DEFAULT_CONCURRENCY = 8


def target_of(entry: RedfishBmc | IpmiBmc | FenceAgentBmc) -> str:
    """The machine an entry acts on, spelled the same for every entry that reaches it: a
    Redfish service's origin and system path (or its only system), an IPMI address and port,
    a fence agent and the parameters that pick the machine."""
    if isinstance(entry, RedfishBmc):
        system = system_path(entry.system) if entry.system else " (its only system)"
        return f"redfish {base_url(entry.address)}{system}"
    if isinstance(entry, IpmiBmc):
        return f"ipmi {entry.address.strip().lower()}:{entry.port}"
    picked = [
        f"{key}={value.strip()}"
        for key in TARGET_KEYS
        if isinstance(value := entry.parameters.get(key), str)
    ]
    return " ".join([f"fence-agent {entry.agent}", *picked])


def _explicit(entry: RedfishBmc | IpmiBmc | FenceAgentBmc) -> str:
    value = (entry.identity or "").strip()
    return "" if value.lower() == UNCHECKED else value


def _unchecked(entry: RedfishBmc | IpmiBmc | FenceAgentBmc) -> bool:
    return (entry.identity or "").strip().lower() == UNCHECKED


def shared(inventory: Inventory) -> dict[str, tuple[str, ...]]:
    """For every node that shares its machine with another: the others. Two entries share a
    machine when they reach the same target, or state the same identity."""
    groups: dict[str, set[str]] = {}
    for node, entry in inventory.nodes.items():
        groups.setdefault("target " + target_of(entry), set()).add(node)
        for key in machine_keys(entry):
            groups.setdefault("machine " + key, set()).add(node)
        explicit = _explicit(entry)
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
        target=target_of(entry),
        driver=entry.driver,
        expected=_explicit(entry),
        unchecked=_unchecked(entry),
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
        targets = sorted({target_of(inventory.nodes[n]) for n in names})
        problems.append(
            f"configuration error: the BMC inventory maps nodes {', '.join(names)} to one "
            f"machine ({'; '.join(targets)}): a power state read there proves nothing about "
            "any of them, so none of them is fenced through it (give each node its own system)"
        )
    for node, entry in sorted(inventory.nodes.items()):
        explicit = _explicit(entry)
        if explicit and entry.driver in ("redfish", "ipmi") and parse_uuid(explicit) is None:
            problems.append(
                f"configuration error: node {node}: identity {explicit!r} is not a UUID, and a "
                f"{entry.driver} BMC reports the machine's UUID"
            )
        if isinstance(entry, FenceAgentBmc):
            problems += entry_problems(node, entry.agent, entry.parameters, entry.identity)
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
        if entry is None or not (stated := _explicit(entry)):
            continue
        uuid_basis = not isinstance(entry, FenceAgentBmc) or reads_machine_uuid(entry.agent)
        if not uuid_basis:
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
