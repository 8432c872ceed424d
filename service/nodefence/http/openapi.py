"""The receiver's OpenAPI 3.1 description, served at ``GET /openapi.json``.

It is written by hand next to the code it describes rather than generated, because what a
caller needs to know is not in the handlers' signatures: which statuses Alertmanager retries,
that bad input is answered with problem details, and which routes need credentials. The test
suite validates it against the OpenAPI schema, checks that every served route is in it, and
replays it against a running receiver, so it cannot drift from the code unnoticed.
"""

from __future__ import annotations

import copy
import json
from functools import cache
from typing import Any

from aiohttp import web

from nodefence.engine.drivers import power_drivers
from nodefence.http.problems import PROBLEM_CONTENT_TYPE
from nodefence.observability.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE

OPENAPI_PATH = "/openapi.json"
_PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}
_LABELS_REF = {"$ref": "#/components/schemas/Labels"}
_SECURED: list[dict[str, list[str]]] = [{"bearer": []}, {"basic": []}]


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

_ALERT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "One alert of the notification; unknown members are accepted and ignored.",
    "required": ["status", "labels"],
    "properties": {
        "status": {"type": "string", "enum": ["firing", "resolved"]},
        "labels": _LABELS_REF,
        "annotations": _LABELS_REF,
        "startsAt": {
            "type": ["string", "null"],
            "format": "date-time",
            "description": "Go's zero time (0001-01-01T00:00:00Z) means unset.",
        },
        "endsAt": {
            "type": ["string", "null"],
            "format": "date-time",
            "description": "Go's zero time (0001-01-01T00:00:00Z) means unset.",
        },
        "generatorURL": {"type": "string"},
        "fingerprint": {"type": "string"},
    },
    "additionalProperties": True,
}

_WEBHOOK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "An Alertmanager webhook notification, payload version 4. Parsing is lenient "
    "about members nodefence does not use and strict about those a decision depends on.",
    "required": ["version", "status", "alerts"],
    "properties": {
        "version": {"type": "string", "const": "4"},
        "status": {"type": "string", "enum": ["firing", "resolved"]},
        "alerts": {"type": "array", "items": {"$ref": "#/components/schemas/WebhookAlert"}},
        "receiver": {"type": "string"},
        "groupKey": {"type": "string"},
        "truncatedAlerts": {"type": "integer", "minimum": 0},
        "groupLabels": _LABELS_REF,
        "commonLabels": _LABELS_REF,
        "commonAnnotations": _LABELS_REF,
        "externalURL": {"type": "string"},
    },
    "additionalProperties": True,
}

_ANNOTATIONS = {"type": "object", "additionalProperties": {"type": "string"}}

