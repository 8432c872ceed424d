"""The receiver's OpenAPI 3.1 description, served at ``GET /openapi.json``.

The bodies' schemas are generated from the types that make them (the webhook payload's pydantic
model, the ``TypedDict`` of a decision, of each action type in ``engine.action_kinds``, of a
problem), so a field added to a body is in its description without a second copy. The routes
are written here, because what a caller needs to know of them is not in the handlers'
signatures: which statuses Alertmanager retries, that bad input is answered with problem
details, and which routes need credentials. The test suite validates the document against the
OpenAPI schema, checks that every served route is in it, and replays it against a running
receiver.
"""

from __future__ import annotations

import copy
import json
from functools import cache
from typing import Any

from aiohttp import web
from pydantic import TypeAdapter
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaMode, JsonSchemaValue
from pydantic_core import core_schema

from nodefence.alerts.webhook import WebhookPayload
from nodefence.engine.action_kinds import KINDS
from nodefence.engine.drivers import power_drivers
from nodefence.engine.render import DecisionJson
from nodefence.http.decisions import LoggedDecisionJson
from nodefence.http.problems import PROBLEM_CONTENT_TYPE, ProblemJson
from nodefence.observability.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE

OPENAPI_PATH = "/openapi.json"
_PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}
_SECURED: list[dict[str, list[str]]] = [{"bearer": []}, {"basic": []}]
_COMPONENT_REF = "#/components/schemas/{model}"
# The bodies' types, each a component named as here; what they refer to (an alert of the
# payload, a decision's actions and reasons) becomes a component of its own name.
_BODIES: dict[str, tuple[Any, JsonSchemaMode]] = {
    "WebhookPayload": (WebhookPayload, "validation"),
    "Decision": (DecisionJson, "serialization"),
    "LoggedDecision": (LoggedDecisionJson, "serialization"),
    "Problem": (ProblemJson, "serialization"),
}


class _Components(GenerateJsonSchema):
    """Names a JSON shape after what it is the shape of: ``FenceActionJson`` describes a
    ``FenceAction`` and is its component."""

    def normalize_name(self, name: str) -> str:
        return super().normalize_name(name).removesuffix("Json")

    def typed_dict_schema(self, schema: core_schema.TypedDictSchema) -> JsonSchemaValue:
        generated = super().typed_dict_schema(schema)
        if "title" in generated:
            generated["title"] = generated["title"].removesuffix("Json")
        return generated


def _generated(body: Any, mode: JsonSchemaMode) -> dict[str, Any]:
    return TypeAdapter(body).json_schema(
        by_alias=True, ref_template=_COMPONENT_REF, schema_generator=_Components, mode=mode
    )


def _action_schemas() -> dict[str, dict[str, Any]]:
    """Each action type's schema, from its JSON shape in ``engine.action_kinds``, under the
    name of the engine's class (the name a decision's actions refer to it by)."""
    schemas = {kind.action.__name__: _generated(kind.wire, "serialization") for kind in KINDS}
    # A power action names a driver of the table, whichever drivers this build has.
    schemas["PowerAction"]["properties"]["driver"]["enum"] = list(power_drivers())
    return schemas


ACTION_SCHEMAS = _action_schemas()


@cache
def _components() -> dict[str, Any]:
    components: dict[str, Any] = {}
    for name, (body, mode) in _BODIES.items():
        schema = _generated(body, mode)
        components.update(schema.pop("$defs", {}))
        components[name] = schema
    components.update(ACTION_SCHEMAS)
    return components


def _listed(name: str) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["decisions"],
        "properties": {
            "decisions": {"type": "array", "items": {"$ref": _COMPONENT_REF.format(model=name)}}
        },
    }


def _problem(description: str, *, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {
        "description": description,
        "content": {PROBLEM_CONTENT_TYPE: {"schema": _PROBLEM_REF}},
    }
    if headers:
        response["headers"] = headers
    return response


_RETRY_AFTER = {
    "Retry-After": {
        "description": "Seconds to wait before retrying.",
        "schema": {"type": "string"},
    }
}
_CHALLENGE = {
    "WWW-Authenticate": {
        "description": "The accepted schemes (bearer and/or basic).",
        "schema": {"type": "string"},
    }
}
_UNAUTHENTICATED = _problem(
    "No valid bearer token or basic credentials were sent.", headers=_CHALLENGE
)
_UNAVAILABLE = _problem(
    "The Kubernetes API stayed unavailable or the request deadline passed; nothing was left "
    "half done that a retry would not finish. Alertmanager retries 5xx.",
    headers=_RETRY_AFTER,
)
_DECISIONS = {
    "description": "One decision record per distinct alert event (or per node for reconcile).",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Decisions"}}},
}


def _status_schema(value: str) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["status"],
        "properties": {"status": {"const": value}, "reason": {"type": "string"}},
    }


