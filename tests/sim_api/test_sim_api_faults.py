"""Fault injection and request accounting, in-process and over ``/sim/v1``."""

from __future__ import annotations

import asyncio
import json
import subprocess
import urllib.request

import aiohttp
import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from nodefence_sim.testing import SimulatorHandle, SimulatorProcess


async def test_latency_is_applied(sim_api: SimulatorHandle, api_client: client.ApiClient) -> None:
    core = client.CoreV1Api(api_client)
    rule = sim_api.faults.slow(0.3, verbs=("get",), path="/api/v1/nodes/*")
    loop = asyncio.get_running_loop()
    started = loop.time()
    await core.read_node("worker1")
    # Held at least that long: a lower bound, which a busy machine only makes longer.
    assert loop.time() - started >= 0.3
    assert rule.hits == 1
    await core.list_node()
    # The list matches neither the verb nor the path, so the rule leaves it alone.
    assert rule.hits == 1


async def test_n_failures_then_success(
    sim_api: SimulatorHandle, api_client: client.ApiClient
) -> None:
    core = client.CoreV1Api(api_client)
    sim_api.faults.fail(2, status=503, verbs=("patch",))
    for _ in range(2):
        with pytest.raises(ApiException) as info:
            await core.patch_node("worker1", {"metadata": {"labels": {"a": "b"}}})
        assert info.value.status == 503
    patched = await core.patch_node("worker1", {"metadata": {"labels": {"a": "b"}}})
    assert patched.metadata.labels["a"] == "b"
    # Reads were never affected.
    assert (await core.read_node("worker1")).metadata.name == "worker1"


async def test_throttling_carries_retry_after(sim_api: SimulatorHandle) -> None:
    sim_api.faults.fail(1, status=429, retry_after=3)
    async with aiohttp.ClientSession() as http:
        async with http.get(sim_api.url + "/api/v1/nodes") as resp:
            body = await resp.json()
            assert resp.status == 429
            assert resp.headers["Retry-After"] == "3"
            assert body["reason"] == "TooManyRequests"
            assert body["details"]["retryAfterSeconds"] == 3
        async with http.get(sim_api.url + "/api/v1/nodes") as resp:
            assert resp.status == 200


async def test_conflict_storm_hits_only_writes(
    sim_api: SimulatorHandle, api_client: client.ApiClient
) -> None:
    core = client.CoreV1Api(api_client)
    sim_api.faults.conflicts(3)
    await core.read_node("worker1")
    for _ in range(3):
        with pytest.raises(ApiException) as info:
            await core.patch_node("worker1", {"spec": {"unschedulable": True}})
        assert info.value.status == 409
    assert (await core.patch_node("worker1", {"spec": {"unschedulable": True}})).spec.unschedulable


async def test_fraction_is_reproducible_with_a_seed(sim_api: SimulatorHandle) -> None:
    async def outcomes() -> list[int]:
        sim_api.faults.configure(
            {"replace": True, "seed": 7, "rules": [{"status": 500, "fraction": 0.5}]}
        )
        codes = []
        async with aiohttp.ClientSession() as http:
            for _ in range(20):
                async with http.get(sim_api.url + "/api/v1/nodes") as resp:
                    codes.append(resp.status)
        return codes

    first = await outcomes()
    assert set(first) == {200, 500}
    assert await outcomes() == first


async def test_connection_reset_and_api_down(sim_api: SimulatorHandle) -> None:
    sim_api.faults.reset(1, verbs=("create",))
    namespace = {"metadata": {"name": "reset"}}
    async with aiohttp.ClientSession() as http:
        # A POST is not retried by the client, so the reset reaches the caller.
        with pytest.raises(aiohttp.ClientError):
            async with http.post(sim_api.url + "/api/v1/namespaces", json=namespace) as resp:
                await resp.read()
        assert sim_api.faults.requests()[-1].status == 0
        # Down long enough for both checks below on a busy machine; up again on its own after.
        sim_api.faults.down(2)
        async with http.get(sim_api.url + "/api/v1/nodes") as resp:
            assert resp.status == 503
        # The control surface is not the Kubernetes API: it stays up.
        async with http.get(sim_api.url + "/sim/v1/requests") as resp:
            assert resp.status == 200
        deadline = asyncio.get_running_loop().time() + 30
        while True:
            async with http.get(sim_api.url + "/api/v1/nodes") as resp:
                if resp.status == 200:
                    break
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.05)


async def test_hang_outlasts_the_client_timeout(sim_api: SimulatorHandle) -> None:
    sim_api.faults.hang_seconds = 2
    sim_api.faults.hang(1)
    timeout = aiohttp.ClientTimeout(total=0.3)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        with pytest.raises(TimeoutError):
            async with http.get(sim_api.url + "/api/v1/nodes") as resp:
                await resp.read()


async def test_request_log_counts_client_requests(
    sim_api: SimulatorHandle, api_client: client.ApiClient
) -> None:
    core = client.CoreV1Api(api_client)
    cursor = sim_api.faults.cursor
    await core.list_pod_for_all_namespaces(field_selector="spec.nodeName=worker1")
    await core.patch_node("worker1", {"metadata": {"labels": {"x": "1"}}})
    await core.patch_node("worker1", {"metadata": {"labels": {"x": "2"}}})
    assert sim_api.faults.count(since=cursor, verb="patch", path="/api/v1/nodes/*") == 2
    assert sim_api.faults.count(since=cursor, verb="list") == 1
    records = sim_api.faults.requests(cursor)
    assert [r.verb for r in records] == ["list", "patch", "patch"]
    assert "fieldSelector=spec.nodeName" in records[0].query
    assert all(r.status == 200 for r in records)


async def test_http_fault_routes(sim_api: SimulatorHandle) -> None:
    async with aiohttp.ClientSession() as http:
        rule = {"verbs": ["get"], "path": "/api/v1/nodes/*", "status": 500, "count": 1}
        async with http.post(sim_api.url + "/sim/v1/faults", json={"rules": [rule]}) as resp:
            assert resp.status == 201
        async with http.get(sim_api.url + "/api/v1/nodes/worker1") as resp:
            assert resp.status == 500
        async with http.get(sim_api.url + "/api/v1/nodes/worker1") as resp:
            assert resp.status == 200
        async with http.post(
            sim_api.url + "/sim/v1/faults", json={"rules": [{"status": 503}]}
        ) as resp:
            assert resp.status == 201
        async with http.delete(sim_api.url + "/sim/v1/faults") as resp:
            assert resp.status == 200
        async with http.get(sim_api.url + "/api/v1/nodes/worker1") as resp:
            assert resp.status == 200
        async with http.get(sim_api.url + "/sim/v1/requests", params={"since": "1"}) as resp:
            log = await resp.json()
        assert [r["status"] for r in log["requests"]] == [200, 200]
        assert log["cursor"] == 3
        async with http.post(
            sim_api.url + "/sim/v1/faults", json={"rules": [{"action": "explode"}]}
        ) as resp:
            assert resp.status == 400


def test_simulator_process_serves_kubectl_and_exits_cleanly() -> None:
    with SimulatorProcess() as proc:
        with urllib.request.urlopen(proc.url + "/version", timeout=10) as resp:  # noqa: S310
            assert json.loads(resp.read())["gitVersion"] == "v1.24.8"
        out = subprocess.run(
            ["kubectl", "--kubeconfig", str(proc.kubeconfig), "get", "nodes", "-o", "name"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        assert out.strip()
        assert proc.stop() == 0
