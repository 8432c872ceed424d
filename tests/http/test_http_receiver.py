"""The receiver over real HTTP: routes, authentication, body limits, problems, metrics, logs."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import io
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from http_support import TOKEN, RecordingPipeline, bearer, load_payload

from conftest import ClientFactory
from nodefence.errors import ClusterUnavailableError

Client = TestClient[Any, Any]
PROBLEM = "application/problem+json"


def basic(user: str, password: str) -> dict[str, str]:
    raw = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {raw}"}


async def post_alerts(client: Client, payload: Any, headers: dict[str, str] | None = None) -> Any:
    return await client.post("/alerts", json=payload, headers=headers or bearer())


async def assert_problem(response: Any, status: int) -> dict[str, Any]:
    assert response.status == status
    assert response.content_type == PROBLEM
    body: dict[str, Any] = await response.json(content_type=PROBLEM)
    assert body["status"] == status
    assert body["title"]
    assert body["type"]
    return body


async def test_real_payload_reaches_pipeline_and_decisions_come_back(
    client: Client, pipeline: RecordingPipeline
) -> None:
    response = await post_alerts(client, load_payload("am_firing.json"))

    assert response.status == 200
    body = await response.json()
    [events] = pipeline.received
    assert [(e.node, e.status.value) for e in events] == [
        ("worker-1", "firing"),
        ("worker-2", "firing"),
    ]
    assert [d["node"] for d in body["decisions"]] == ["worker-1", "worker-2"]
    first = body["decisions"][0]
    assert first["verdict"] == "noop"
    assert first["fingerprint"] == "b9301a748b8da117"
    assert first["status"] == "firing"
    assert first["reasons"][1] == {
        "guard": "node-ready",
        "passed": False,
        "message": "node is Ready",
    }
    assert first["actions"] == []


async def test_firing_and_resolved_payload_with_duplicates_and_unknown_fields(
    client: Client, pipeline: RecordingPipeline
) -> None:
    payload = load_payload("am_firing_and_resolved.json")
    payload["orgId"] = 1
    duplicate = json.loads(json.dumps(payload["alerts"][1]))
    duplicate["silenceURL"] = "http://alertmanager:9093/#/silences/new"
    payload["alerts"].append(duplicate)

    response = await post_alerts(client, payload)

    assert response.status == 200
    [events] = pipeline.received
    assert [(e.node, e.status.value) for e in events] == [
        ("worker-1", "resolved"),
        ("worker-2", "firing"),
    ]
    assert len((await response.json())["decisions"]) == 2


async def test_content_type_with_charset_is_accepted(
    client: Client, pipeline: RecordingPipeline
) -> None:
    response = await client.post(
        "/alerts",
        data=json.dumps(load_payload("am_firing.json")).encode(),
        headers={**bearer(), "Content-Type": "application/json; charset=utf-8"},
    )
    assert response.status == 200
    assert len(pipeline.received) == 1


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong-token"},
        {"Authorization": f"Bearer {TOKEN}x"},
        {"Authorization": f"Token {TOKEN}"},
        {"Authorization": "Basic !!!notbase64"},
    ],
    ids=["missing", "wrong", "longer", "scheme", "garbage"],
)
async def test_bad_or_missing_token_is_401_with_challenge(
    client: Client, pipeline: RecordingPipeline, headers: dict[str, str]
) -> None:
    response = await client.post("/alerts", json=load_payload("am_firing.json"), headers=headers)
    body = await assert_problem(response, 401)
    assert response.headers.getall("WWW-Authenticate") == ['Bearer realm="nodefence"']
    assert body["type"].endswith("unauthenticated")
    assert pipeline.received == []


async def test_reconcile_requires_auth_and_returns_decisions(
    client: Client, pipeline: RecordingPipeline
) -> None:
    assert (await client.post("/reconcile")).status == 401
    assert pipeline.reconciles == 0
    response = await client.post("/reconcile", headers=bearer())
    assert response.status == 200
    assert (await response.json())["decisions"][0]["node"] == "worker-9"
    assert pipeline.reconciles == 1


async def test_basic_auth(make_client: ClientFactory, pipeline: RecordingPipeline) -> None:
    client = await make_client(alert_token=None, basic_auth_user="am", basic_auth_password="pa:ss")
    payload = load_payload("am_firing.json")
    for headers in (basic("am", "wrong"), basic("other", "pa:ss"), bearer()):
        response = await client.post("/alerts", json=payload, headers=headers)
        await assert_problem(response, 401)
        assert response.headers.getall("WWW-Authenticate") == [
            'Basic realm="nodefence", charset="UTF-8"'
        ]
    assert pipeline.received == []
    response = await client.post("/alerts", json=payload, headers=basic("am", "pa:ss"))
    assert response.status == 200
    assert len(pipeline.received) == 1


async def test_token_and_basic_both_configured_offer_both_challenges(
    make_client: ClientFactory,
) -> None:
    client = await make_client(basic_auth_user="am", basic_auth_password="pw")
    response = await client.post("/alerts", json={})
    assert len(response.headers.getall("WWW-Authenticate")) == 2
    ok = await client.post(
        "/alerts", json=load_payload("am_firing.json"), headers=basic("am", "pw")
    )
    assert ok.status == 200


async def test_credentials_compared_in_constant_time(
    make_client: ClientFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def recording(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", recording)
    client = await make_client(basic_auth_user="am", basic_auth_password="pw")
    await client.post("/alerts", json={}, headers={"Authorization": "Bearer nope"})
    # Digests, so that a guess of any length takes as long as any other.
    assert calls == [(sha256(b"nope"), sha256(TOKEN.encode()))]
    calls.clear()
    await client.post("/alerts", json={}, headers=basic("xx", "pw"))
    # Both user and password are compared even though the user already differs.
    assert calls == [(sha256(b"xx"), sha256(b"am")), (sha256(b"pw"), sha256(b"pw"))]


def sha256(raw: bytes) -> bytes:
    return hashlib.sha256(raw).digest()


async def test_auth_disabled_accepts_anyone_and_warns(
    make_client: ClientFactory, pipeline: RecordingPipeline, log_stream: io.StringIO
) -> None:
    client = await make_client(alert_token=None, auth_disabled=True)
    response = await client.post("/alerts", json=load_payload("am_firing.json"))
    assert response.status == 200
    warnings = [json.loads(line) for line in log_stream.getvalue().splitlines()]
    assert any(
        w["event"] == "authentication_disabled" and w["level"] == "warning" for w in warnings
    )


async def test_probes_and_metrics_need_no_auth(client: Client) -> None:
    assert (await client.get("/healthz")).status == 200
    assert (await client.get("/readyz")).status == 200
    assert (await client.get("/metrics")).status == 200


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "application/jsonx"]
)
async def test_wrong_content_type_is_415(
    client: Client, pipeline: RecordingPipeline, content_type: str
) -> None:
    response = await client.post(
        "/alerts",
        data=json.dumps(load_payload("am_firing.json")),
        headers={**bearer(), "Content-Type": content_type},
    )
    await assert_problem(response, 415)
    assert pipeline.received == []


async def test_body_over_limit_by_content_length_is_413(
    make_client: ClientFactory, pipeline: RecordingPipeline
) -> None:
    client = await make_client(max_body_bytes=2048)
    payload = load_payload("am_firing.json")
    payload["padding"] = "x" * 4096
    response = await post_alerts(client, payload)
    body = await assert_problem(response, 413)
    assert "2048" in body["detail"]
    assert pipeline.received == []


async def test_chunked_body_over_limit_is_413(
    make_client: ClientFactory, pipeline: RecordingPipeline
) -> None:
    client = await make_client(max_body_bytes=2048)

    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"version": "4", "status": "firing", "alerts": [], "padding": "'
        for _ in range(64):
            yield b"x" * 1024
        yield b'"}'

    response = await client.post(
        "/alerts", data=chunks(), headers={**bearer(), "Content-Type": "application/json"}
    )
    await assert_problem(response, 413)
    assert pipeline.received == []


async def test_chunked_body_within_limit_is_accepted(
    client: Client, pipeline: RecordingPipeline
) -> None:
    raw = json.dumps(load_payload("am_firing.json")).encode()

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(raw), 100):
            yield raw[start : start + 100]

    response = await client.post(
        "/alerts", data=chunks(), headers={**bearer(), "Content-Type": "application/json"}
    )
    assert response.status == 200
    assert len(pipeline.received[0]) == 2


@pytest.mark.parametrize("raw", [b"{", b"not json", b"\xff\xfe", b""])
async def test_malformed_json_is_400(
    client: Client, pipeline: RecordingPipeline, raw: bytes
) -> None:
    response = await client.post(
        "/alerts", data=raw, headers={**bearer(), "Content-Type": "application/json"}
    )
    body = await assert_problem(response, 400)
    assert body["type"].endswith("malformed-json")
    assert pipeline.received == []


def _with(change: str) -> Any:
    payload = load_payload("am_firing.json")
    if change == "version":
        payload["version"] = "3"
    elif change == "shape":
        payload["alerts"] = {"not": "a list"}
    elif change == "label":
        payload["alerts"][1]["labels"]["node"] = 42
    elif change == "array":
        return [payload]
    return payload


@pytest.mark.parametrize(
    ("change", "pointer", "path"),
    [
        ("version", "#/version", "$.version"),
        ("shape", "#/alerts", "$.alerts"),
        ("label", "#/alerts/1/labels/node", "$.alerts[1].labels.node"),
        ("array", "#", "$"),
    ],
)
async def test_wrong_shape_or_version_is_422_with_error_locations(
    client: Client, pipeline: RecordingPipeline, change: str, pointer: str, path: str
) -> None:
    response = await post_alerts(client, _with(change))
    body = await assert_problem(response, 422)
    assert body["type"] == "urn:nodefence:problem:invalid-payload"
    assert {"pointer": pointer, "path": path} in [
        {"pointer": e["pointer"], "path": e["path"]} for e in body["errors"]
    ]
    assert all(e["detail"] for e in body["errors"])
    assert pipeline.received == []


async def test_unknown_route_and_method_are_problems(client: Client) -> None:
    await assert_problem(await client.get("/nope"), 404)
    response = await client.get("/alerts", headers=bearer())
    await assert_problem(response, 405)
    assert response.headers["Allow"] == "POST"


async def test_cluster_unavailable_is_503_with_retry_after(
    client: Client, pipeline: RecordingPipeline
) -> None:
    pipeline.raise_on_handle = ClusterUnavailableError(
        "connect to https://10.96.0.1:443 refused", retry_after_seconds=30
    )
    response = await post_alerts(client, load_payload("am_firing.json"))
    body = await assert_problem(response, 503)
    assert response.headers["Retry-After"] == "30"
    assert "10.96.0.1" not in json.dumps(body)


async def test_deadline_exceeded_is_503_with_retry_after(
    make_client: ClientFactory, pipeline: RecordingPipeline
) -> None:
    client = await make_client(request_deadline_seconds=0.05)
    pipeline.gate = asyncio.Event()
    response = await post_alerts(client, load_payload("am_firing.json"))
    body = await assert_problem(response, 503)
    assert body["type"].endswith("deadline-exceeded")
    assert int(response.headers["Retry-After"]) > 0


async def test_unexpected_error_is_generic_500_and_logged(
    client: Client, pipeline: RecordingPipeline, log_stream: io.StringIO
) -> None:
    pipeline.raise_on_handle = RuntimeError("internal detail xyzzy")
    response = await post_alerts(client, load_payload("am_firing.json"))
    body = await assert_problem(response, 500)
    assert "xyzzy" not in json.dumps(body)
    assert "Traceback" not in json.dumps(body)
    logged = [json.loads(line) for line in log_stream.getvalue().splitlines()]
    [error] = [line for line in logged if line["event"] == "unhandled_error"]
    assert "xyzzy" in error["exception"]


async def test_readyz_both_ways(client: Client, pipeline: RecordingPipeline) -> None:
    ready = await client.get("/readyz")
    assert ready.status == 200
    assert (await ready.json())["reason"] == "cluster reachable"

    pipeline.readiness = (False, "kubernetes API unreachable")
    not_ready = await client.get("/readyz")
    body = await assert_problem(not_ready, 503)
    assert body["detail"] == "kubernetes API unreachable"
    assert (await client.get("/healthz")).status == 200


def sample(text: str, name: str, **labels: str) -> float | None:
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return None


async def test_metrics_count_alerts_decisions_and_requests(client: Client) -> None:
    await post_alerts(client, load_payload("am_firing_and_resolved.json"))
    await client.post("/alerts", json={})
    response = await client.get("/metrics")
    assert response.status == 200
    assert response.content_type == "text/plain"
    text = await response.text()

    assert sample(text, "nodefence_alerts_received_total", status="firing") == 1
    assert sample(text, "nodefence_alerts_received_total", status="resolved") == 1
    assert sample(text, "nodefence_decisions_total", verdict="noop", guard="node-ready") == 2
    assert sample(text, "nodefence_refusals_total", guard="node-ready") == 2
    assert (
        sample(text, "nodefence_http_requests_total", path="/alerts", method="POST", code="200")
        == 1
    )
    assert (
        sample(text, "nodefence_http_requests_total", path="/alerts", method="POST", code="401")
        == 1
    )
    assert sample(text, "nodefence_http_request_duration_seconds_count", path="/alerts") == 2


async def test_two_apps_have_separate_registries(make_client: ClientFactory) -> None:
    first = await make_client()
    second = await make_client()
    await post_alerts(first, load_payload("am_firing.json"))
    text = await (await second.get("/metrics")).text()
    assert sample(text, "nodefence_alerts_received_total", status="firing") is None


async def test_a_webhook_is_one_request_line_with_what_it_carried(
    client: Client, log_stream: io.StringIO
) -> None:
    document = load_payload("am_firing.json")
    await post_alerts(client, document)
    lines = [json.loads(line) for line in log_stream.getvalue().splitlines()]
    requests = [r for r in lines if r["event"] == "http_request" and r["path"] == "/alerts"]

    assert len(requests) == 1
    assert requests[0]["status"] == 200
    assert requests[0]["receiver"] == document["receiver"]
    assert requests[0]["group_key"] == document["groupKey"]
    assert requests[0]["alerts"] == len(document["alerts"])
    assert requests[0]["events"] >= 1
    assert not [r for r in lines if r["event"] == "webhook_received"]


async def test_token_never_logged_even_on_failure(client: Client, log_stream: io.StringIO) -> None:
    await client.post("/alerts", json={}, headers={"Authorization": f"Bearer {TOKEN}-wrong"})
    await client.post("/alerts", json={}, headers=basic("am", TOKEN))
    await post_alerts(client, load_payload("am_firing.json"))
    output = log_stream.getvalue()

    assert TOKEN not in output
    events = [json.loads(line)["event"] for line in output.splitlines()]
    assert events.count("request_unauthenticated") == 2
    requests = [json.loads(line) for line in output.splitlines()]
    logged = [r for r in requests if r["event"] == "http_request" and r["status"] == 200]
    assert logged[0]["method"] == "POST"
    assert logged[0]["path"] == "/alerts"
    assert logged[0]["duration_ms"] >= 0
    assert "request_id" in logged[0]
