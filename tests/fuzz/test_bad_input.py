"""Bad input against a real receiver and the seed cluster: never a 500, never a write.

Every generated alert that looks valid names a node that is Ready (refused by S1) or does not
exist, so the only write any of these requests may cause is the Event recording a refusal.
"""

from __future__ import annotations

import http.client
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodefence_sim.demo.payloads import node_alert, webhook

from .client import Reply, basic, bearer, send
from .stack import MAX_BODY_BYTES, Stack

READY_NODES = ("control01", "control02", "control03", "compute01", "compute02")
FUZZ = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Any code point, lone surrogates included (the default text strategy leaves those out).
odd_text = st.text(
    alphabet=st.characters(codec=None, categories=None, exclude_categories=()), max_size=40
)
tricky_text = st.one_of(
    odd_text,
    st.sampled_from(
        [
            "",
            "\x00",
            "control01\x00",
            "\u202econtrol01",
            "control01\u200f",
            "\ud800",
            "\udfff",
            "../../api/v1/nodes",
            "control01/status",
            "%2e%2e",
            "a" * 300,
            "CONTROL01",
            "control01 ",
            "\U0001f525",
        ]
    ),
)
node_names = st.one_of(st.sampled_from(READY_NODES), tricky_text)
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    tricky_text,
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(tricky_text, inner, max_size=4)
    ),
    max_leaves=20,
)


@st.composite
def plausible_alert(draw: st.DrawFn) -> dict[str, Any]:
    label = draw(st.sampled_from(["node", "instance", "kubernetes_node"]))
    alert = node_alert(
        "placeholder",
        status=draw(st.sampled_from(["firing", "resolved"])),
        alertname=draw(st.sampled_from(["KubeNodeNotReady", "KubeNodeUnreachable", "Watchdog"])),
        node_label=label,
    )
    # Set after building: the builder's fingerprint cannot hash lone surrogates.
    alert["labels"][label] = draw(node_names)
    return alert


