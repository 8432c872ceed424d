"""The background probe's rounds are kept in the cluster (ConfigMap ``nodefence-fencing-probes``) so
``nodefence status`` can show each node's last probe: once per round, dated on the API server's
clock, never a secret, the newer answer kept when replicas meet, bounded in size, and nothing
written in dry-run. Read back with the real kubectl and the real ``nodefence status``."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry
from pydantic import SecretStr
from tests.seeded_cluster import eventually

from nodefence.background.fencing_probe import FencingProbe, ProbeMetrics
from nodefence.fencing import probe_record
from nodefence.fencing.check import NodeCheck
from nodefence.fencing.inventory import load_inventory
from nodefence.http.decisions import DecisionLog
from nodefence.kube.client import Deadline, KubeClient, load_api_client
from nodefence.kube.ratelimit import Priority, RateLimiter
from nodefence.observability.metrics import Metrics
from nodefence.policy import parse_policy
from nodefence.runtime import background_for, build_fencer
from nodefence.settings import Settings
from nodefence_sim.simulation import Simulation
from nodefence_sim.testing import SimulatorHandle, running_simulator

from .agents import AGENT_PASSWORD, two_agents
from .fence_agent_support import serving_probes

NAMESPACE = "nodefence"
PROBES = probe_record.CONFIGMAP
PROBES_PATH = f"/api/v1/namespaces/{NAMESPACE}/configmaps*"
KUBECTL = shutil.which("kubectl")
# The API server's clock is three days ahead of this machine's: every time the record holds
# must be the server's.
SERVER_AHEAD = timedelta(days=3)

needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")


@pytest.fixture
async def ahead() -> AsyncIterator[SimulatorHandle]:
    sim = Simulation.from_scenario("seed", clock=lambda: datetime.now(UTC) + SERVER_AHEAD)
    async with running_simulator(sim) as handle:
        yield handle


@pytest.fixture
async def kube(ahead: SimulatorHandle) -> AsyncIterator[KubeClient]:
    client = KubeClient(await load_api_client(str(ahead.kubeconfig)))
    try:
        yield client
    finally:
        await client.close()


async def kubectl(handle: SimulatorHandle, *args: str) -> tuple[int, str, str]:
    """The real kubectl, run while this loop keeps serving the simulator."""
    assert KUBECTL is not None
    process = await asyncio.create_subprocess_exec(
        KUBECTL,
        "--kubeconfig",
        str(handle.kubeconfig),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "HOME": str(handle.kubeconfig.parent)},
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    return process.returncode or 0, out.decode(), err.decode()


async def stored(handle: SimulatorHandle) -> dict[str, Any] | None:
    code, out, err = await kubectl(
        handle, "get", "configmap", "-n", NAMESPACE, PROBES, "-o", "json"
    )
    if code != 0:
        assert "NotFound" in err, err
        return None
    configmap: dict[str, Any] = json.loads(out)
    return configmap


def entries(configmap: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {node: json.loads(value) for node, value in configmap["data"].items()}


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def probe_writes(handle: SimulatorHandle, since: int) -> list[tuple[str, int]]:
    return [
        (r.verb, r.status)
        for r in handle.faults.requests(since)
        if r.path.endswith(PROBES) or (r.verb == "create" and r.path.endswith("/configmaps"))
        if r.verb not in ("get", "list", "watch")
    ]


@needs_kubectl
async def test_a_round_is_written_once_dated_on_the_api_servers_clock(
    ahead: SimulatorHandle, kube: KubeClient, tmp_path: Path
) -> None:
    path, good, bad = two_agents(tmp_path)
    probe = FencingProbe(
        load_inventory(path),
        ProbeMetrics(CollectorRegistry()),
        interval=60,
        kube=kube,
        namespace=NAMESPACE,
        identity="replica-1",
    )
    cursor = ahead.faults.cursor

    await probe.probe_once()

    assert probe_writes(ahead, cursor) == [("create", 201)], "one write per round"
    configmap = await stored(ahead)
    assert configmap is not None
    assert configmap["metadata"]["annotations"][probe_record.WRITTEN_BY] == "replica-1"
    data = entries(configmap)
    assert set(data) == {"compute01", "compute02"}
    assert data["compute01"]["state"] == "on"
    assert data["compute01"]["driver"] == "fence-agent"
    assert data["compute01"]["error"] == ""
    assert data["compute01"]["target"].endswith("ip=192.0.2.10")
    assert data["compute01"]["intervalSeconds"] == 60
    assert data["compute01"]["by"] == "replica-1"
    assert data["compute02"]["state"] == "unknown"
    assert "Unable to obtain correct plug status" in data["compute02"]["error"]
    # Three days ahead of this machine: the API server's clock, not the local one.
    for entry in data.values():
        assert instant(entry["at"]) - datetime.now(UTC) > SERVER_AHEAD - timedelta(hours=1)
    assert AGENT_PASSWORD not in json.dumps(configmap)
    # Read-only all the same.
    assert good.actions() == ["status"]
    assert bad.actions() == ["status"]

    cursor = ahead.faults.cursor
    await probe.probe_once()

    assert probe_writes(ahead, cursor) == [("update", 200)]
    again = await stored(ahead)
    assert again is not None
    assert instant(entries(again)["compute01"]["at"]) >= instant(data["compute01"]["at"])


@needs_kubectl
async def test_a_probe_error_that_carries_a_password_is_stored_without_it(
    ahead: SimulatorHandle, kube: KubeClient, tmp_path: Path
) -> None:
    inventory_file = tmp_path / "bmcs.yaml"
    inventory_file.write_text(
        yaml.safe_dump(
            {
                "nodes": {
                    "compute01": {
                        "driver": "redfish",
                        "address": "https://192.0.2.1",
                        "username": "fencer",
                        "password": "redfish-Secret-77",
                    },
                    "compute02": {
                        "driver": "fence-agent",
                        "agent": "/usr/sbin/fence_redfish",
                        "parameters": {"ip": "192.0.2.10", "password": AGENT_PASSWORD},
                    },
                }
            }
        )
    )
    inventory = load_inventory(inventory_file)
    # Errors as a careless BMC or agent might word them, the credential in the text.
    leaky = [
        NodeCheck(
            "compute01",
            "redfish",
            "https://192.0.2.1 (user fencer:redfish-Secret-77)",
            "unknown",
            0.4,
            "401 Unauthorized: login fencer/redfish-Secret-77 refused",
        ),
        NodeCheck(
            "compute02",
            "fence-agent",
            "/usr/sbin/fence_redfish ip=192.0.2.10",
            "unknown",
            1.2,
            f"Failed: Unable to login with password={AGENT_PASSWORD}",
        ),
    ]

    written = await probe_record.write_round(
        kube,
        NAMESPACE,
        [(check, time.monotonic()) for check in leaky],
        interval_seconds=900,
        by="replica-1",
        inventory=inventory,
        deadline=Deadline(30),
    )

    assert written is not None
    configmap = await stored(ahead)
    assert configmap is not None
    text = json.dumps(configmap)
    assert "redfish-Secret-77" not in text
    assert AGENT_PASSWORD not in text
    data = entries(configmap)
    assert data["compute01"]["error"] == "401 Unauthorized: login fencer/*** refused"
    assert data["compute01"]["target"] == "https://192.0.2.1 (user fencer:***)"
    assert data["compute02"]["error"] == "Failed: Unable to login with password=***"


async def test_replicas_keep_the_newer_answer_and_a_conflict_is_merged_again(
    ahead: SimulatorHandle, kube: KubeClient, tmp_path: Path
) -> None:
    path, _, _ = two_agents(tmp_path)
    inventory = load_inventory(path)
    now = time.monotonic()

    def check(node: str, state: str) -> NodeCheck:
        return NodeCheck(node, "fence-agent", "ip=192.0.2.10", state, 0.1)

    async def write(by: str, answers: list[tuple[NodeCheck, float]]) -> None:
        written = await probe_record.write_round(
            kube,
            NAMESPACE,
            answers,
            interval_seconds=900,
            by=by,
            inventory=inventory,
            deadline=Deadline(30),
        )
        assert written is not None

    await write("replica-1", [(check("compute01", "on"), now), (check("compute02", "on"), now)])
    # replica-2's round began earlier and ends later: its answer for compute01 is older than
    # replica-1's and must not replace it; its compute02 answer is newer.
    ahead.faults.conflicts(1, verbs=("update",), path=f"*/{PROBES}")
    cursor = ahead.faults.cursor
    await write(
        "replica-2",
        [(check("compute01", "off"), now - 120), (check("compute02", "unknown"), now + 1)],
    )

    assert probe_writes(ahead, cursor) == [("update", 409), ("update", 200)]
    configmap = await stored_direct(kube)
    data = entries(configmap)
    assert (data["compute01"]["by"], data["compute01"]["state"]) == ("replica-1", "on")
    assert (data["compute02"]["by"], data["compute02"]["state"]) == ("replica-2", "unknown")


async def test_a_round_waits_behind_every_request_that_acts(
    ahead: SimulatorHandle, tmp_path: Path
) -> None:
    """An observation never competes with a fence in progress: the round's reads and its writes
    (the create and the replace) go at the rate limiter's lowest priority."""
    path, _, _ = two_agents(tmp_path)
    limiter = RateLimiter(1000, 1000, keep_order=True)
    client = KubeClient(await load_api_client(str(ahead.kubeconfig)), limiter=limiter)
    try:
        for _round in range(2):
            written = await probe_record.write_round(
                client,
                NAMESPACE,
                [(NodeCheck("compute01", "fence-agent", "ip=192.0.2.10", "on", 0.1), 0.0)],
                interval_seconds=900,
                by="replica-1",
                inventory=load_inventory(path),
                deadline=Deadline(30),
            )
            assert written is not None
    finally:
        await client.close()
    # A read and a create, then a read and a replace: four requests, none ahead of a fence.
    assert limiter.stats.order == [Priority.REFUSAL] * 4, limiter.stats.order
    assert limiter.stats.fence_allowance_used == 0


