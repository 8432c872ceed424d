"""What the real backend decides before any process starts, checked without the control plane:
the ``simulate`` options that mean nothing with the chosen backend, the message when the binary
is missing, and how a scenario becomes create requests for the real API server."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from nodefence.cli import main
from nodefence_sim.controllers.kubelet import system_uuid
from nodefence_sim.real.components import KUBELET_LABEL, KUBELET_UP
from nodefence_sim.real.loader import (
    CSI_DRIVER,
    cleaned,
    node_manifest,
    shared_node_manifest,
    volume_objects,
)
from nodefence_sim.scale import objects
from nodefence_sim.scenario import load_scenario


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--node-monitor-grace-period", "20s"], "needs --backend real"),
        (["--backend", "real", "--k8s-version", "1.24.8"], "--k8s-version is for the simulator"),
        (["--backend", "real", "--node-monitor-grace-period", "soon"], "not a duration"),
    ],
)
def test_options_that_do_not_fit_the_backend_are_refused(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["simulate", *argv])
    assert exited.value.code == 2
    assert said in capsys.readouterr().err


def test_without_the_binary_it_names_make_controlplane(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("NODEFENCE_CONTROLPLANE", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(["simulate", "--backend", "real"]) == 2
    assert "make controlplane" in capsys.readouterr().err


def test_a_configured_binary_that_cannot_run_is_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    binary = tmp_path / "nodefence-controlplane"
    binary.write_text("")
    binary.chmod(stat.S_IRUSR)
    monkeypatch.setenv("NODEFENCE_CONTROLPLANE", str(binary))
    assert main(["simulate", "--backend", "real"]) == 2
    assert f"NODEFENCE_CONTROLPLANE={binary} is not an executable file" in capsys.readouterr().err


def test_seed_nodes_become_kwok_nodes_whose_bmc_reports_their_uuid() -> None:
    seed = load_scenario("seed")
    nodes = [o for o in seed.objects if o["kind"] == "Node"]
    manifests = [node_manifest(n) for n in nodes]
    for node, manifest in zip(nodes, manifests, strict=True):
        name = node["metadata"]["name"]
        assert manifest["spec"]["providerID"] == f"kwok://{name}"
        assert manifest["status"]["nodeInfo"]["systemUUID"] == system_uuid(name)
        assert manifest["metadata"]["labels"] == node["metadata"]["labels"]
        assert manifest["spec"]["podCIDR"] == node["spec"]["podCIDR"]
    boot_ids = {m["status"]["nodeInfo"]["bootID"] for m in manifests}
    assert len(boot_ids) == len(manifests)


def test_placement_hints_are_dropped_for_the_real_scheduler() -> None:
    seed = load_scenario("seed")
    for obj in seed.objects:
        annotations = cleaned(obj)["metadata"].get("annotations") or {}
        assert not [k for k in annotations if k.startswith("sim.nodefence.io/")]


def test_every_statefulset_claim_gets_a_volume_bound_to_it_in_advance() -> None:
    seed = load_scenario("seed")
    made = volume_objects(seed.objects)
    kinds = [obj["kind"] for _, obj in made]
    assert kinds[:2] == ["CSIDriver", "StorageClass"]
    assert made[1][1]["metadata"]["name"] == "general"
    claims = {
        (v["spec"]["claimRef"]["namespace"], v["spec"]["claimRef"]["name"])
        for _, v in made
        if v["kind"] == "PersistentVolume"
    }
    expected = {
        ("openstack", f"{template}-{sts}-{ordinal}")
        for sts, template in (
            ("mariadb-server", "mysql-data"),
            ("rabbitmq-rabbitmq", "rabbitmq-data"),
        )
        for ordinal in range(3)
    }
    assert claims == expected
    assert all(
        v["spec"]["csi"]["driver"] == CSI_DRIVER for _, v in made if v["kind"] == "PersistentVolume"
    )


def test_a_large_clusters_nodes_are_the_one_kwoks_each_with_its_own_addresses() -> None:
    nodes = [o for o in objects(600, 0) if o["kind"] == "Node"]
    manifests = [shared_node_manifest(n, i) for i, n in enumerate(nodes)]
    assert all(m["metadata"]["labels"][KUBELET_LABEL] == KUBELET_UP for m in manifests)
    cidrs = {m["spec"]["podCIDR"] for m in manifests}
    ips = {a["address"] for m in manifests for a in m["status"]["addresses"]}
    assert len(cidrs) == len(ips) == len(manifests)
    # The realistic node keeps what a kubelet reports besides (its cached images).
    assert manifests[0]["status"]["images"] == nodes[0]["status"]["images"]