ACTION_SCHEMAS: dict[str, dict[str, Any]] = {
    "FenceAction": {
        "type": "object",
        "required": ["type", "node", "node_uid", "resource_version", "effect", "annotations"],
        "properties": {
            "type": {"const": "fence"},
            "node": {"type": "string"},
            "node_uid": {"type": "string"},
            "resource_version": {"type": "string"},
            "effect": {"type": "string", "enum": ["NoExecute", "NoSchedule"]},
            "annotations": _ANNOTATIONS,
        },
    },
    "PurgePodAction": {
        "type": "object",
        "required": ["type", "namespace", "name", "uid", "node", "strip_finalizers"],
        "properties": {
            "type": {"const": "purge-pod"},
            "namespace": {"type": "string"},
            "name": {"type": "string"},
            "uid": {"type": "string"},
            "node": {"type": "string"},
            "strip_finalizers": {"type": "array", "items": {"type": "string"}},
        },
    },
    "UnfenceAction": {
        "type": "object",
        "required": [
            "type",
            "node",
            "node_uid",
            "resource_version",
            "annotations",
            "remove_annotations",
        ],
        "properties": {
            "type": {"const": "unfence"},
            "node": {"type": "string"},
            "node_uid": {"type": "string"},
            "resource_version": {"type": "string"},
            "effect": {"type": "string", "enum": ["NoExecute", "NoSchedule"]},
            "annotations": _ANNOTATIONS,
            "remove_annotations": {"type": "array", "items": {"type": "string"}},
        },
    },
    "ClaimAction": {
        "type": "object",
        "description": "Take a fence budget slot in the fence record (resourceVersion-checked).",
        "required": ["type", "node", "record", "record_version", "entry"],
        "properties": {
            "type": {"const": "claim"},
            "node": {"type": "string"},
            "record": {"type": "string"},
            "record_version": {"type": "string"},
            "entry": {"type": "object"},
        },
    },
    "ConfirmAction": {
        "type": "object",
        "required": ["type", "node", "node_uid", "proof"],
        "properties": {
            "type": {"const": "confirm"},
            "node": {"type": "string"},
            "node_uid": {"type": "string"},
            "proof": {"type": "string"},
        },
    },
    "PowerAction": {
        "type": "object",
        "required": ["type", "node", "node_uid", "driver", "operation", "send"],
        "properties": {
            "type": {"const": "power"},
            "node": {"type": "string"},
            "node_uid": {"type": "string"},
            "driver": {"type": "string", "enum": list(power_drivers())},
            "operation": {"type": "string", "enum": ["off", "on", "status"]},
            "send": {"type": "boolean"},
        },
    },
    "ReleaseAction": {
        "type": "object",
        "required": ["type", "node", "node_uid", "why"],
        "properties": {
            "type": {"const": "release"},
            "node": {"type": "string"},
            "node_uid": {"type": "string"},
            "why": {"type": "string"},
        },
    },
    "ObserveReadyAction": {
        "type": "object",
        "required": ["type", "node", "node_uid", "seen_at"],
        "properties": {
            "type": {"const": "observe-ready"},
            "node": {"type": "string"},
            "node_uid": {"type": "string"},
            "seen_at": {"type": "string"},
        },
    },
    "ProofContradictedAction": {
        "type": "object",
        "description": "Record that the node came back with its fence-time boot ID (its "
        "power-off proof was false) and hold its taint until a person releases it.",
        "required": ["type", "node", "node_uid", "boot_id"],
        "properties": {
            "type": {"const": "proof-contradicted"},
            "node": {"type": "string"},
            "node_uid": {"type": "string"},
            "boot_id": {"type": "string"},
        },
    },
    "ReleaseVolumeAttachmentAction": {
        "type": "object",
        "description": "Delete a VolumeAttachment of a node nodefence holds fenced and found "
        "down, once no pod on it uses a claim, on a cluster that may not detach the volumes of "
        "an out-of-service node itself (a UID precondition names the one read).",
        "required": ["type", "node", "node_uid", "name", "persistent_volume", "uid"],
        "properties": {
            "type": {"const": "release-volume"},
            "node": {"type": "string"},
            "node_uid": {"type": "string"},
            "name": {"type": "string"},
            "persistent_volume": {"type": "string"},
            "uid": {"type": "string"},
        },
    },
    "ReleaseFenceAction": {
        "type": "object",
        "description": "An operator's release (nodefence release): take exactly nodefence's "
        "taint and its mirror annotations off the node (preconditioned on its uid and "
        "resourceVersion), then drop its fence record entry.",
        "required": [
            "type",
            "node",
            "node_uid",
            "resource_version",
            "effect",
            "remove_annotations",
            "why",
            "same_node",
        ],
        "properties": {
            "type": {"const": "release-fence"},
            "node": {"type": "string"},
            "node_uid": {"type": "string"},
            "resource_version": {"type": "string"},
            "effect": {"type": "string"},
            "remove_annotations": {"type": "array", "items": {"type": "string"}},
            "why": {"type": "string"},
            "same_node": {"type": "boolean"},
        },
    },
    "RecordRejectionAction": {
        "type": "object",
        "description": "Record in the fence record that a person rejected fencing this "
        "incident of the node (it holds for that outage), and show it on the node.",
        "required": [
            "type",
            "node",
            "node_uid",
            "fingerprint",
            "not_ready_since",
            "said",
            "expires",
        ],
        "properties": {
            "type": {"const": "record-rejection"},
            "node": {"type": "string"},
            "node_uid": {"type": "string"},
            "fingerprint": {"type": "string"},
            "not_ready_since": {"type": "string"},
            "said": {"type": "string"},
            "expires": {"type": "string"},
        },
    },
    "WithdrawQuestionAction": {
        "type": "object",
        "description": "Forget an answered approval question that did not lead to a fence, so "
        "the next alert that reaches approval asks afresh.",
        "required": ["type", "node", "node_uid", "fingerprint"],
        "properties": {
            "type": {"const": "withdraw-question"},
            "node": {"type": "string"},
            "node_uid": {"type": "string"},
            "fingerprint": {"type": "string"},
        },
    },
    "AskApprovalAction": {
        "type": "object",
        "description": "Ask a person in Slack whether to fence this incident of the node (the "
        "fence record holds no open question about it).",
        "required": ["type", "node", "node_uid", "fingerprint", "not_ready_since"],
        "properties": {
            "type": {"const": "ask-approval"},
            "node": {"type": "string"},
            "node_uid": {"type": "string"},
            "fingerprint": {"type": "string"},
            "not_ready_since": {"type": "string"},
            "subject": {
                "type": "string",
                "description": "The failed power step the question asks a person to overrule "
                "(empty for a rule that asks before every fence); an approval stands in for "
                "that failure only.",
            },
        },
    },
}

