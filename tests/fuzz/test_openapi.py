"""The OpenAPI description: valid, complete, and true of a running receiver."""

from __future__ import annotations

import json
import typing
import urllib.request
from typing import Any, cast

import jsonschema
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from openapi_spec_validator import validate
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from nodefence.engine.drivers import power_drivers
from nodefence.engine.model import Action, PowerAction, ReleaseVolumeAttachmentAction
from nodefence.engine.render import action_to_dict
from nodefence.http.app import build_app
from nodefence.http.fencer_api import FencerApi
from nodefence.http.openapi import ACTION_SCHEMAS, OPENAPI_PATH, openapi_document
from nodefence.settings import Settings

from .stack import Stack

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]


def test_document_is_valid_openapi_3_1() -> None:
    document = openapi_document()
    assert document["openapi"].startswith("3.1")
    validate(document)


def test_every_action_the_engine_can_decide_is_described() -> None:
    assert set(ACTION_SCHEMAS) == {member.__name__ for member in typing.get_args(Action)}


@pytest.mark.parametrize(
    "action",
    [
        *(PowerAction("worker1", "uid-1", driver, "off", True) for driver in power_drivers()),
        ReleaseVolumeAttachmentAction("worker1", "uid-1", "csi-1", "pv-1", "uid-csi-1"),
    ],
    ids=lambda action: f"{type(action).__name__}-{getattr(action, 'driver', '')}",
)
def test_a_decided_action_matches_its_description(action: Action) -> None:
    jsonschema.validate(action_to_dict(action), ACTION_SCHEMAS[type(action).__name__])


def test_every_served_route_is_described() -> None:
    app = build_app(Settings(auth_disabled=True), cast(FencerApi, object()))
    described = {
        (method.upper(), path)
        for path, operations in openapi_document()["paths"].items()
        for method in operations
    }
    served = {
        (route.method, route.resource.canonical)
        for route in app.router.routes()
        if route.resource is not None and route.method != "HEAD"
    }
    assert {("POST", "/alerts"), ("GET", OPENAPI_PATH)} <= served
    assert served - described == set()


def test_alert_responses_cover_the_problem_statuses() -> None:
    responses = openapi_document()["paths"]["/alerts"]["post"]["responses"]
    assert set(responses) == {"200", "400", "401", "413", "415", "422", "503"}
    for status, response in responses.items():
        media = "application/json" if status == "200" else "application/problem+json"
        assert set(response["content"]) == {media}


def test_routes_needing_credentials_are_marked_secured() -> None:
    paths = openapi_document()["paths"]
    for path, operations in paths.items():
        for operation in operations.values():
            secured = operation["security"] != []
            assert secured == (path in ("/alerts", "/reconcile", "/decisions")), path


def test_served_document_is_the_description(stack: Stack) -> None:
    with urllib.request.urlopen(stack.url + OPENAPI_PATH, timeout=10) as response:  # noqa: S310
        assert response.status == 200
        assert response.headers.get_content_type() == "application/json"
        served = json.load(response)
    assert served == openapi_document()


def _operations(stack: Stack) -> list[Any]:
    schema = schemathesis.openapi.from_url(stack.url + OPENAPI_PATH)
    return [result.ok() for result in schema.get_all_operations()]


def _exercise(stack: Stack, operation: Any, mode: GenerationMode, headers: dict[str, str]) -> None:
    @settings(
        max_examples=50,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def exercise(case: Any) -> None:
        response = case.call(base_url=stack.url, headers=headers, timeout=30)
        case.validate_response(response, checks=CHECKS)

    exercise()


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_receiver_conforms_to_its_description(stack: Stack, mode: GenerationMode) -> None:
    """Generated requests for every operation: no 5xx, and every response is as described.

    The seed cluster has every node Ready, so no generated alert can lead to a fence; the
    request log must show no write to nodes or pods afterwards.
    """
    operations = _operations(stack)
    exercised = {operation.label for operation in operations}
    # Schemathesis leaves out the operation serving the document it was loaded from.
    assert exercised == {
        f"{method.upper()} {path}"
        for path, methods in openapi_document()["paths"].items()
        for method in methods
        if path != OPENAPI_PATH
    }
    cursor = stack.cursor()
    headers = {"Authorization": f"Bearer {stack.token}"}
    paths = openapi_document()["paths"]
    for operation in operations:
        described = paths[operation.path][operation.method.lower()]
        if mode is GenerationMode.NEGATIVE and not (
            "requestBody" in described or "parameters" in described
        ):
            # Nothing in such a request can be made invalid.
            continue
        _exercise(stack, operation, mode, headers)
    assert stack.forbidden_writes_since(cursor) == []
