"""The identity a proof must come from (S10): system UUIDs in every spelling BMCs use, the
instance a providerID names for each cloud's fence agent, and the judgement on them; then, for
any facts, no fence when the target is not shown to be this node's machine."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import pytest
from engine_factories import NODE, NOW, ago
from engine_strategies import PROFILE, Case, all_decisions, cases, own
from hypothesis import given
from hypothesis import strategies as st

from nodefence.engine.decide import decide, decide_reconcile
from nodefence.engine.evidence import PowerEvidence
from nodefence.engine.identity import (
    PLUG,
    MachineBinding,
    Reported,
    byte_swapped,
    canonical_identity,
    expected_plug,
    instance_of,
    judge,
    same_identity,
    same_machine_uuid,
)
from nodefence.engine.machine import IDENTITY
from nodefence.engine.model import (
    ClaimAction,
    Decision,
    Facts,
    FenceAction,
    PowerAction,
    ProofContradictedAction,
    UnfenceAction,
)
from nodefence.engine.record import with_entry
from nodefence.policy import Policy, parse_policy

pytestmark = pytest.mark.invariant("S10")

MACHINE = "4C4C4544-0042-3510-8044-B4C04F4E3732"
# The same machine as some firmware reports it: first three fields little-endian.
MACHINE_SWAPPED = "44454C4C-4200-1035-8044-B4C04F4E3732"
OTHER_MACHINE = "4C4C4544-0042-3510-8044-B4C04F4E3733"


# ------------------------------------------------------------------------------ UUIDs
@pytest.mark.parametrize(
    "spelling",
    [
        MACHINE,
        MACHINE.lower(),
        MACHINE_SWAPPED,
        MACHINE_SWAPPED.lower(),
        "{" + MACHINE + "}",
        "urn:uuid:" + MACHINE.lower(),
        MACHINE.replace("-", ""),
    ],
)
def test_every_spelling_of_a_machines_uuid_is_that_machine(spelling: str) -> None:
    assert same_machine_uuid(MACHINE, spelling)
    assert same_machine_uuid(spelling, MACHINE)
    assert canonical_identity(spelling) == canonical_identity(MACHINE)


@pytest.mark.parametrize(
    "other",
    [
        OTHER_MACHINE,
        "",
        "not-a-uuid",
        "00000000-0000-0000-0000-000000000000",
        "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF",
        "03000200-0400-0500-0006-000700080009",
    ],
)
def test_another_machine_or_a_placeholder_is_never_this_machine(other: str) -> None:
    assert not same_machine_uuid(MACHINE, other)
    assert not same_machine_uuid(other, other) or other == OTHER_MACHINE


def test_the_swap_is_its_own_inverse() -> None:
    value = uuid.UUID(MACHINE)
    assert str(byte_swapped(value)).upper() == MACHINE_SWAPPED
    assert byte_swapped(byte_swapped(value)) == value


def test_explicit_identities_compare_as_uuids_or_as_names() -> None:
    assert same_identity(MACHINE.lower(), MACHINE_SWAPPED)
    assert same_identity("PDU-3 outlet 7 ", "pdu-3 outlet 7")
    assert not same_identity("vm-a", "vm-b")
    assert not same_identity("", "")


# ------------------------------------------------------------------------- providerID
@pytest.mark.parametrize(
    ("agent", "provider_id", "plug"),
    [
        ("fence_aws", "aws:///eu-west-1a/i-0123456789abcdef0", "i-0123456789abcdef0"),
        ("/usr/sbin/fence_aws", "aws:////i-0abc1234", "i-0abc1234"),
        (
            "fence_openstack",
            "openstack:///5f0c4a8e-2b1d-4c3a-9e8f-1a2b3c4d5e6f",
            "5f0c4a8e-2b1d-4c3a-9e8f-1a2b3c4d5e6f",
        ),
        (
            "fence_openstack",
            "openstack://RegionOne/5F0C4A8E-2B1D-4C3A-9E8F-1A2B3C4D5E6F",
            "5f0c4a8e-2b1d-4c3a-9e8f-1a2b3c4d5e6f",
        ),
        ("fence_gce", "gce://my-project/europe-west1-b/worker-3", "worker-3"),
        (
            "fence_azure_arm",
            "azure:///subscriptions/0000-1111/resourceGroups/rg-k8s/providers/"
            "Microsoft.Compute/virtualMachines/worker-7",
            "worker-7",
        ),
        ("fence_kubevirt", "kubevirt://tenant-a/worker-2", "worker-2"),
        ("fence_kubevirt", "kubevirt://worker-2", "worker-2"),
    ],
)
def test_the_plug_each_agent_must_be_given(agent: str, provider_id: str, plug: str) -> None:
    assert expected_plug(agent, provider_id) == plug


@pytest.mark.parametrize(
    ("agent", "provider_id"),
    [
        # Another cloud's providerID never yields a plug.
        ("fence_aws", "gce://p/z/worker-3"),
        ("fence_openstack", "aws:///eu-west-1a/i-0123456789abcdef0"),
        # Forms that name no instance the agent takes.
        ("fence_aws", "aws:///eu-west-1a/not-an-instance"),
        ("fence_openstack", "openstack:///worker-3"),
        ("fence_gce", "gce://my-project/worker-3"),
        (
            "fence_azure_arm",
            "azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/"
            "virtualMachineScaleSets/pool/virtualMachines/3",
        ),
        ("fence_kubevirt", "kubevirt://a/b/c"),
        # Agents whose plug no providerID carries: identity must be stated.
        ("fence_vmware_rest", "vsphere://4237d1b0-8c3a-4e57-9f2b-6a1c0b2d3e4f"),
        ("fence_ironic", "openstack:///5f0c4a8e-2b1d-4c3a-9e8f-1a2b3c4d5e6f"),
        ("fence_redfish", "aws:///eu-west-1a/i-0123456789abcdef0"),
        ("fence_aws", ""),
        ("fence_aws", "i-0123456789abcdef0"),
    ],
)
def test_no_plug_where_the_provider_id_does_not_say(agent: str, provider_id: str) -> None:
    assert expected_plug(agent, provider_id) is None


def test_a_vsphere_provider_id_carries_the_machines_uuid() -> None:
    assert instance_of("vsphere://4237D1B0-8C3A-4E57-9F2B-6A1C0B2D3E4F") == (
        "4237d1b0-8c3a-4e57-9f2b-6a1c0b2d3e4f"
    )


# ------------------------------------------------------------------------------ judge
def bind(**overrides: Any) -> MachineBinding:
    values: dict[str, Any] = {"node": NODE, "target": "redfish https://bmc/1", "driver": "redfish"}
    values.update(overrides)
    return MachineBinding(**values)


def test_judgements_say_why() -> None:
    said = Reported(MACHINE_SWAPPED, "redfish https://bmc/1")
    cases_ = [
        (bind(), said, MACHINE, "", True, "identity matched"),
        (bind(), said, OTHER_MACHINE, "", False, "identity mismatch"),
        (
            bind(),
            Reported("", "redfish https://bmc/1", detail="HTTP 401"),
            MACHINE,
            "",
            False,
            "HTTP 401",
        ),
        (bind(), said, "", "", False, "reports no systemUUID"),
        (None, said, MACHINE, "", False, "no entry in the BMC inventory"),
        (bind(shared_with=("worker-2",)), said, MACHINE, "", False, "to one machine"),
        (bind(unchecked=True), None, "", "", True, "identity unchecked"),
        (bind(expected=OTHER_MACHINE), said, MACHINE, "", False, "contradicts the Node"),
        (bind(expected=OTHER_MACHINE), said, "", "", False, "the BMC inventory says"),
        # The statement agreeing with the report but not with the Node: swapped rows.
        (bind(expected=MACHINE.lower()), said, OTHER_MACHINE, "", False, "contradicts the Node"),
        (bind(expected=MACHINE.lower()), said, "", "", True, "identity matched"),
    ]
    for binding, reported, system_uuid, provider_id, bound, words in cases_:
        verdict = judge(
            binding, reported, node=NODE, system_uuid=system_uuid, provider_id=provider_id
        )
        assert verdict.bound is bound, verdict.message
        assert words in verdict.message, verdict.message


def test_an_agents_plug_is_judged_against_the_provider_id() -> None:
    binding = bind(driver="fence-agent", target="fence-agent fence_aws plug=i-0abc1234")
    plug = Reported("i-0abc1234", "fence-agent fence_aws", basis=PLUG, agent="fence_aws")
    right, wrong = "aws:///z/i-0abc1234", "aws:///z/i-0def5678"
    assert judge(binding, plug, node=NODE, system_uuid="", provider_id=right).bound
    mismatch = judge(binding, plug, node=NODE, system_uuid="", provider_id=wrong)
    assert not mismatch.bound
    assert "i-0def5678" in mismatch.message
    missing = judge(binding, plug, node=NODE, system_uuid="", provider_id="")
    assert not missing.bound
    assert "set identity" in missing.message


def test_cloned_machines_sharing_a_uuid_prove_nothing() -> None:
    said = Reported(MACHINE, "redfish https://bmc/1")
    verdict = judge(
        bind(),
        said,
        node=NODE,
        system_uuid=MACHINE,
        provider_id="",
        uuid_shared_with=("worker-9",),
    )
    assert not verdict.bound
    assert "worker-9" in verdict.message


# ---------------------------------------------------------------------------- S10 property
def powering(policy: Policy, action: str) -> Policy:
    """The case's policy with its rule proving power-off through a BMC."""
    data = policy.model_dump(mode="json")
    data["rules"][0]["fencing"] = {"driver": "redfish", "action": action}
    data["rules"][0]["approval"] = "none"
    return parse_policy(data, "<generated>")


