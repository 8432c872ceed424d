"""Node taints are validated as the real API server's ``validateNodeTaints`` does: a write a real
cluster refuses with 422 must not succeed against the simulator, whichever verb carries it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from nodefence_sim.resources import NODES
from nodefence_sim.testing import SimulatorHandle

NODE_URL = "/api/v1/nodes/worker1"
OUT_OF_SERVICE = {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown"}
DUPLICATE = [
    {**OUT_OF_SERVICE, "effect": "NoExecute"},
    {"key": "node.kubernetes.io/out-of-service", "value": "other", "effect": "NoExecute"},
]


@pytest.fixture
async def http(sim_api: SimulatorHandle) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(sim_api.url) as session:
        yield session


async def _write(
    http: aiohttp.ClientSession, method: str, url: str, body: Any, content_type: str
) -> tuple[int, dict[str, Any]]:
    async with http.request(
        method, url, data=json.dumps(body), headers={"Content-Type": content_type}
    ) as response:
        return response.status, await response.json()


async def _node(http: aiohttp.ClientSession) -> dict[str, Any]:
    async with http.get(NODE_URL) as response:
        node: dict[str, Any] = await response.json()
        return node


def _requests(node: dict[str, Any], taints: list[dict[str, Any]]) -> list[tuple[str, str, Any]]:
    replaced = {**node, "spec": {**node["spec"], "taints": taints}}
    return [
        ("PUT", NODE_URL, replaced, "application/json"),
        ("PATCH", NODE_URL, {"spec": {"taints": taints}}, "application/merge-patch+json"),
        ("PATCH", NODE_URL, {"spec": {"taints": taints}}, "application/strategic-merge-patch+json"),
        (
            "PATCH",
            NODE_URL,
            [{"op": "add", "path": "/spec/taints", "value": taints}],
            "application/json-patch+json",
        ),
        (
            "PATCH",
            NODE_URL + "?dryRun=All",
            {"spec": {"taints": taints}},
            "application/merge-patch+json",
        ),
    ]


async def test_duplicate_key_and_effect_is_invalid_on_every_write(
    http: aiohttp.ClientSession, sim_api: SimulatorHandle
) -> None:
    node = await _node(http)
    for method, url, body, content_type in _requests(node, DUPLICATE):
        status, answer = await _write(http, method, url, body, content_type)
        assert status == 422, (method, url, content_type, answer)
        assert answer["reason"] == "Invalid"
        assert answer["details"]["kind"] == "Node"
        assert answer["details"]["name"] == "worker1"
        [cause] = answer["details"]["causes"]
        assert cause["field"] == "spec.taints[1]"
        assert cause["reason"] == "FieldValueDuplicate"
        assert cause["message"].startswith("Duplicate value: ")
        assert cause["message"].endswith("taints must be unique by key and effect pair")
        assert answer["message"].startswith('Node "worker1" is invalid: spec.taints[1]: Duplicate')
    assert "taints" not in sim_api.sim.store.get(NODES, None, "worker1")["spec"]


async def test_same_key_with_another_effect_is_fine(http: aiohttp.ClientSession) -> None:
    taints = [{**OUT_OF_SERVICE, "effect": "NoExecute"}, {**OUT_OF_SERVICE, "effect": "NoSchedule"}]
    status, answer = await _write(
        http, "PATCH", NODE_URL, {"spec": {"taints": taints}}, "application/merge-patch+json"
    )
    assert status == 200, answer
    assert answer["spec"]["taints"] == taints


async def test_unsupported_effect_bad_key_and_bad_value_are_each_named(
    http: aiohttp.ClientSession,
) -> None:
    taints = [
        {**OUT_OF_SERVICE, "effect": "NoExec"},
        {"key": "bad key", "effect": "NoSchedule"},
        {"key": "example.com/ok", "value": "-bad-", "effect": "NoSchedule"},
        {"key": "example.com/no-effect"},
    ]
    status, answer = await _write(
        http, "PATCH", NODE_URL, {"spec": {"taints": taints}}, "application/merge-patch+json"
    )
    assert status == 422
    causes = {(c["field"], c["reason"]): c["message"] for c in answer["details"]["causes"]}
    assert causes[("spec.taints[0].effect", "FieldValueNotSupported")] == (
        'Unsupported value: "NoExec": supported values: "NoExecute", "NoSchedule", '
        '"PreferNoSchedule"'
    )
    assert causes[("spec.taints[1].key", "FieldValueInvalid")].startswith(
        'Invalid value: "bad key": name part must consist of alphanumeric characters'
    )
    assert causes[("spec.taints[2].value", "FieldValueInvalid")].startswith(
        'Invalid value: "-bad-": a valid label must be an empty string'
    )
    assert causes[("spec.taints[3].effect", "FieldValueRequired")] == "Required value"
    assert answer["message"].startswith('Node "worker1" is invalid: [spec.taints[0].effect: ')


async def test_create_with_invalid_taints_is_refused(http: aiohttp.ClientSession) -> None:
    body = {"metadata": {"name": "worker9"}, "spec": {"taints": DUPLICATE}}
    status, answer = await _write(http, "POST", "/api/v1/nodes", body, "application/json")
    assert status == 422
    assert answer["details"]["causes"][0]["field"] == "spec.taints[1]"
    async with http.get("/api/v1/nodes/worker9") as response:
        assert response.status == 404
