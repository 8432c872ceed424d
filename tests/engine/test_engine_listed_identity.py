"""S10 for an identity stated in the inventory and read from a fence agent's ``list``: the
judgement binds a node to the machine exactly when the stated identity is the listed plug or
one of the names listed beside it, never on an empty read, and says which names it saw."""

from __future__ import annotations

import pytest
from engine_strategies import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from nodefence.engine.identity import PLUG, MachineBinding, Reported, judge, same_identity

pytestmark = pytest.mark.invariant("S10")

NODE = "compute01"
NAMES = st.sampled_from(["vm-a", "VM-A ", "vm-b", "compute01", "compute02", "", " "])


@settings(max_examples=examples(400), deadline=None)
@given(
    expected=NAMES.filter(lambda n: n.strip() != ""),
    value=NAMES,
    aliases=st.lists(NAMES, max_size=2).map(tuple),
    provider_id=st.sampled_from(["", "openstack:///5f0c6e1a-7d2b-4c1e-9a3f-0b8e2d4c6a10"]),
)
def test_a_listed_identity_binds_exactly_when_a_listed_name_is_the_stated_one(
    expected: str, value: str, aliases: tuple[str, ...], provider_id: str
) -> None:
    binding = MachineBinding(
        node=NODE, target="fence-agent x plug=p", driver="fence-agent", expected=expected
    )
    said = Reported(value, "fence-agent x (its list)", basis=PLUG, agent="x", aliases=aliases)
    verdict = judge(binding, said, node=NODE, system_uuid="", provider_id=provider_id)
    names = [value.strip(), *(a.strip() for a in aliases if a.strip())] if value.strip() else []
    assert verdict.bound is any(same_identity(expected, n) for n in names), verdict.message
    if not value.strip():
        assert not verdict.bound
    if verdict.bound:
        assert "identity matched" in verdict.message
        if any(same_identity(NODE, n) for n in names):
            assert "the Node's name" in verdict.message
    elif value.strip():
        assert "identity mismatch" in verdict.message
        assert value.strip() in verdict.message
