"""Health endpoints as the generic API server answers them, and the pod subresources that
need a container runtime, refused with a message that says so."""

from __future__ import annotations

import aiohttp
import pytest

from nodefence_sim.resources import PODS
from nodefence_sim.testing import SimulatorHandle


async def _fetch(handle: SimulatorHandle, path: str, method: str = "GET") -> tuple[int, str, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, handle.url + path) as response,
    ):
        return response.status, response.content_type, await response.text()


@pytest.mark.parametrize("kind", ["healthz", "livez", "readyz"])
async def test_health_endpoints(sim_api: SimulatorHandle, kind: str) -> None:
    assert await _fetch(sim_api, f"/{kind}") == (200, "text/plain", "ok")
    status, _, verbose = await _fetch(sim_api, f"/{kind}?verbose")
    lines = verbose.splitlines()
    assert status == 200
    assert lines[:3] == ["[+]ping ok", "[+]log ok", "[+]etcd ok"]
    assert lines[-1] == f"{kind} check passed"
    _, _, excluded = await _fetch(sim_api, f"/{kind}?verbose&exclude=etcd")
    assert "[+]etcd excluded: ok" in excluded.splitlines()
    assert await _fetch(sim_api, f"/{kind}/ping") == (200, "text/plain", "ok")
    assert (await _fetch(sim_api, f"/{kind}/nonsense"))[0] == 404


async def test_readyz_has_its_own_checks(sim_api: SimulatorHandle) -> None:
    _, _, verbose = await _fetch(sim_api, "/readyz?verbose")
    assert {"[+]informer-sync ok", "[+]shutdown ok"} <= set(verbose.splitlines())


@pytest.mark.parametrize(
    ("subresource", "method", "said"),
    [
        ("log", "GET", "no container logs to read"),
        ("exec", "POST", "no container to run a command in"),
        ("exec", "GET", "no container to run a command in"),
        ("attach", "POST", "no container to attach to"),
        ("portforward", "GET", "no pod port to forward"),
    ],
)
async def test_runtime_subresources_say_there_is_no_runtime(
    sim_api: SimulatorHandle, subresource: str, method: str, said: str
) -> None:
    sim_api.sim.store.create(
        PODS,
        "default",
        {"metadata": {"name": "web"}, "spec": {"containers": [{"name": "c", "image": "x"}]}},
    )
    path = f"/api/v1/namespaces/default/pods/web/{subresource}"
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, sim_api.url + path) as response,
    ):
        assert response.status == 400
        body = await response.json()
    assert body["reason"] == "BadRequest"
    assert body["message"] == (
        f'pods "web": {said}: the simulated cluster has no container runtime'
        " (its kubelets run no containers)"
    )


async def test_runtime_subresources_of_a_missing_pod_are_404_and_verbs_are_checked(
    sim_api: SimulatorHandle,
) -> None:
    status, _, _ = await _fetch(sim_api, "/api/v1/namespaces/default/pods/nope/log")
    assert status == 404
    status, _, _ = await _fetch(sim_api, "/api/v1/namespaces/default/pods/nope/log", "POST")
    assert status == 405


async def test_discovery_lists_the_subresources_with_their_verbs(
    sim_api: SimulatorHandle,
) -> None:
    async with aiohttp.ClientSession() as session, session.get(sim_api.url + "/api/v1") as response:
        resources = {r["name"]: r for r in (await response.json())["resources"]}
    assert resources["pods/log"]["verbs"] == ["get"]
    assert resources["pods/exec"]["verbs"] == ["create", "get"]
    assert resources["pods/exec"]["kind"] == "PodExecOptions"
    assert resources["pods/status"]["verbs"] == ["get", "patch", "update"]
