"""The OpenAPI v3 documents kubectl reads before ``create``, ``replace`` and ``apply``.

kubectl validates manifests by default: it looks up the PATCH operation of each kind in
``/openapi/v3/<group-version>``, and when that operation declares the ``fieldValidation``
parameter it leaves validation to the server and sends ``fieldValidation=Strict``. Declaring the
parameter is what lets ``kubectl create -f`` work without ``--validate=false``; the simulator then
accepts the fields it is given (it is not a schema validator).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from aiohttp import web

from nodefence.sim.errors import ApiError
from nodefence.sim.resources import RESOURCE_TYPES, SUBRESOURCE_VERBS, ResourceType

_VERB_OF_METHOD = {"get": "get", "put": "update", "patch": "patch", "post": "create"}
_QUERY_PARAMS = ("dryRun", "fieldManager", "fieldValidation", "force")


def _gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def _operation(rt: ResourceType, action: str, params: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "operationId": f"{action}{rt.kind}",
        "parameters": [
            {"name": p, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
            for p in params
        ],
        "responses": {"200": {"description": "OK"}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {
            "group": rt.group,
            "version": rt.version,
            "kind": rt.kind,
        },
    }


def group_version_document(group: str, version: str) -> dict[str, Any] | None:
    paths: dict[str, Any] = {}
    for rt in RESOURCE_TYPES:
        if rt.group != group or rt.version != version:
            continue
        base = "/" + _gv_path(group, version)
        collection = (
            f"{base}/namespaces/{{namespace}}/{rt.plural}"
            if rt.namespaced
            else f"{base}/{rt.plural}"
        )
        item = {
            "get": _operation(rt, "get"),
            "put": _operation(rt, "put", _QUERY_PARAMS[:3]),
            "patch": _operation(rt, "patch", _QUERY_PARAMS),
            "delete": _operation(rt, "delete", ("dryRun",)),
        }
        paths[collection] = {
            "get": _operation(rt, "list"),
            "post": _operation(rt, "post", _QUERY_PARAMS[:3]),
        }
        paths[collection + "/{name}"] = item
        for sub in rt.subresources:
            operations = {
                "get": _operation(rt, "get"),
                "put": _operation(rt, "put", _QUERY_PARAMS[:3]),
                "patch": _operation(rt, "patch", _QUERY_PARAMS),
                "post": _operation(rt, "post", _QUERY_PARAMS[:3]),
            }
            verbs = SUBRESOURCE_VERBS[sub]
            paths[f"{collection}/{{name}}/{sub}"] = {
                method: operation
                for method, operation in operations.items()
                if _VERB_OF_METHOD[method] in verbs
            }
    if not paths:
        return None
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "unversioned"},
        "paths": paths,
        "components": {"schemas": {}},
    }


def _documents() -> dict[str, dict[str, Any]]:
    docs: dict[str, dict[str, Any]] = {}
    for rt in RESOURCE_TYPES:
        key = _gv_path(rt.group, rt.version)
        if key not in docs:
            doc = group_version_document(rt.group, rt.version)
            if doc is not None:
                docs[key] = doc
    return docs


def add_openapi_routes(app: web.Application) -> None:
    documents = _documents()
    hashes = {
        key: hashlib.sha512(json.dumps(doc, sort_keys=True).encode()).hexdigest().upper()
        for key, doc in documents.items()
    }

    async def root(_request: web.Request) -> web.Response:
        return web.json_response(
            {
                "paths": {
                    key: {"serverRelativeURL": f"/openapi/v3/{key}?hash={hashes[key]}"}
                    for key in documents
                }
            }
        )

    async def document(request: web.Request) -> web.Response:
        doc = documents.get(request.match_info["path"].strip("/"))
        if doc is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return web.json_response(doc)

    app.router.add_get("/openapi/v3", root)
    app.router.add_get("/openapi/v3/", root)
    app.router.add_get("/openapi/v3/{path:.+}", document)