async def stored_direct(kube: KubeClient) -> dict[str, Any]:
    return await kube.get_configmap(NAMESPACE, PROBES, Deadline(10))


def test_the_record_stays_small_and_keeps_failing_nodes_first() -> None:
    at = datetime(2026, 12, 1, tzinfo=UTC)

    def entry(i: int, state: str) -> probe_record.ProbeEntry:
        return probe_record.ProbeEntry(
            node=f"node-{i:05d}.example.internal",
            driver="fence-agent",
            target="fence_openstack " + "x" * 400,
            state=state,
            error="E" * 1000 if state == "unknown" else "",
            seconds=1.5,
            at=at,
            interval_seconds=900,
            by="replica-1",
        )

    many = [entry(i, "on") for i in range(6000)] + [entry(i, "unknown") for i in range(6000, 6050)]

    data, omitted = probe_record.bounded(many)

    assert sum(len(k) + len(v) for k, v in data.items()) <= probe_record.MAX_DATA_BYTES
    assert omitted == len(many) - len(data) > 0
    assert all(f"node-{i:05d}.example.internal" in data for i in range(6000, 6050))
    kept = json.loads(data["node-06000.example.internal"])
    assert len(kept["error"]) <= probe_record.SHORT_TEXT_CHARS
    # A few nodes fit whole.
    few, none_left_out = probe_record.bounded(many[-3:])
    assert none_left_out == 0
    assert len(json.loads(few["node-06049.example.internal"])["error"]) == (
        probe_record.MAX_TEXT_CHARS
    )


