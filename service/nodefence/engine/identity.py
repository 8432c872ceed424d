"""Which machine a BMC or fence agent controls, and whether it is this node's (S10).

A power-off proves nothing about a node unless the machine it reached is that node's: one wrong
inventory line would otherwise power off a healthy machine and taint a live one. The facts that
tie the two together are on both sides already:

- the Node's ``status.nodeInfo.systemUUID`` (the SMBIOS system UUID the kubelet read from the
  machine) against the Redfish ``ComputerSystem.UUID`` or the IPMI ``Get System GUID`` answer.
  SMBIOS 2.6 and later store the first three fields little-endian, and firmware disagrees on
  whether to swap them back, so the byte-swapped variant is the same machine;
- the Node's ``spec.providerID`` (written by the cloud controller) against the instance id or
  name a fence agent is told to act on (its ``plug``), see :func:`expected_plug`;
- or an explicit ``identity`` in the BMC inventory, for machines whose identity the Node does
  not carry, checked against what the BMC or agent reports.

Everything here is pure: the shell reads, this module judges.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from nodefence.engine.caps import MAX_ALIASES, field

UNCHECKED = "unchecked"
SYSTEM_UUID = "system-uuid"
PLUG = "plug"

# UUIDs that firmware writes when nobody set one: every machine of a batch reports the same, so
# matching one proves nothing about which machine it is.
PLACEHOLDER_UUIDS = frozenset(
    {
        uuid.UUID(int=0),
        uuid.UUID(int=(1 << 128) - 1),
        uuid.UUID("03000200-0400-0500-0006-000700080009"),
    }
)


@dataclass(frozen=True)
class Reported:
    """What a BMC or agent says about the machine it controls: ``value`` is empty when it could
    not be read (``detail`` says why). ``basis`` is what the value is compared with: the Node's
    ``systemUUID`` (a BMC), or the ``plug`` derived from its ``providerID`` for ``agent``."""

    value: str
    source: str
    basis: str = SYSTEM_UUID
    agent: str = ""
    detail: str = ""
    # Other names the target gives the same machine (the alias a fence agent's ``list`` prints
    # beside the plug): a stated identity may be any of them.
    aliases: tuple[str, ...] = ()
    # Where ``value`` names one machine (a plug is one only within its agent's account or
    # host); "" for identities unique everywhere (system UUIDs, cloud instance ids).
    scope: str = ""

    def __post_init__(self) -> None:
        """Kept to the caps of ``engine.caps`` as the BMC or agent says it: the judgement, the
        fence record and every report see the same text, and one target reporting megabytes
        cannot fill the record. A cut value ends in a marker, so it never matches a machine."""
        for name in ("value", "source", "agent", "detail", "scope"):
            object.__setattr__(self, name, field(f"identity.{name}", getattr(self, name)))
        aliases = tuple(field("identity.alias", a) for a in self.aliases[:MAX_ALIASES])
        object.__setattr__(self, "aliases", aliases)


@dataclass(frozen=True)
class MachineBinding:
    """What the BMC inventory says about a node's machine: which target acts on it (no secret in
    it), an explicit identity the machine must report, or ``unchecked`` (no identity can be read,
    e.g. a PDU outlet), and other inventory nodes that resolve to the same machine."""

    node: str
    target: str
    driver: str
    expected: str = ""
    unchecked: bool = False
    shared_with: tuple[str, ...] = ()


@dataclass(frozen=True)
class Judgement:
    """Whether a reported identity shows the target is this node's machine, and why."""

    bound: bool
    message: str
    unchecked: bool = False


def parse_uuid(text: str) -> uuid.UUID | None:
    """A UUID in any of the spellings BMCs and SMBIOS use (upper or lower case, braces,
    ``urn:uuid:``, no dashes); None for anything else."""
    cleaned = text.strip().lower().removeprefix("urn:uuid:").strip("{}")
    try:
        return uuid.UUID(cleaned)
    except ValueError:
        return None


def byte_swapped(value: uuid.UUID) -> uuid.UUID:
    """The same 16 bytes read the other way for the first three fields (SMBIOS's variant)."""
    return uuid.UUID(bytes=value.bytes_le)


def same_machine_uuid(a: str, b: str) -> bool:
    """Whether two system UUIDs name the same machine: equal ignoring case and spelling, or
    equal once the first three fields are byte-swapped. A placeholder UUID never matches."""
    left, right = parse_uuid(a), parse_uuid(b)
    if left is None or right is None:
        return False
    if left in PLACEHOLDER_UUIDS or right in PLACEHOLDER_UUIDS:
        return False
    return left == right or left == byte_swapped(right)


