"""``limit``/``continue`` on lists: consistent pages from one snapshot, the real token and
``remainingItemCount``, 400 for a bad token and 410 for one whose snapshot is gone."""

from __future__ import annotations

import base64
import json
from typing import Any

import aiohttp

from nodefence_sim.api.paging import KEPT_SNAPSHOTS
from nodefence_sim.resources import CONFIGMAPS, PODS
from nodefence_sim.store import DeleteOptions
from nodefence_sim.testing import SimulatorHandle


async def _get(handle: SimulatorHandle, path: str, **query: str) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(handle.url + path, params=query) as response,
    ):
        return response.status, await response.json()


def _pods(handle: SimulatorHandle, count: int, name: str = "") -> None:
    for i in range(count):
        handle.sim.store.create(
            PODS,
            "default",
            {
                "metadata": {"name": name or f"app-{i:02d}", "labels": {"app": "demo"}},
                "spec": {"nodeName": "worker1", "containers": [{"name": "c", "image": "busybox"}]},
            },
        )


async def test_pages_cover_the_list_once_from_one_snapshot(sim_api: SimulatorHandle) -> None:
    _pods(sim_api, 7)
    status, first = await _get(sim_api, "/api/v1/pods", limit="3")
    assert status == 200
    assert [p["metadata"]["name"] for p in first["items"]] == ["app-00", "app-01", "app-02"]
    assert first["metadata"]["remainingItemCount"] == 4
    token = first["metadata"]["continue"]
    decoded = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    assert decoded == {
        "v": "meta.k8s.io/v1",
        "rv": int(first["metadata"]["resourceVersion"]),
        "start": "default/app-02\x00",
    }
    # A change after the first page does not show up in the next ones.
    sim_api.sim.store.delete(PODS, "default", "app-05", DeleteOptions(grace_period_seconds=0))
    _pods(sim_api, 1, name="app-03a")
    names: list[str] = [p["metadata"]["name"] for p in first["items"]]
    while token:
        status, page = await _get(sim_api, "/api/v1/pods", limit="3", **{"continue": token})
        assert status == 200
        assert page["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
        names += [p["metadata"]["name"] for p in page["items"]]
        token = page["metadata"].get("continue", "")
    assert names == [f"app-{i:02d}" for i in range(7)]
    _, fresh = await _get(sim_api, "/api/v1/pods")
    assert "app-05" not in [p["metadata"]["name"] for p in fresh["items"]]
    assert "remainingItemCount" not in page["metadata"]


async def test_without_limit_or_when_it_fits_there_is_no_token(sim_api: SimulatorHandle) -> None:
    _pods(sim_api, 3)
    for query in ({}, {"limit": "500"}, {"limit": "3"}, {"limit": "0"}):
        status, body = await _get(sim_api, "/api/v1/namespaces/default/pods", **query)
        assert status == 200
        assert len(body["items"]) == 3
        assert "continue" not in body["metadata"]


async def test_selectors_page_without_a_remaining_count(sim_api: SimulatorHandle) -> None:
    _pods(sim_api, 4)
    other = sim_api.sim.store.create(
        PODS,
        "default",
        {
            "metadata": {"name": "other"},
            "spec": {"nodeName": "control02", "containers": [{"name": "c", "image": "busybox"}]},
        },
    )
    assert other["spec"]["nodeName"] == "control02"
    query = {"fieldSelector": "spec.nodeName=worker1", "limit": "2"}
    _, first = await _get(sim_api, "/api/v1/pods", **query)
    assert [p["metadata"]["name"] for p in first["items"]] == ["app-00", "app-01"]
    assert "remainingItemCount" not in first["metadata"]
    _, second = await _get(
        sim_api, "/api/v1/pods", **query, **{"continue": first["metadata"]["continue"]}
    )
    assert [p["metadata"]["name"] for p in second["items"]] == ["app-02", "app-03"]
    assert "continue" not in second["metadata"]


async def test_nodes_page_too(sim_api: SimulatorHandle) -> None:
    _, first = await _get(sim_api, "/api/v1/nodes", limit="1")
    assert [n["metadata"]["name"] for n in first["items"]] == ["control02"]
    assert first["metadata"]["remainingItemCount"] == 1
    _, second = await _get(
        sim_api, "/api/v1/nodes", limit="1", **{"continue": first["metadata"]["continue"]}
    )
    assert [n["metadata"]["name"] for n in second["items"]] == ["worker1"]


async def test_bad_token_and_bad_limit_are_400(sim_api: SimulatorHandle) -> None:
    for query in ({"continue": "not-base64!"}, {"continue": "e30"}, {"limit": "ten"}):
        status, body = await _get(sim_api, "/api/v1/pods", **query)
        assert status == 400
        assert body["reason"] == "BadRequest"
    _, body = await _get(sim_api, "/api/v1/pods", **{"continue": "e30"})
    assert body["message"].startswith("invalid continue token")


async def test_a_token_whose_snapshot_is_gone_is_410_expired(sim_api: SimulatorHandle) -> None:
    _pods(sim_api, 3)
    _, first = await _get(sim_api, "/api/v1/pods", limit="1")
    token = first["metadata"]["continue"]
    for _ in range(KEPT_SNAPSHOTS):
        sim_api.sim.store.create(CONFIGMAPS, "default", {"metadata": {"generateName": "cm-"}})
        _, other = await _get(sim_api, "/api/v1/pods", limit="1")
        assert other["metadata"]["continue"]
    status, body = await _get(sim_api, "/api/v1/pods", limit="1", **{"continue": token})
    assert status == 410
    assert body["reason"] == "Expired"
    assert body["message"].startswith("The provided continue parameter is too old")
