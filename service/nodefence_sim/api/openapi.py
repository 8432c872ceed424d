"""The OpenAPI v3 documents kubectl reads before ``create``, ``replace`` and ``apply``.

kubectl validates manifests by default: it looks up the PATCH operation of each kind in
``/openapi/v3/<group-version>``, and when that operation declares the ``fieldValidation``
parameter it leaves validation to the server and sends ``fieldValidation=Strict``. Declaring the
parameter is what lets ``kubectl create -f`` work without ``--validate=false``; the simulator then
accepts the fields it is given (it is not a schema validator).

``kubectl explain`` reads the ``components.schemas`` of the same documents (``openapi_schemas``).
The PATCH operations declare no request body, so ``kubectl apply`` keeps computing strategic
merge patches from the Go types compiled into it rather than from these schemas. The documents
are static, so each is serialized and hashed once; the index names each by that hash, and a
request carrying the current hash may be cached for good, as the real server allows.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from typing import Any, NamedTuple

from aiohttp import web

from nodefence_sim.api.openapi_schemas import group_version_schemas
from nodefence_sim.errors import ApiError
from nodefence_sim.resources import RESOURCE_TYPES, SUBRESOURCE_VERBS, ResourceType

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
    rts = [rt for rt in RESOURCE_TYPES if rt.group == group and rt.version == version]
    for rt in rts:
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
        "components": {"schemas": group_version_schemas(rts)},
    }


class Served(NamedTuple):
    body: bytes
    hash: str


@cache
def served_documents() -> dict[str, Served]:
    """Each group-version's document as served, by its path (``api/v1``, ``apis/apps/v1``)."""
    served: dict[str, Served] = {}
    for rt in RESOURCE_TYPES:
        key = _gv_path(rt.group, rt.version)
        if key in served:
            continue
        doc = group_version_document(rt.group, rt.version)
        if doc is not None:
            body = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
            served[key] = Served(body, hashlib.sha512(body).hexdigest().upper())
    return served


def _index() -> bytes:
    paths = {
        key: {"serverRelativeURL": f"/openapi/v3/{key}?hash={doc.hash}"}
        for key, doc in served_documents().items()
    }
    return json.dumps({"paths": paths}).encode()


def add_openapi_routes(app: web.Application) -> None:
    documents = served_documents()
    index = _index()

    async def root(_request: web.Request) -> web.Response:
        # The real index handler sets no Content-Type, so Go sniffs the JSON as plain text.
        return web.Response(body=index, content_type="text/plain", charset="utf-8")

    async def document(request: web.Request) -> web.Response:
        key = request.match_info["path"].strip("/")
        doc = documents.get(key)
        if doc is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        asked = request.query.get("hash")
        if asked is not None and asked != doc.hash:
            current = f"/openapi/v3/{key}?hash={doc.hash}"
            return web.Response(status=301, headers={"Location": current})
        headers = {
            "ETag": f'"{doc.hash}"',
            "Cache-Control": "public, immutable" if asked else "no-cache, private",
        }
        if request.headers.get("If-None-Match") == headers["ETag"]:
            return web.Response(status=304, headers=headers)
        return web.Response(body=doc.body, content_type="application/json", headers=headers)

    app.router.add_get("/openapi/v3", root)
    app.router.add_get("/openapi/v3/", root)
    app.router.add_get("/openapi/v3/{path:.+}", document)
