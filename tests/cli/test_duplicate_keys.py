"""A key given twice in a policy or BMC inventory is refused, naming the key and both lines, and
nothing of the file is used: YAML's "the last wins" would otherwise let a copied inventory entry
power off another node's machine, or a second ``max_fenced_nodes`` raise the budget unseen."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodefence import strict_yaml
from nodefence.fencing.inventory import InventoryError, load_inventory
from nodefence.policy import PolicyError, load_policy

INVENTORY = """\
nodes:
  compute01:
    driver: redfish
    address: http://127.0.0.1:9/
    system: /redfish/v1/Systems/compute01
    username: admin
    password: hunter2-compute01
  compute01:
    driver: redfish
    address: http://127.0.0.1:9/
    system: /redfish/v1/Systems/compute02
    username: admin
    password: hunter2-compute02
"""


def _check_config(**env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("NODEFENCE_", "KUBE"))}
    return subprocess.run(
        [sys.executable, "-m", "nodefence", "check-config", "--offline"],
        env={**base, "NODEFENCE_AUTH_DISABLED": "true", **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_an_inventory_node_given_twice_is_refused_naming_it_and_its_lines(tmp_path: Path) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text(INVENTORY)

    with pytest.raises(InventoryError) as refused:
        load_inventory(path)

    message = str(refused.value)
    assert "nodes.compute01 is given twice (lines 2 and 8)" in message
    assert "copied for another node" in message
    assert "hunter2" not in message

    result = _check_config(NODEFENCE_BMC_INVENTORY=str(path))
    assert result.returncode == 2, result.stdout
    assert "nodes.compute01 is given twice (lines 2 and 8)" in result.stderr
    assert "hunter2" not in result.stderr + result.stdout


def test_a_policy_budget_given_twice_is_refused_not_taken_from_its_last_copy(
    tmp_path: Path,
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("cluster:\n  max_fenced_nodes: 1\n  max_fenced_nodes: 10\n")

    with pytest.raises(
        PolicyError, match=r"cluster\.max_fenced_nodes is given twice \(lines 2 and 3\)"
    ):
        load_policy(path)

    result = _check_config(NODEFENCE_POLICY_FILE=str(path))
    assert result.returncode == 2
    assert "cluster.max_fenced_nodes is given twice" in result.stderr


def test_a_rule_driver_given_twice_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(
        "rules:\n"
        "  - name: default\n"
        "    fencing:\n"
        "      driver: redfish\n"
        "      action: 'off'\n"
        "      driver: none\n"
    )

    with pytest.raises(
        PolicyError, match=r"rules\[0\]\.fencing\.driver is given twice \(lines 4 and 6\)"
    ):
        load_policy(path)


def test_a_merge_key_override_is_yaml_not_a_duplicate() -> None:
    document = "shared: &shared {username: a, password: b}\nnode: {<<: *shared, username: c}\n"

    assert strict_yaml.load(document)["node"] == {"username": "c", "password": "b"}


# Words YAML 1.1 reads as booleans or null, not as strings: ``on: 0`` is ``{True: 0}``.
YAML_WORDS = {"yes", "no", "on", "off", "true", "false", "null"}


@given(
    st.dictionaries(
        st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True).filter(
            lambda key: key not in YAML_WORDS
        ),
        st.integers(min_value=-5, max_value=5),
        min_size=1,
        max_size=6,
    ),
    st.data(),
)
def test_any_repeated_key_is_refused_and_any_mapping_without_one_loads(
    mapping: dict[str, int], data: st.DataObject
) -> None:
    lines = [f"{key}: {value}" for key, value in mapping.items()]
    assert strict_yaml.load("\n".join(lines)) == mapping

    repeated = data.draw(st.sampled_from(sorted(mapping)))
    at = data.draw(st.integers(min_value=0, max_value=len(lines)))
    with pytest.raises(strict_yaml.DuplicateKeyError) as refused:
        strict_yaml.load("\n".join([*lines[:at], f"{repeated}: 0", *lines[at:]]))
    assert str(refused.value).startswith(f"{repeated} is given twice")