def test_garbled_values_read_as_no_probe() -> None:
    for raw in ("not json", "[1, 2]", '{"state": "on"}', '{"at": "yesterday"}', 7, None):
        assert probe_record.decode("compute01", raw) is None
    good = probe_record.decode(
        "compute01", '{"at": "2026-12-01T10:00:00Z", "state": "off", "driver": "redfish"}'
    )
    assert good is not None
    assert good.state == "off"


async def test_a_dry_run_receiver_records_nothing(ahead: SimulatorHandle, tmp_path: Path) -> None:
    path, good, _ = two_agents(tmp_path)
    settings = Settings(
        alert_token=SecretStr("probe-test-token"),
        namespace=NAMESPACE,
        bmc_inventory=path,
        fencing_probe_interval=60,
        dry_run=True,
        reconcile_interval=0,
    )
    policy = parse_policy({"rules": [{"name": "default", "fencing": {"driver": "fence-agent"}}]})
    pipeline = await build_fencer(
        settings, metrics=Metrics(), policy=policy, kubeconfig=str(ahead.kubeconfig)
    )
    try:
        [probe] = [
            w
            for w in background_for(settings, pipeline, DecisionLog()).workers
            if isinstance(w, FencingProbe)
        ]
        cursor = ahead.faults.cursor
        checks = await probe.probe_once()
    finally:
        await pipeline.close()

    assert {c.node for c in checks} == {"compute01", "compute02"}
    assert good.actions() == ["status"]
    # S8: the round was read, and nothing at all was written.
    writes = [r for r in ahead.faults.requests(cursor) if r.verb not in ("get", "list", "watch")]
    assert writes == []