def _paths(document: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(document, dict):
        for key, value in document.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            found += _paths(value, (*prefix, index))
    return found


@st.composite
def mutated_payload(draw: st.DrawFn) -> Any:
    """A webhook with some members deleted or replaced by values of the wrong type."""
    payload = webhook(draw(st.lists(plausible_alert(), min_size=1, max_size=3)))
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        paths = _paths(payload)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = payload
        for step in path[:-1]:
            parent = parent[step]
        if draw(st.booleans()):
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(json_values)
    return payload


def _post_json(stack: Stack, document: Any, *, auth: tuple[str, str] | None = None) -> Reply:
    body = json.dumps(document).encode()
    return send(
        stack,
        "/alerts",
        body,
        headers=[auth or bearer(stack), ("Content-Type", "application/json")],
    )


def _assert_harmless(stack: Stack, cursor: int, reply: Reply) -> None:
    assert reply.status < 500, (reply.status, reply.body[:500])
    if reply.status >= 400:
        assert reply.content_type.startswith("application/problem+json") or reply.status in (
            400,
            431,
        ), reply
    assert stack.forbidden_writes_since(cursor) == []


@FUZZ
@given(payload=mutated_payload())
def test_wrong_types_and_missing_fields(stack: Stack, payload: Any) -> None:
    cursor = stack.cursor()
    reply = _post_json(stack, payload)
    _assert_harmless(stack, cursor, reply)
    assert reply.status in (200, 422), reply


@FUZZ
@given(alerts=st.lists(plausible_alert(), max_size=5), use_basic=st.booleans())
def test_plausible_alerts_for_ready_or_missing_nodes_write_nothing(
    stack: Stack, alerts: list[dict[str, Any]], use_basic: bool
) -> None:
    cursor = stack.cursor()
    reply = _post_json(stack, webhook(alerts), auth=basic() if use_basic else None)
    _assert_harmless(stack, cursor, reply)
    assert reply.status == 200, reply
    for decision in reply.json()["decisions"]:
        assert decision["verdict"] in ("skip", "noop", "deferred"), decision
        assert decision["actions"] == [], decision


@FUZZ
@given(document=json_values)
def test_arbitrary_json(stack: Stack, document: Any) -> None:
    cursor = stack.cursor()
    reply = _post_json(stack, document)
    _assert_harmless(stack, cursor, reply)
    assert reply.status == 422, reply


@FUZZ
@given(body=st.binary(max_size=2048), content_type=st.sampled_from(["application/json", ""]))
def test_arbitrary_bytes(stack: Stack, body: bytes, content_type: str) -> None:
    cursor = stack.cursor()
    headers = [bearer(stack)]
    if content_type:
        headers.append(("Content-Type", content_type))
    reply = send(stack, "/alerts", body, headers=headers)
    _assert_harmless(stack, cursor, reply)
    assert reply.status in (400, 415, 422), reply


@FUZZ
@given(
    alert=plausible_alert(),
    encoding=st.sampled_from(["surrogatepass", "latin-1", "utf-16", "utf-8-sig"]),
)
def test_odd_encodings(stack: Stack, alert: dict[str, Any], encoding: str) -> None:
    text = json.dumps(webhook([alert]), ensure_ascii=False)
    body = (
        text.encode("utf-8", "surrogatepass")
        if encoding == "surrogatepass"
        else text.encode(encoding, "replace")
    )
    cursor = stack.cursor()
    reply = send(
        stack, "/alerts", body, headers=[bearer(stack), ("Content-Type", "application/json")]
    )
    _assert_harmless(stack, cursor, reply)


@FUZZ
@given(depth=st.integers(min_value=1, max_value=400), kind=st.sampled_from(["[", '{"a":']))
def test_nesting_the_parser_can_take(stack: Stack, depth: int, kind: str) -> None:
    closer = "]" if kind == "[" else "}"
    nested = kind * depth + "null" + closer * depth
    payload = json.dumps(webhook([node_alert("control01")]))
    bodies = [nested, payload[:-1] + ', "extra": ' + nested + "}"]
    for body in bodies:
        cursor = stack.cursor()
        reply = send(
            stack,
            "/alerts",
            body.encode(),
            headers=[bearer(stack), ("Content-Type", "application/json")],
        )
        _assert_harmless(stack, cursor, reply)


def test_nesting_deeper_than_the_parser_recursion_limit_is_a_client_error(stack: Stack) -> None:
    body = b"[" * 20_000 + b"]" * 20_000
    reply = send(
        stack, "/alerts", body, headers=[bearer(stack), ("Content-Type", "application/json")]
    )
    assert reply.status == 400, reply


@FUZZ
@given(
    first=st.sampled_from(["4", "3", 4]),
    second=st.sampled_from(["4", "3", 4, None]),
)
def test_duplicate_keys(stack: Stack, first: Any, second: Any) -> None:
    payload = webhook([node_alert("control02")])
    del payload["version"]
    body = (
        f'{{"version": {json.dumps(first)}, "version": {json.dumps(second)}, '
        + json.dumps(payload)[1:]
    )
    cursor = stack.cursor()
    reply = send(
        stack,
        "/alerts",
        body.encode(),
        headers=[bearer(stack), ("Content-Type", "application/json")],
    )
    _assert_harmless(stack, cursor, reply)
    # The last occurrence wins, as in json.loads: only a final "4" is a version 4 payload.
    assert reply.status == (200 if second == "4" else 422), reply


header_values = st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"),
    max_size=200,
)


@FUZZ
@given(
    authorizations=st.lists(
        st.one_of(
            header_values,
            st.sampled_from(
                ["Bearer", "Bearer ", "Basic", "Basic !!!", "Basic Og==", "Digest x", "bearer"]
            ),
            header_values.map(lambda v: "Bearer " + v),
            header_values.map(lambda v: "Basic " + v),
        ),
        max_size=3,
    ),
    content_type=st.one_of(
        st.sampled_from(
            [
                "application/json",
                "application/json; charset=utf-8",
                "application/JSON",
                "text/plain",
                "application/x-www-form-urlencoded",
                "multipart/form-data; boundary=x",
                "application/json; charset=latin-1",
                "*/*",
                ";;;",
            ]
        ),
        header_values,
    ),
)
def test_header_abuse(stack: Stack, authorizations: list[str], content_type: str) -> None:
    headers = [("Authorization", value) for value in authorizations]
    headers.append(("Content-Type", content_type))
    cursor = stack.cursor()
    reply = send(
        stack, "/alerts", json.dumps(webhook([node_alert("control01")])).encode(), headers=headers
    )
    _assert_harmless(stack, cursor, reply)
    assert reply.status in (400, 401, 415), reply