unbound_identities = st.one_of(
    # Another machine, in any spelling.
    st.sampled_from([OTHER_MACHINE, OTHER_MACHINE.lower(), "8a5c2c4e-1d6b-4a55-9d0e-00000000ffff"]),
    # Nothing read, or a placeholder many machines share.
    st.sampled_from(["", "00000000-0000-0000-0000-000000000000", "garbage"]),
)
bindings = st.one_of(
    st.just(bind()),
    st.just(bind(shared_with=("worker-2",))),
    st.just(bind(expected=OTHER_MACHINE)),
    st.none(),
)


def fences(decision: Decision) -> bool:
    return any(isinstance(a, FenceAction) for a in decision.actions)


@PROFILE
@given(
    case=cases,
    action=st.sampled_from(["verify", "off", "reboot"]),
    reported=unbound_identities,
    binding=bindings,
    state=st.sampled_from(["off", "off", "off", "on", "unknown"]),
    system_uuid=st.sampled_from([MACHINE, MACHINE.lower(), ""]),
)
def test_s10_no_taint_unless_the_target_is_shown_to_be_this_nodes_machine(
    *,
    case: Case,
    action: str,
    reported: str,
    binding: MachineBinding | None,
    state: str,
    system_uuid: str,
) -> None:
    """Whatever else the facts say: a proof read from a target that reported another machine,
    nothing, a placeholder, or that the inventory gives two nodes (or none), never leads to a
    taint; and a target two nodes share is never even asked to power off."""
    event, facts, policy, approval = case
    policy = powering(policy, action)
    node = facts.node
    if node is not None:
        node = dataclasses.replace(node, system_uuid=system_uuid)
    if binding is not None and binding.expected == OTHER_MACHINE and reported == OTHER_MACHINE:
        reported = MACHINE  # a stated identity is the one to miss
    evidence = PowerEvidence(
        state,
        "redfish https://bmc/1",
        identity=Reported(reported, "redfish https://bmc/1"),
        action_sent=True,
        reset_sent=True,
        at=NOW,
    )
    with_proof = dataclasses.replace(facts, node=node, machine=binding, power=evidence)
    without: Facts = dataclasses.replace(with_proof, power=None)
    for decision in (
        decide(event, with_proof, policy, NOW, approval=approval),
        decide_reconcile(with_proof, policy, NOW, NODE),
    ):
        assert not fences(decision), decision.reasons
        if (
            event.status.value == "firing"
            and decision.node == NODE
            and decision.verdict.value == "fence"
        ):
            pytest.fail(f"fence verdict without a bound proof: {decision.reasons}")
    shared = binding is not None and binding.shared_with
    asked = decide(event, without, policy, NOW, approval=approval)
    if shared:
        assert not any(isinstance(a, PowerAction | ClaimAction) for a in asked.actions), asked
    blocked = [r for r in asked.reasons if r.guard == IDENTITY and not r.passed]
    assert not (shared and fences(asked))
    assert all("no power action" in r.message or "one machine" in r.message for r in blocked)