@needs_kubectl
async def test_serve_records_its_rounds_and_status_shows_them(
    ahead: SimulatorHandle, tmp_path: Path
) -> None:
    path, _, _ = two_agents(tmp_path)
    async with serving_probes(ahead, path, NAMESPACE):

        async def recorded() -> dict[str, Any] | None:
            configmap = await stored(ahead)
            if configmap is None or set(configmap.get("data") or {}) != {"compute01", "compute02"}:
                return None
            return configmap

        await eventually(recorded, within=60, interval=0.2)
        (policy_file := tmp_path / "policy.yaml").write_text(
            yaml.safe_dump({"rules": [{"name": "default", "fencing": {"driver": "fence-agent"}}]})
        )
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("NODEFENCE_", "KUBE"))},
            "KUBECONFIG": str(ahead.kubeconfig),
            "NODEFENCE_AUTH_DISABLED": "true",
            "NODEFENCE_NAMESPACE": NAMESPACE,
            "NODEFENCE_POLICY_FILE": str(policy_file),
            "NODEFENCE_BMC_INVENTORY": str(path),
        }
        reports = []
        for output in ("json", "text"):
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "nodefence",
                "status",
                "-o",
                output,
                env=env,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            out, err = await asyncio.wait_for(process.communicate(), timeout=120)
            assert process.returncode == 0, err.decode()
            reports.append(out.decode())
    probes = json.loads(reports[0])["fencingProbes"]
    nodes = {n["node"]: n for n in probes["nodes"]}
    assert nodes["compute01"]["state"] == "on"
    assert nodes["compute01"]["answered"] is True
    assert nodes["compute01"]["stale"] is False
    assert nodes["compute01"]["by"] == "replica-1"
    assert nodes["compute02"]["state"] == "unknown"
    assert "Unable to obtain correct plug status" in nodes["compute02"]["error"]
    # Aged on the API server's clock (three days ahead of this machine): a fresh probe.
    assert 0 <= nodes["compute01"]["ageSeconds"] < 3600
    assert probes["notRecorded"] == []
    text = reports[1]
    assert (
        "Power-state probes (ConfigMap nodefence/nodefence-fencing-probes): 2 recorded, "
        "1 NOT ANSWERING" in text
    )
    assert "error: " in text
    assert AGENT_PASSWORD not in reports[0] + text