def test_repeated_authorization_with_one_good_value_is_not_a_way_in(stack: Stack) -> None:
    body = json.dumps(webhook([node_alert("control01")])).encode()
    for order in (
        [("Authorization", "Bearer wrong"), bearer(stack)],
        [bearer(stack), ("Authorization", "Bearer wrong")],
    ):
        reply = send(stack, "/alerts", body, headers=[*order, ("Content-Type", "application/json")])
        assert reply.status in (200, 400, 401), reply
    cursor = stack.cursor()
    reply = send(
        stack,
        "/alerts",
        body,
        headers=[
            ("Authorization", "Bearer wrong"),
            bearer(stack),
            ("Content-Type", "application/json"),
        ],
    )
    assert reply.status != 200 or reply.json()["decisions"][0]["verdict"] != "fence"
    assert stack.forbidden_writes_since(cursor) == []


@pytest.mark.parametrize("size", [8_000, 9_000, 70_000])
def test_huge_headers(stack: Stack, size: int) -> None:
    cursor = stack.cursor()
    body = json.dumps(webhook([node_alert("control01")])).encode()
    for headers in (
        [("X-Filler", "x" * size), bearer(stack), ("Content-Type", "application/json")],
        [("Authorization", "Bearer " + "x" * size), ("Content-Type", "application/json")],
        [
            *[(f"X-H{i}", "y") for i in range(size // 40)],
            bearer(stack),
            ("Content-Type", "application/json"),
        ],
    ):
        try:
            reply = send(stack, "/alerts", body, headers=headers)
        except (ConnectionError, http.client.HTTPException):
            continue
        assert reply.status < 500, reply
        assert reply.status in (200, 400, 401, 431), reply
    assert stack.forbidden_writes_since(cursor) == []


@pytest.mark.parametrize("chunked", [False, True])
def test_oversized_bodies_are_refused(stack: Stack, chunked: bool) -> None:
    payload = webhook([node_alert("control01")])
    payload["padding"] = "x" * MAX_BODY_BYTES
    body = json.dumps(payload).encode()
    cursor = stack.cursor()
    if chunked:
        reply = send(
            stack,
            "/alerts",
            headers=[bearer(stack), ("Content-Type", "application/json")],
            chunks=(body[i : i + 4096] for i in range(0, len(body), 4096)),
        )
    else:
        reply = send(
            stack, "/alerts", body, headers=[bearer(stack), ("Content-Type", "application/json")]
        )
    assert reply.status == 413, reply
    assert reply.content_type.startswith("application/problem+json")
    assert stack.forbidden_writes_since(cursor) == []


def test_declared_length_over_the_limit_is_refused_before_reading(stack: Stack) -> None:
    reply = send(
        stack,
        "/alerts",
        b"{}",
        headers=[bearer(stack), ("Content-Type", "application/json")],
        content_length=MAX_BODY_BYTES * 100,
    )
    assert reply.status == 413, reply


@FUZZ
@given(
    alerts=st.lists(plausible_alert(), min_size=1, max_size=3),
    sizes=st.lists(st.integers(min_value=1, max_value=300), min_size=1, max_size=20),
)
def test_chunked_bodies_are_read_whole(
    stack: Stack, alerts: list[dict[str, Any]], sizes: list[int]
) -> None:
    body = json.dumps(webhook(alerts)).encode()
    pieces = []
    offset = 0
    for size in sizes:
        pieces.append(body[offset : offset + size])
        offset += size
    pieces.append(body[offset:])
    cursor = stack.cursor()
    reply = send(
        stack,
        "/alerts",
        headers=[bearer(stack), ("Content-Type", "application/json")],
        chunks=[p for p in pieces if p],
    )
    _assert_harmless(stack, cursor, reply)
    assert reply.status == 200, reply
    assert len(reply.json()["decisions"]) <= len(alerts)


@FUZZ
@given(
    method=st.sampled_from(["GET", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "FOO"]),
    path=st.sampled_from(["/alerts", "/reconcile", "/healthz", "/metrics", "/nope", "/alerts/"]),
)
def test_other_methods_and_paths(stack: Stack, method: str, path: str) -> None:
    cursor = stack.cursor()
    reply = send(stack, path, b"{}", method=method, headers=[bearer(stack)])
    assert reply.status < 500, reply
    assert stack.forbidden_writes_since(cursor) == []