@PROFILE
@given(case=cases, spelling=st.sampled_from([MACHINE, MACHINE.lower(), MACHINE_SWAPPED]))
def test_s10_a_matching_identity_never_blocks_on_its_own(case: Case, spelling: str) -> None:
    """The other direction: a target reporting the node's own machine, in any spelling, passes
    the identity guard (whatever the other guards then say)."""
    event, facts, policy, approval = case
    policy = powering(policy, "off")
    if facts.node is None:
        return
    node = dataclasses.replace(facts.node, system_uuid=MACHINE)
    evidence = PowerEvidence(
        "off", "redfish https://bmc/1", identity=Reported(spelling, "redfish"), at=NOW
    )
    proven = dataclasses.replace(facts, node=node, machine=bind(), power=evidence)
    decision = decide(event, proven, policy, NOW, approval=approval)
    assert not [r for r in decision.reasons if r.guard == IDENTITY and not r.passed]


@PROFILE
@given(
    case=cases,
    action=st.sampled_from(["verify", "off", "reboot"]),
    held=st.booleans(),
    same_boot=st.booleans(),
)
def test_s10_a_fence_whose_proof_was_contradicted_is_never_released_by_nodefence(
    case: Case, action: str, *, held: bool, same_boot: bool
) -> None:
    """A node fenced on a BMC's Off that is back with its fence-time boot ID, or whose fence
    the record already holds as contradicted, is never unfenced, whatever else the facts say;
    the first sighting is written down, a later one only repeated."""
    event, facts, policy, approval = case
    policy = powering(policy, action)
    node, entry = facts.node, own(facts)
    if node is None or entry is None or not (held or same_boot):
        return
    boot_id = node.boot_id if same_boot else f"{node.boot_id}-before"
    entry = dataclasses.replace(
        entry, boot_id=boot_id, proof_contradicted_at=ago(60) if held else None
    )
    facts = dataclasses.replace(facts, record=with_entry(facts.record, entry))
    for decision in all_decisions(event, facts, policy, approval):
        assert not any(isinstance(a, UnfenceAction) for a in decision.actions), decision
        marks = [a for a in decision.actions if isinstance(a, ProofContradictedAction)]
        assert not (held and marks), "a held fence is marked once, not again"


@pytest.mark.invariant("S11")
@PROFILE
@given(case=cases)
def test_s11_a_contradicted_proof_is_written_down_only_on_the_api_servers_clock(
    case: Case,
) -> None:
    """Back with its fence-time boot ID: the taint is kept on any clock, but the finding is
    recorded only where the API server's clock is known."""
    event, facts, policy, approval = case
    policy = powering(policy, "off")
    node, entry = facts.node, own(facts)
    if node is None or entry is None:
        return
    entry = dataclasses.replace(entry, boot_id=node.boot_id)
    facts = dataclasses.replace(facts, record=with_entry(facts.record, entry), clock="local")
    for decision in all_decisions(event, facts, policy, approval):
        assert not any(isinstance(a, UnfenceAction) for a in decision.actions)
        assert not any(isinstance(a, ProofContradictedAction) for a in decision.actions)