def same_identity(expected: str, reported: str) -> bool:
    """An explicit identity against a report: as UUIDs when both are UUIDs, otherwise the same
    text ignoring case and surrounding blanks. Empty never matches."""
    if not expected.strip() or not reported.strip():
        return False
    if parse_uuid(expected) is not None and parse_uuid(reported) is not None:
        return same_machine_uuid(expected, reported)
    return expected.strip().casefold() == reported.strip().casefold()


def canonical_identity(value: str) -> str:
    """One spelling per identity, so that two inventory entries naming the same machine in
    different spellings are seen to share it (the byte-swapped variant folds to the smaller)."""
    parsed = parse_uuid(value)
    if parsed is None:
        return value.strip().casefold()
    return str(min(parsed, byte_swapped(parsed), key=str))


# ------------------------------------------------------------------ providerID
_AWS_INSTANCE = re.compile(r"^i-[0-9a-f]{8,17}$")
_GCE_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_AZURE_VM = re.compile(
    r"^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.Compute/"
    r"virtualMachines/(?P<name>[^/]+)$",
    re.IGNORECASE,
)
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def provider_parts(provider_id: str) -> tuple[str, str]:
    """``(scheme, rest)`` of a providerID (``aws:///eu-west-1a/i-0abc`` -> ``("aws",
    "/eu-west-1a/i-0abc")``); ``("", "")`` when it has no scheme."""
    scheme, sep, rest = provider_id.strip().partition("://")
    if not sep or not scheme:
        return "", ""
    return scheme.lower(), rest


def instance_of(provider_id: str) -> str | None:
    """The instance a providerID names, in the form the cloud's fence agent takes as its plug;
    None when the providerID is not one of the known forms (see :func:`expected_plug`)."""
    scheme, rest = provider_parts(provider_id)
    parts = [p for p in rest.split("/") if p]
    if scheme == "aws":
        # aws:///<zone>/<instance id>, also aws:////<instance id> without a zone.
        last = parts[-1] if parts else ""
        return last if _AWS_INSTANCE.match(last) else None
    if scheme == "openstack":
        # openstack:///<server uuid>, or openstack://<region>/<server uuid> (Cluster API).
        last = parts[-1] if parts else ""
        return last.lower() if parse_uuid(last) is not None and len(last) == 36 else None
    if scheme == "gce":
        # gce://<project>/<zone>/<instance name>
        if len(parts) != 3 or not _GCE_NAME.match(parts[2]):
            return None
        return parts[2]
    if scheme == "azure":
        # azure:///subscriptions/<id>/resourceGroups/<rg>/providers/Microsoft.Compute/
        # virtualMachines/<name>; a scale set's instances have no name fence_azure_arm takes.
        matched = _AZURE_VM.match("/" + "/".join(parts))
        return matched.group("name") if matched else None
    if scheme == "vsphere":
        # vsphere://<VM BIOS UUID>: the machine's systemUUID, not a name an agent takes.
        last = parts[-1] if len(parts) == 1 else ""
        return last.lower() if parse_uuid(last) is not None else None
    if scheme == "kubevirt":
        # kubevirt://<vm name> (Cluster API KubeVirt) or kubevirt://<namespace>/<vm name>.
        if len(parts) not in (1, 2) or not all(_DNS_LABEL.match(p) for p in parts):
            return None
        return parts[-1]
    return None


# The providerID scheme each agent's plug comes from. fence_vmware_rest takes the VM's name,
# which vsphere:// does not carry (it carries the BIOS UUID, the Node's systemUUID), and
# fence_ironic takes the Ironic node, which no providerID names: both need ``identity`` set in
# the inventory, checked against the plug they are given.
PLUG_SCHEMES: dict[str, str | None] = {
    "fence_aws": "aws",
    "fence_openstack": "openstack",
    "fence_gce": "gce",
    "fence_azure_arm": "azure",
    "fence_kubevirt": "kubevirt",
    "fence_vmware_rest": None,
    "fence_ironic": None,
}


def agent_name(agent: str) -> str:
    """``/usr/sbin/fence_aws`` -> ``fence_aws``."""
    return agent.rstrip("/").rsplit("/", 1)[-1]