def _paths() -> dict[str, Any]:
    return {
        "/alerts": {
            "post": {
                "operationId": "postAlerts",
                "summary": "Receive an Alertmanager webhook and act on it.",
                "security": _SECURED,
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {"$ref": "#/components/schemas/WebhookPayload"}
                        }
                    },
                },
                "responses": {
                    "200": _DECISIONS,
                    "400": _problem("The body is not valid JSON."),
                    "401": _UNAUTHENTICATED,
                    "413": _problem("The body exceeds the configured size limit."),
                    "415": _problem("The body is not sent as application/json."),
                    "422": _problem("The body is JSON but not a version 4 webhook payload."),
                    "503": _UNAVAILABLE,
                },
            }
        },
        "/reconcile": {
            "post": {
                "operationId": "postReconcile",
                "summary": "Finish what lost or failed deliveries left: purge leftovers, "
                "unfence recovered nodes.",
                "security": _SECURED,
                "responses": {"200": _DECISIONS, "401": _UNAUTHENTICATED, "503": _UNAVAILABLE},
            }
        },
        "/decisions": {
            "get": {
                "operationId": "getDecisions",
                "summary": "This replica's last decisions, newest first (webhooks and reconcile "
                "passes, dry-run ones included): what a dry run would have done, and why.",
                "security": _SECURED,
                "parameters": [
                    {
                        "name": "limit",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "integer", "minimum": 1, "maximum": 200, "default": 50},
                    },
                    {
                        "name": "node",
                        "in": "query",
                        "required": False,
                        "description": "Only decisions about this node.",
                        "schema": {"type": "string"},
                    },
                    {
                        "name": "dry_run",
                        "in": "query",
                        "required": False,
                        "description": "Only dry-run decisions (true) or only real ones (false).",
                        "schema": {"type": "boolean"},
                    },
                ],
                "responses": {
                    "200": {
                        "description": "The decisions this replica kept (at most 200, lost on "
                        "restart), each with when and from where it was recorded.",
                        "content": {
                            "application/json": {
                                "schema": {"$ref": "#/components/schemas/LoggedDecisions"}
                            }
                        },
                    },
                    "400": _problem("A query parameter is not valid."),
                    "401": _UNAUTHENTICATED,
                },
            }
        },
        "/slack/interactions": {
            "post": {
                "operationId": "postSlackInteractions",
                "summary": "Slack's interactivity callback for approval buttons; "
                "authenticated by Slack's request signature, not by the alert credentials.",
                "security": [],
                "parameters": [
                    {
                        "name": "X-Slack-Request-Timestamp",
                        "in": "header",
                        "required": False,
                        "schema": {"type": "string"},
                    },
                    {
                        "name": "X-Slack-Signature",
                        "in": "header",
                        "required": False,
                        "schema": {"type": "string"},
                    },
                ],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/x-www-form-urlencoded": {
                            "schema": {
                                "type": "object",
                                "required": ["payload"],
                                "properties": {
                                    "payload": {
                                        "type": "string",
                                        "description": "A block_actions payload as JSON.",
                                    }
                                },
                            }
                        }
                    },
                },
                "responses": {
                    "200": {"description": "Accepted; the press is answered in the background."},
                    "400": _problem("The payload is not a Slack block_actions interaction."),
                    "401": _problem("The Slack signature is missing, wrong or too old."),
                    "404": _problem("Approval in Slack is not configured on this receiver."),
                    "413": _problem("The body exceeds the configured size limit."),
                },
            }
        },
        "/healthz": {
            "get": {
                "operationId": "getHealthz",
                "summary": "Liveness: the process serves requests.",
                "security": [],
                "responses": {
                    "200": {
                        "description": "Alive.",
                        "content": {"application/json": {"schema": _status_schema("ok")}},
                    }
                },
            }
        },
        "/readyz": {
            "get": {
                "operationId": "getReadyz",
                "summary": "Readiness: the Kubernetes API is reachable and the service is not "
                "shutting down.",
                "security": [],
                "responses": {
                    "200": {
                        "description": "Ready.",
                        "content": {"application/json": {"schema": _status_schema("ready")}},
                    },
                    "503": _problem("Not ready; the detail says why."),
                },
            }
        },
        "/metrics": {
            "get": {
                "operationId": "getMetrics",
                "summary": "Prometheus metrics.",
                "security": [],
                "responses": {
                    "200": {
                        "description": "The Prometheus text exposition format.",
                        "content": {METRICS_CONTENT_TYPE: {"schema": {"type": "string"}}},
                    }
                },
            }
        },
        OPENAPI_PATH: {
            "get": {
                "operationId": "getOpenApi",
                "summary": "This description.",
                "security": [],
                "responses": {
                    "200": {
                        "description": "The OpenAPI 3.1 document.",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    }
                },
            }
        },
    }


@cache
def _document_bytes() -> bytes:
    return json.dumps(_build(), separators=(",", ":")).encode()


def _build() -> dict[str, Any]:
    schemas = {
        **_components(),
        "Decisions": _listed("Decision"),
        "LoggedDecisions": _listed("LoggedDecision"),
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "nodefence",
            "version": "0.1.0",
            "description": "Alertmanager webhook receiver that fences dead Kubernetes nodes "
            "with the node.kubernetes.io/out-of-service taint and unfences them once they "
            "are verifiably healthy. Errors are RFC 9457 problem details; 4xx is final "
            "(Alertmanager does not retry it), 503 is worth retrying.",
            "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"},
        },
        "paths": _paths(),
        "components": {
            "schemas": copy.deepcopy(schemas),
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "NODEFENCE_ALERT_TOKEN.",
                },
                "basic": {
                    "type": "http",
                    "scheme": "basic",
                    "description": "NODEFENCE_BASIC_AUTH_USER and NODEFENCE_BASIC_AUTH_PASSWORD.",
                },
            },
        },
    }


def openapi_document() -> dict[str, Any]:
    """A fresh copy of the document, safe for the caller to modify."""
    return _build()


async def get_openapi(_: web.Request) -> web.Response:
    return web.Response(body=_document_bytes(), content_type="application/json")
