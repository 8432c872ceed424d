"""The API server's clock on the wire: server-stamped ``metadata.managedFields`` on every write
and a ``Date`` header on every response, both from the simulated server's clock, which a test
moves by hand. A client judging liveness relies on these being the server's and unforgeable."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import aiohttp
import pytest

from nodefence_sim.resources import LEASES, NAMESPACES, NODES
from nodefence_sim.simulation import Simulation
from nodefence_sim.store import rfc3339
from nodefence_sim.testing import SimulatorHandle, running_simulator

NODE_URL = "/api/v1/nodes/worker1"
LEASE_URL = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/worker1"
MERGE = {"Content-Type": "application/merge-patch+json"}
STRATEGIC = {"Content-Type": "application/strategic-merge-patch+json"}
JSON_PATCH = {"Content-Type": "application/json-patch+json"}


class Clock:
    def __init__(self) -> None:
        self.moment = datetime(2025, 3, 4, 5, 6, 7, 891011, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.moment

    def advance(self, seconds: float) -> None:
        self.moment += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def server(clock: Clock) -> AsyncIterator[SimulatorHandle]:
    sim = Simulation(clock=clock)
    sim.store.create(NAMESPACES, None, {"metadata": {"name": "kube-node-lease"}})
    sim.store.create(NODES, None, {"metadata": {"name": "worker1"}, "spec": {}})
    async with running_simulator(sim) as handle:
        yield handle


@pytest.fixture
async def http(server: SimulatorHandle) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(server.url) as session:
        yield session


def entries(obj: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """managedFields by (manager, subresource)."""
    return {(e["manager"], e.get("subresource", "")): e for e in obj["metadata"]["managedFields"]}


async def send(
    http: aiohttp.ClientSession,
    method: str,
    url: str,
    body: Any,
    *,
    agent: str = "kubectl/v1.32.0 (linux/amd64) kubernetes/abcdef",
    headers: dict[str, str] | None = None,
    status: int = 200,
) -> dict[str, Any]:
    async with http.request(
        method,
        url,
        data=json.dumps(body),
        headers={"Content-Type": "application/json", "User-Agent": agent, **(headers or {})},
    ) as response:
        answer: dict[str, Any] = await response.json(content_type=None)
        assert response.status == status, answer
        return answer


def lease(renew: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "worker1", "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": "worker1", "leaseDurationSeconds": 40, "renewTime": renew},
    }


async def test_create_records_the_user_agent_manager_at_the_server_time(
    http: aiohttp.ClientSession, clock: Clock
) -> None:
    created = await send(
        http,
        "POST",
        "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
        lease("2001-01-01T00:00:00.000000Z"),
        agent="kubelet/v1.24.8 (linux/amd64) kubernetes/fdc7750",
        status=201,
    )
    assert created["metadata"]["managedFields"] == [
        {
            "manager": "kubelet",
            "operation": "Update",
            "apiVersion": "coordination.k8s.io/v1",
            "time": rfc3339(clock()),
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:spec": {"f:holderIdentity": {}, "f:leaseDurationSeconds": {}, "f:renewTime": {}}
            },
        }
    ]


async def test_each_renewal_refreshes_the_writers_time_and_a_no_op_does_not(
    http: aiohttp.ClientSession, server: SimulatorHandle, clock: Clock
) -> None:
    kubelet = "kubelet/v1.24.8 (linux/amd64) kubernetes/fdc7750"
    url = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
    await send(http, "POST", url, lease("2025-03-04T05:06:07.000000Z"), agent=kubelet, status=201)
    clock.advance(10)
    renewed = await send(
        http, "PUT", LEASE_URL, lease("2025-03-04T05:06:17.000000Z"), agent=kubelet
    )
    assert entries(renewed)[("kubelet", "")]["time"] == rfc3339(clock())
    renewed_at = clock()
    clock.advance(10)
    unchanged = await send(
        http, "PUT", LEASE_URL, lease("2025-03-04T05:06:17.000000Z"), agent=kubelet
    )
    assert entries(unchanged)[("kubelet", "")]["time"] == rfc3339(renewed_at)
    assert unchanged["metadata"]["resourceVersion"] == renewed["metadata"]["resourceVersion"]


@pytest.mark.parametrize(
    ("headers", "body"),
    [
        (MERGE, {"metadata": {"labels": {"zone": "a"}}}),
        (STRATEGIC, {"metadata": {"labels": {"zone": "a"}}}),
        (JSON_PATCH, [{"op": "add", "path": "/metadata/labels", "value": {"zone": "a"}}]),
    ],
    ids=["merge", "strategic", "json"],
)
async def test_every_patch_type_stamps_the_field_manager(
    http: aiohttp.ClientSession, clock: Clock, headers: dict[str, str], body: Any
) -> None:
    clock.advance(30)
    patched = await send(http, "PATCH", NODE_URL + "?fieldManager=nodefence", body, headers=headers)
    mine = entries(patched)[("nodefence", "")]
    assert mine["time"] == rfc3339(clock())
    assert mine["operation"] == "Update"
    assert mine["apiVersion"] == "v1"
    assert mine["fieldsV1"] == {"f:metadata": {"f:labels": {".": {}, "f:zone": {}}}}


async def test_status_writes_are_their_own_entry_and_take_fields_from_others(
    http: aiohttp.ClientSession, clock: Clock
) -> None:
    kubelet = "kubelet/v1.24.8 (linux/amd64) kubernetes/fdc7750"
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady"}
    first = await send(
        http,
        "PATCH",
        NODE_URL + "/status",
        {"status": {"conditions": [ready]}},
        agent=kubelet,
        headers=STRATEGIC,
    )
    status_entry = entries(first)[("kubelet", "status")]
    assert status_entry["subresource"] == "status"
    assert status_entry["fieldsV1"]["f:status"]["f:conditions"] == {
        'k:{"type":"Ready"}': {".": {}, "f:reason": {}, "f:status": {}, "f:type": {}}
    }
    kubelet_time = status_entry["time"]
    clock.advance(60)
    unknown = {**ready, "status": "Unknown", "reason": "NodeStatusUnknown"}
    second = await send(
        http,
        "PATCH",
        NODE_URL + "/status",
        {"status": {"conditions": [unknown]}},
        agent="kube-controller-manager/v1.24.8 (linux/amd64) kubernetes/fdc7750/node-controller",
        headers=STRATEGIC,
    )
    by = entries(second)
    assert by[("kube-controller-manager", "status")]["time"] == rfc3339(clock())
    assert by[("kube-controller-manager", "status")]["fieldsV1"]["f:status"]["f:conditions"] == {
        'k:{"type":"Ready"}': {"f:reason": {}, "f:status": {}}
    }
    # The kubelet keeps only what nobody changed since, and its time is its own last write.
    assert by[("kubelet", "status")]["time"] == kubelet_time
    assert by[("kubelet", "status")]["fieldsV1"]["f:status"]["f:conditions"] == {
        'k:{"type":"Ready"}': {".": {}, "f:type": {}}
    }


async def test_manager_falls_back_to_unknown_without_user_agent(
    http: aiohttp.ClientSession,
) -> None:
    async with http.patch(
        NODE_URL,
        data=json.dumps({"metadata": {"labels": {"a": "b"}}}),
        headers=MERGE,
        skip_auto_headers=["User-Agent"],
    ) as response:
        assert response.status == 200
        patched = await response.json()
    assert ("unknown", "") in entries(patched)


async def test_an_overlong_field_manager_is_refused(http: aiohttp.ClientSession) -> None:
    answer = await send(
        http,
        "PATCH",
        NODE_URL + "?fieldManager=" + "x" * 129,
        {"metadata": {"labels": {"a": "b"}}},
        headers=MERGE,
        status=422,
    )
    assert answer["reason"] == "Invalid"
    assert "fieldManager" in answer["message"]


async def test_a_client_cannot_date_its_own_or_anyone_elses_write(
    http: aiohttp.ClientSession, server: SimulatorHandle, clock: Clock
) -> None:
    kubelet = "kubelet/v1.24.8 (linux/amd64) kubernetes/fdc7750"
    url = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
    await send(http, "POST", url, lease("2025-03-04T05:06:07.000000Z"), agent=kubelet, status=201)
    kubelet_time = rfc3339(clock())
    clock.advance(600)
    forged = lease("2025-03-04T05:16:07.000000Z")
    forged["metadata"]["managedFields"] = [
        {
            "manager": "kubelet",
            "operation": "Update",
            "apiVersion": "coordination.k8s.io/v1",
            "time": "2030-01-01T00:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:spec": {"f:holderIdentity": {}, "f:leaseDurationSeconds": {}, "f:renewTime": {}}
            },
        },
        {
            "manager": "intruder",
            "operation": "Update",
            "apiVersion": "coordination.k8s.io/v1",
            "time": "2030-01-01T00:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {"f:holderIdentity": {}}},
        },
    ]
    written = await send(http, "PUT", LEASE_URL + "?fieldManager=intruder", forged)
    by = entries(written)
    # The renewTime change was the intruder's write, dated now; the kubelet keeps its own time.
    assert by[("intruder", "")]["time"] == rfc3339(clock())
    assert by[("intruder", "")]["fieldsV1"]["f:spec"]["f:renewTime"] == {}
    assert by[("kubelet", "")]["time"] == kubelet_time
    assert "f:renewTime" not in by[("kubelet", "")]["fieldsV1"]["f:spec"]
    stored = server.sim.store.get(LEASES, "kube-node-lease", "worker1")
    assert "2030" not in json.dumps(stored["metadata"]["managedFields"])


async def test_managed_fields_of_one_empty_entry_strip_them(http: aiohttp.ClientSession) -> None:
    await send(http, "PATCH", NODE_URL, {"metadata": {"labels": {"a": "b"}}}, headers=MERGE)
    stripped = await send(
        http, "PATCH", NODE_URL, {"metadata": {"managedFields": [{}]}}, headers=MERGE
    )
    assert "managedFields" not in stripped["metadata"]


async def _date(http: aiohttp.ClientSession, method: str, url: str) -> tuple[int, str]:
    async with http.request(method, url) as response:
        await response.read()
        return response.status, response.headers["Date"]


async def test_every_response_carries_the_server_clocks_date(
    http: aiohttp.ClientSession, clock: Clock
) -> None:
    clock.advance(-86400 * 3)
    expected = format_datetime(clock().replace(microsecond=0), usegmt=True)
    for method, url, status in [
        ("GET", "/api/v1/nodes", 200),
        ("GET", "/api/v1/nodes/nope", 404),
        ("GET", "/version", 200),
        ("GET", "/no/such/path", 404),
        ("GET", "/sim/v1/nodes", 200),
        ("POST", "/sim/v1/nodes/nope/down", 404),
        ("GET", "/metrics", 200),
    ]:
        assert await _date(http, method, url) == (status, expected), url


async def test_a_watch_carries_the_date_it_started_at(
    http: aiohttp.ClientSession, clock: Clock
) -> None:
    async with http.get("/api/v1/nodes?watch=true&timeoutSeconds=1") as response:
        assert response.status == 200
        assert response.headers["Date"] == format_datetime(
            clock().replace(microsecond=0), usegmt=True
        )
        line = await response.content.readline()
        assert json.loads(line)["type"] == "ADDED"
