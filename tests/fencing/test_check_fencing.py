"""``nodefence check-fencing`` as an operator runs it, against the simulated cluster and its Redfish
BMCs (and scripted fence agents): it names the node whose proof path fails, the nodes a rule would
fence that the inventory lacks, and never prints a secret. Plus the start checks of
``check-config`` and ``serve``: a missing agent and a rule/entry driver mismatch stop them."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from nodefence_sim.redfish import bmcs_of, write_bmc_inventory
from nodefence_sim.testing import SimulatorHandle

from .agents import AGENT_PASSWORD, gone_wrapper, scripted_agent

REDFISH_RULE: dict[str, Any] = {
    "rules": [{"name": "default", "fencing": {"driver": "redfish", "action": "off"}}]
}


def sim_inventory(tmp_path: Path, cluster: SimulatorHandle) -> dict[str, Any]:
    path = write_bmc_inventory(tmp_path / "sim-bmcs.yaml", cluster.url, cluster.sim)
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    return data


async def nodefence(
    tmp_path: Path,
    *args: str,
    inventory: dict[str, Any] | None,
    policy: dict[str, Any] = REDFISH_RULE,
    kubeconfig: Path | None = None,
) -> tuple[int, str, str]:
    """Runs ``nodefence ARGS`` as a process while this loop keeps serving the simulator."""
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(policy))
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "NODEFENCE_AUTH_DISABLED": "true",
        "NODEFENCE_POLICY_FILE": str(tmp_path / "policy.yaml"),
        "PORT": "0",
    }
    if inventory is not None:
        (tmp_path / "bmcs.yaml").write_text(yaml.safe_dump(inventory))
        env["NODEFENCE_BMC_INVENTORY"] = str(tmp_path / "bmcs.yaml")
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "nodefence",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_every_node_answering_passes(cluster: SimulatorHandle, tmp_path: Path) -> None:
    inventory = sim_inventory(tmp_path, cluster)
    code, out, err = await nodefence(
        tmp_path, "check-fencing", "-o", "json", inventory=inventory, kubeconfig=cluster.kubeconfig
    )
    assert code == 0, out + err
    report = json.loads(out)
    assert report["ok"]
    assert {n["node"] for n in report["nodes"]} == set(inventory["nodes"])
    assert all(n["state"] == "on" and n["driver"] == "redfish" for n in report["nodes"])
    assert report["uncovered"] == []
    assert report["cluster"].startswith("checked")
    # Read-only: no power action reached any BMC.
    assert bmcs_of(cluster.sim).resets == []


async def test_a_wrong_password_fails_naming_the_node(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    inventory = sim_inventory(tmp_path, cluster)
    right = bmcs_of(cluster.sim).password.get_secret_value()
    inventory["nodes"]["compute02"]["password"] = "wrong-Pa55word-here"
    code, out, err = await nodefence(
        tmp_path, "check-fencing", inventory=inventory, kubeconfig=cluster.kubeconfig
    )
    assert code == 1, out + err
    (line,) = [row for row in out.splitlines() if row.startswith("compute02 ")]
    assert "unknown" in line
    assert "credentials" in line or "401" in line, line
    assert "NOT OK" in out
    for secret in (right, "wrong-Pa55word-here"):
        assert secret not in out + err
    json_code, json_out, _ = await nodefence(
        tmp_path, "check-fencing", "compute02", "-o", "json", inventory=inventory
    )
    assert json_code == 1
    report = json.loads(json_out)
    assert [n["node"] for n in report["nodes"]] == ["compute02"]
    assert not report["nodes"][0]["answered"]
    assert report["cluster"].startswith("not checked")


async def test_nodes_a_rule_matches_but_the_inventory_lacks_are_named(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    inventory = sim_inventory(tmp_path, cluster)
    del inventory["nodes"]["compute02"]
    code, out, err = await nodefence(
        tmp_path, "check-fencing", "-o", "json", inventory=inventory, kubeconfig=cluster.kubeconfig
    )
    assert code == 1, out + err
    report = json.loads(out)
    assert report["uncovered"] == ["compute02"]
    assert all(n["answered"] for n in report["nodes"])


async def test_fence_agents_are_read_with_status_only_and_secrets_stay_hidden(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    good = scripted_agent(tmp_path / "good", "honest")
    bad = scripted_agent(tmp_path / "bad", "refuses")
    inventory = {
        "defaults": {"fence-agent": {"parameters": good.parameters()}},
        # Scripted agents name no machine nodefence could check: the entries must say so.
        "nodes": {
            node: {"driver": "fence-agent", "agent": str(agent.path), "identity": "unchecked"}
            for node, agent in (("compute01", good), ("compute02", bad))
        },
    }
    policy = {"rules": [{"name": "default", "fencing": {"driver": "fence-agent"}}]}
    code, out, err = await nodefence(
        tmp_path, "check-fencing", "-o", "json", inventory=inventory, policy=policy
    )
    assert code == 1, out + err
    report = {n["node"]: n for n in json.loads(out)["nodes"]}
    assert report["compute01"]["state"] == "on"
    assert report["compute01"]["driver"] == "fence-agent"
    assert report["compute01"]["target"].endswith("ip=192.0.2.10")
    assert report["compute02"]["state"] == "unknown"
    assert "Unable to obtain correct plug status" in report["compute02"]["error"]
    assert AGENT_PASSWORD not in out + err
    assert good.actions() == ["status"]
    assert bad.actions() == ["status"]
    code, out, err = await nodefence(
        tmp_path, "check-config", "--offline", inventory=inventory, policy=policy
    )
    assert code == 0, out + err
    shown = json.loads(out)["bmc_inventory"]["nodes"]["compute01"]
    assert shown["parameters"]["password"] == "***"
    assert shown["parameters"]["ip"] == "192.0.2.10"
    assert AGENT_PASSWORD not in out + err


async def test_check_config_and_serve_refuse_a_rule_driver_the_entry_does_not_use(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    inventory = sim_inventory(tmp_path, cluster)
    inventory["nodes"]["compute01"] = {
        "driver": "ipmi",
        "address": "192.0.2.1",
        "username": "fencer",
        "password": "ipmi-secret-1",
    }
    for command in ("check-config", "serve"):
        code, out, err = await nodefence(tmp_path, command, inventory=inventory)
        assert code == 2, out + err
        assert "node compute01 is driver ipmi but no rule fences with it" in err
        assert "ipmi-secret-1" not in out + err
    # No BMC answers at 192.0.2.1: the conflict is the point, not a 30 s wait for the reading.
    code, out, _ = await nodefence(
        tmp_path,
        "check-fencing",
        "-o",
        "json",
        "--timeout",
        "2",
        inventory=inventory,
        kubeconfig=cluster.kubeconfig,
    )
    assert code == 1
    (conflict,) = json.loads(out)["conflicts"]
    assert "rule 'default' fences with driver redfish" in conflict
    assert "node compute01 is driver ipmi" in conflict


async def test_a_missing_agent_is_a_configuration_error_at_start(tmp_path: Path) -> None:
    inventory = {
        "nodes": {
            "compute01": {
                "driver": "fence-agent",
                "agent": "fence_not_installed_anywhere",
                "parameters": {"password": "agent-secret-9"},
            }
        }
    }
    policy = {"rules": [{"name": "default", "fencing": {"driver": "fence-agent"}}]}
    for command in ("check-config", "serve", "check-fencing"):
        code, out, err = await nodefence(tmp_path, command, inventory=inventory, policy=policy)
        assert code == 2, out + err
        assert "fence agent fence_not_installed_anywhere is not installed" in err
        assert "agent-secret-9" not in out + err


async def test_an_agent_exiting_2_without_status_off_is_unknown_not_off(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    """A site's wrapper whose program is gone exits 2 (python's "can't open file") without the
    agent's own "Status: OFF": that is no reading, and its output is shown."""
    wrapper = gone_wrapper(tmp_path)
    inventory = {
        "nodes": {
            "compute01": {
                "driver": "fence-agent",
                "agent": str(wrapper),
                "identity": "unchecked",
                "parameters": {"ip": "192.0.2.10", "password": AGENT_PASSWORD},
            }
        },
    }
    policy = {"rules": [{"name": "default", "fencing": {"driver": "fence-agent"}}]}
    code, out, err = await nodefence(
        tmp_path, "check-fencing", "compute01", "-o", "json", inventory=inventory, policy=policy
    )
    assert code == 1, out + err
    (report,) = json.loads(out)["nodes"]
    assert report["state"] == "unknown"
    assert "without printing Status: OFF" in report["error"]
    assert "can't open file" in report["error"]
    assert AGENT_PASSWORD not in out + err


