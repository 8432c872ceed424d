"""The fence-agent inventory example: the Secret the bmc-inventory component mounts, loaded by the
service's own strict loader, with an OpenStack, an AWS, a vSphere and an IPMI (fence_ipmilan)
entry whose credentials are placeholders and secret, and applied by no kustomization."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from pydantic import SecretStr

from nodefence.fencing.drivers.fence_agent import FenceAgentBmc
from nodefence.fencing.inventory import load_inventory

from .conftest import DEPLOY, NAMESPACE

EXAMPLE = DEPLOY / "fence-agent-inventory.example.yaml"
AGENTS = {"fence_openstack", "fence_aws", "fence_vmware_rest", "fence_ipmilan"}


def test_the_example_loads_with_one_entry_per_infrastructure(tmp_path: Path) -> None:
    missing = [a for a in AGENTS if shutil.which(a, path="/usr/sbin:/usr/bin:/sbin:/bin") is None]
    if missing:
        pytest.skip(f"{', '.join(sorted(missing))} not installed (Debian package fence-agents)")
    (secret,) = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    assert secret["kind"] == "Secret"
    assert secret["metadata"] == {"name": "nodefence-bmc-inventory", "namespace": NAMESPACE}
    inventory_file = tmp_path / "inventory.yaml"
    inventory_file.write_text(secret["stringData"]["inventory.yaml"])
    inventory = load_inventory(inventory_file)
    entries = list(inventory.nodes.values())
    assert all(isinstance(e, FenceAgentBmc) for e in entries)
    assert {Path(e.agent).name for e in entries if isinstance(e, FenceAgentBmc)} == AGENTS
    for node, entry in inventory.nodes.items():
        assert isinstance(entry, FenceAgentBmc)
        secrets = {k: v for k, v in entry.parameters.items() if isinstance(v, SecretStr)}
        assert secrets, node
        for value in secrets.values():
            assert value.get_secret_value().startswith("replace-with-"), node
        assert "ssl_insecure" not in entry.parameters, node
    described = str(inventory.describe())
    assert "replace-with-the-fencing-password" not in described
    assert "replace-with-the-secret-access-key" not in described
    for kustomization in DEPLOY.rglob("kustomization.yaml"):
        assert EXAMPLE.name not in kustomization.read_text(), kustomization