_DECISION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": [
        "verdict",
        "node",
        "alertname",
        "fingerprint",
        "status",
        "rule",
        "dry_run",
        "decided_at",
        "summary",
        "reasons",
        "actions",
        "results",
    ],
    "properties": {
        "verdict": {
            "type": "string",
            "enum": ["fence", "purge", "unfence", "await-approval", "deferred", "noop", "skip"],
        },
        "node": {"type": ["string", "null"]},
        "alertname": {"type": "string"},
        "fingerprint": {"type": "string"},
        "status": {"type": "string"},
        "rule": {"type": ["string", "null"]},
        "dry_run": {"type": "boolean"},
        "decided_at": {"type": ["string", "null"]},
        "summary": {"type": "string", "description": "The headline: first blocking reason."},
        "reasons": {
            "type": "array",
            "description": "Every guard that passed or blocked, worded for a person.",
            "items": {
                "type": "object",
                "required": ["guard", "passed", "message"],
                "properties": {
                    "guard": {"type": "string"},
                    "passed": {"type": "boolean"},
                    "message": {"type": "string"},
                },
            },
        },
        "actions": {
            "type": "array",
            "items": {
                "oneOf": [{"$ref": f"#/components/schemas/{name}"} for name in ACTION_SCHEMAS]
            },
        },
        "results": {
            "type": "array",
            "description": "What each write did: done, already, conflict, skipped or failed.",
            "items": {
                "type": "object",
                "required": ["action", "target", "outcome", "detail"],
                "properties": {
                    "action": {"type": "string"},
                    "target": {"type": "string"},
                    "outcome": {
                        "type": "string",
                        "enum": ["done", "already", "conflict", "skipped", "failed"],
                    },
                    "detail": {"type": "string"},
                },
            },
        },
    },
}

_PROBLEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "RFC 9457 problem details.",
    "required": ["type", "title", "status"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "errors": {
            "type": "array",
            "description": "Each schema violation of the request body (422 only).",
            "items": {
                "type": "object",
                "required": ["pointer", "path", "detail"],
                "properties": {
                    "pointer": {"type": "string"},
                    "path": {"type": "string"},
                    "detail": {"type": "string"},
                },
            },
        },
    },
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
    schemas: dict[str, Any] = {
        "Labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "WebhookAlert": _ALERT_SCHEMA,
        "WebhookPayload": _WEBHOOK_SCHEMA,
        "Decisions": {
            "type": "object",
            "required": ["decisions"],
            "properties": {
                "decisions": {"type": "array", "items": {"$ref": "#/components/schemas/Decision"}}
            },
        },
        "Decision": _DECISION_SCHEMA,
        "LoggedDecisions": {
            "type": "object",
            "required": ["decisions"],
            "properties": {
                "decisions": {
                    "type": "array",
                    "items": {
                        "allOf": [
                            {"$ref": "#/components/schemas/Decision"},
                            {
                                "type": "object",
                                "required": ["recorded_at", "source"],
                                "properties": {
                                    "recorded_at": {"type": "string", "format": "date-time"},
                                    "source": {
                                        "type": "string",
                                        "description": "The route (/alerts, /reconcile) or "
                                        "reconcile-loop.",
                                    },
                                },
                            },
                        ]
                    },
                }
            },
        },
        **ACTION_SCHEMAS,
        "Problem": _PROBLEM_SCHEMA,
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