async def test_a_silent_bmc_costs_the_timeout_given_and_the_table_shows_identity_and_time(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    """A BMC that accepts the connection and never answers is cut at ``--timeout``, named, and
    the others still answer; the text table shows each target's identity and the run's time."""
    accepted: list[asyncio.StreamWriter] = []

    async def silent(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    inventory = sim_inventory(tmp_path, cluster)
    inventory["nodes"]["compute02"]["address"] = f"http://127.0.0.1:{port}"
    try:
        code, out, err = await nodefence(
            tmp_path,
            "check-fencing",
            "--timeout",
            "1",
            "--concurrency",
            "2",
            inventory=inventory,
            kubeconfig=cluster.kubeconfig,
        )
    finally:
        server.close()
        for writer in accepted:
            writer.close()
    assert code == 1, out + err
    header, *rows = out.splitlines()
    assert header.split()[:6] == ["NODE", "DRIVER", "STATE", "SECONDS", "IDENTITY", "TARGET"]
    (silent_row,) = [r for r in rows if r.startswith("compute02 ")]
    assert " unknown " in silent_row
    (answered,) = [r for r in rows if r.startswith("compute01 ")]
    assert " on " in answered
    assert " ok " in answered, answered
    assert accepted, "the silent BMC was asked"
    summary = out.splitlines()[-1]
    assert summary.startswith("NOT OK: ")
    assert " nodes answered in " in summary
    assert summary.endswith("s")


async def test_check_fencing_refuses_a_timeout_or_concurrency_out_of_range(tmp_path: Path) -> None:
    for args in (("--timeout", "0"), ("--timeout", "x"), ("--concurrency", "0")):
        code, _out, err = await nodefence(tmp_path, "check-fencing", *args, inventory=None)
        assert code == 2, (args, err)
        assert "check-fencing" in err