def expected_plug(agent: str, provider_id: str) -> str | None:
    """The ``plug`` a fence agent must be given to act on the machine of the Node whose
    ``spec.providerID`` is ``provider_id``; None when it cannot be derived (an agent not listed
    in :data:`PLUG_SCHEMES`, a providerID of another cloud, or a form not recognised), and the
    inventory must then state ``identity`` (or ``identity: unchecked``).

    - fence_aws: the EC2 instance id of ``aws:///<zone>/i-...``
    - fence_openstack: the Nova server UUID of ``openstack:///<uuid>`` (or
      ``openstack://<region>/<uuid>``)
    - fence_gce: the instance name of ``gce://<project>/<zone>/<name>``
    - fence_azure_arm: the VM name of ``azure:///subscriptions/.../virtualMachines/<name>``
    - fence_kubevirt: the VirtualMachine name of ``kubevirt://[<namespace>/]<name>``
    - fence_vmware_rest, fence_ironic: None (their plug is a name no providerID carries)
    """
    name = agent_name(agent)
    scheme = PLUG_SCHEMES.get(name)
    if scheme is None or provider_parts(provider_id)[0] != scheme:
        return None
    return instance_of(provider_id)


# ---------------------------------------------------------------------- judge
def _also_named(names: list[str], node: str, provider_id: str) -> str:
    """What else ties a listed machine to the Node: its name, or the instance its providerID
    names, among the names the target gives the machine (recorded, never required)."""
    instance = instance_of(provider_id) if provider_id else None
    for name in names:
        if same_identity(node, name):
            return f"; the target also names it {name}, the Node's name"
        if instance is not None and same_identity(instance, name):
            return f"; the target also names it {name}, the instance in its providerID"
    return ""


def contradicted(
    stated: str,
    *,
    uuid_basis: bool,
    agent: str = "",
    system_uuid: str,
    provider_id: str,
    listed: tuple[str, ...] = (),
) -> str:
    """Why an inventory's stated ``identity`` contradicts what the Node itself carries, or "".

    A statement is for machines that report nothing the Node carries; where the Node does carry
    it, the Node is the other witness, and a statement that disagrees with it is the very
    mistake (two rows swapped, each with the other's identity) that would power off another
    node's machine while each entry looks consistent on its own:

    - a target that reports a system UUID (Redfish, IPMI, fence_redfish, fence_ipmilan): the
      Node's own ``systemUUID``, when it is one a machine can be told apart by;
    - a fence agent whose plug the Node's ``providerID`` names (``listed``: the plug and aliases
      the agent's ``list`` gives for the stated identity): that instance must be among them.
    """
    if uuid_basis:
        node_uuid = parse_uuid(system_uuid)
        if node_uuid is None or node_uuid in PLACEHOLDER_UUIDS:
            return ""
        if same_machine_uuid(stated, system_uuid):
            return ""
        return (
            f"the BMC inventory states identity {stated}, but the Node reports systemUUID "
            f"{system_uuid}: a statement that contradicts the Node is no proof (state an "
            "identity only for a machine whose UUID the Node does not carry)"
        )
    plug = expected_plug(agent, provider_id) if agent and provider_id else None
    if plug is None or not listed:
        return ""
    if any(same_identity(plug, name) for name in listed):
        return ""
    return (
        f"the BMC inventory states identity {stated}, and {agent_name(agent)} lists it as "
        f"{', '.join(listed)}, but the Node's providerID {provider_id} names {plug}: a "
        "statement that contradicts the Node is no proof"
    )


def judge(
    binding: MachineBinding | None,
    reported: Reported | None,
    *,
    node: str,
    system_uuid: str,
    provider_id: str,
    uuid_shared_with: tuple[str, ...] = (),
) -> Judgement:
    """Whether ``reported`` shows that ``binding``'s target is ``node``'s machine. Anything short
    of a positive match is not bound: no inventory entry, a target two nodes share, an identity
    that could not be read, nothing on the Node to compare with, or another machine's identity.
    ``uuid_shared_with`` names other Nodes reporting the same systemUUID (cloned VMs): then
    matching it cannot tell the machines apart either."""
    if binding is None:
        return Judgement(False, f"node {node} has no entry in the BMC inventory")
    target = binding.target
    if binding.shared_with:
        names = ", ".join(sorted({node, *binding.shared_with}))
        return Judgement(
            False,
            f"the BMC inventory maps nodes {names} to one machine ({target}): a power state "
            "read there proves nothing about any of them",
        )
    if binding.unchecked:
        return Judgement(
            True,
            f"identity unchecked: the BMC inventory says identity: unchecked for node {node} "
            f"({target}), so nothing shows this target controls its machine",
            unchecked=True,
        )
    if reported is None:
        return Judgement(False, f"the identity of {target} was not read")
    if not reported.value.strip():
        why = f" ({reported.detail})" if reported.detail else ""
        return Judgement(
            False,
            f"{reported.source} did not report which machine it controls{why}: not shown to "
            f"be node {node}'s machine",
        )
    said = reported.value.strip()
    if binding.expected:
        return _against_stated(
            binding, reported, said, node=node, system_uuid=system_uuid, provider_id=provider_id
        )
    if reported.basis == PLUG:
        return _against_plug(reported, said, node, provider_id)
    return _against_uuid(reported, said, node, system_uuid, uuid_shared_with)


def _against_stated(
    binding: MachineBinding,
    reported: Reported,
    said: str,
    *,
    node: str,
    system_uuid: str,
    provider_id: str,
) -> Judgement:
    """The identity the BMC inventory states for the node, against what the target reports
    (any of its spellings) and against what the Node itself says."""
    spellings = [said, *(a.strip() for a in reported.aliases if a.strip())]
    against = contradicted(
        binding.expected,
        uuid_basis=reported.basis == SYSTEM_UUID,
        agent=reported.agent,
        system_uuid=system_uuid,
        provider_id=provider_id,
        listed=tuple(spellings) if reported.basis == PLUG else (),
    )
    if against:
        return Judgement(False, f"configuration error: node {node}: {against}")
    shown = said + "".join(f" ({alias})" for alias in spellings[1:])
    if any(same_identity(binding.expected, name) for name in spellings):
        return Judgement(
            True,
            f"identity matched: {reported.source} reports {shown}, the identity the BMC "
            f"inventory gives node {node}" + _also_named(spellings, node, provider_id),
        )
    return Judgement(
        False,
        f"identity mismatch: {reported.source} reports {shown}, but the BMC inventory says "
        f"node {node}'s machine is {binding.expected}: it controls another machine",
    )


def _against_plug(reported: Reported, said: str, node: str, provider_id: str) -> Judgement:
    """A fence agent's plug, against the instance the Node's providerID names."""
    plug = expected_plug(reported.agent, provider_id)
    if plug is None:
        where = f"providerID {provider_id!r}" if provider_id else "no providerID"
        return Judgement(
            False,
            f"node {node} has {where}, from which no {agent_name(reported.agent) or 'agent'} "
            "plug can be derived, and the BMC inventory names no identity: set identity "
            "(or identity: unchecked) for it",
        )
    if same_identity(plug, said):
        return Judgement(
            True,
            f"identity matched: {reported.source} acts on {said}, the instance in node "
            f"{node}'s providerID {provider_id}",
        )
    return Judgement(
        False,
        f"identity mismatch: {reported.source} acts on {said}, but node {node}'s "
        f"providerID {provider_id} names {plug}: it controls another machine",
    )


def _against_uuid(
    reported: Reported, said: str, node: str, system_uuid: str, uuid_shared_with: tuple[str, ...]
) -> Judgement:
    """A BMC's system UUID, against the Node's systemUUID, which only one Node may report."""
    if not system_uuid.strip():
        return Judgement(
            False,
            f"node {node} reports no systemUUID and the BMC inventory names no identity, so "
            f"{reported.source} (UUID {said}) cannot be shown to be its machine",
        )
    if parse_uuid(said) in PLACEHOLDER_UUIDS:
        return Judgement(
            False,
            f"{reported.source} reports the placeholder UUID {said}, which many machines "
            f"share: not shown to be node {node}'s machine (where its firmware cannot be given "
            "its own UUID, the BMC inventory must say identity: unchecked)",
        )
    if uuid_shared_with:
        return Judgement(
            False,
            f"node {node}'s systemUUID {system_uuid} is also reported by "
            f"{', '.join(uuid_shared_with)}: a BMC reporting it cannot tell the machines apart",
        )
    if same_machine_uuid(system_uuid, said):
        return Judgement(
            True,
            f"identity matched: {reported.source} reports UUID {said}, node {node}'s systemUUID",
        )
    return Judgement(
        False,
        f"identity mismatch: {reported.source} reports UUID {said}, but node {node}'s "
        f"systemUUID is {system_uuid}: it controls another machine",
    )
