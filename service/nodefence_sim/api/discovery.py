"""Discovery documents: ``/version``, ``/api``, ``/apis`` and the per-group resource lists.

Only the legacy (unaggregated) documents are served, answering ``application/json`` whatever
the ``Accept`` header asks for: that is what a 1.24 server does, and client-go (kubectl 1.32
included) recognises the plain content type and falls back to the legacy documents.
"""

from __future__ import annotations

import re
from typing import Any

from aiohttp import web

from nodefence_sim.errors import ApiError, NotServed
from nodefence_sim.resources import RESOURCE_TYPES, SUBRESOURCE_VERBS, ResourceType
from nodefence_sim.simulation import Simulation

# The kinds a subresource reads and writes, where it is not its resource's own.
SUBRESOURCE_KINDS = {
    "log": "Pod",
    "exec": "PodExecOptions",
    "attach": "PodAttachOptions",
    "portforward": "PodPortForwardOptions",
    "eviction": "Eviction",
    "binding": "Binding",
    "scale": "Scale",
}
# Subresources served in another group's kind, which discovery names (kubectl drain finds the
# eviction API version there).
SUBRESOURCE_GROUPS = {
    "eviction": {"group": "policy", "version": "v1"},
    "scale": {"group": "autoscaling", "version": "v1"},
}
_VERSION_RE = re.compile(r"^v?(\d+)\.(\d+)")


def group_versions() -> dict[str, list[str]]:
    """Served API groups (core is ``""``) with their versions, in discovery order."""
    groups: dict[str, list[str]] = {}
    for rt in RESOURCE_TYPES:
        versions = groups.setdefault(rt.group, [])
        if rt.version not in versions:
            versions.append(rt.version)
    return groups


def version_info(sim: Simulation) -> dict[str, str]:
    git_version = sim.git_version
    m = _VERSION_RE.match(git_version)
    major, minor = (m.group(1), m.group(2)) if m else ("1", "0")
    return {
        "major": major,
        "minor": minor,
        "gitVersion": git_version,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2024-01-01T00:00:00Z",
        "goVersion": "go1.22.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def _resource_entries(rt: ResourceType) -> list[dict[str, Any]]:
    entry: dict[str, Any] = {
        "name": rt.plural,
        "singularName": rt.singular,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": list(rt.verbs),
    }
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.categories:
        entry["categories"] = list(rt.categories)
    entries = [entry]
    for sub in rt.subresources:
        entries.append(
            {
                "name": f"{rt.plural}/{sub}",
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": SUBRESOURCE_KINDS.get(sub, rt.kind),
                "verbs": list(SUBRESOURCE_VERBS[sub]),
                **SUBRESOURCE_GROUPS.get(sub, {}),
            }
        )
    return entries


def resource_list(group: str, version: str) -> dict[str, Any] | None:
    resources: list[dict[str, Any]] = []
    for rt in RESOURCE_TYPES:
        if rt.group == group and rt.version == version:
            resources.extend(_resource_entries(rt))
    if not resources:
        return None
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }


def _api_group(group: str, versions: list[str]) -> dict[str, Any]:
    listed = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": listed, "preferredVersion": listed[0]}


def add_discovery_routes(app: web.Application, sim: Simulation) -> None:
    async def version(_request: web.Request) -> web.Response:
        return web.json_response(version_info(sim))

    async def core(_request: web.Request) -> web.Response:
        return web.json_response(
            {
                "kind": "APIVersions",
                "versions": group_versions().get("", []),
                "serverAddressByClientCIDRs": [
                    {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}
                ],
            }
        )

    async def groups(_request: web.Request) -> web.Response:
        listed = [_api_group(g, v) for g, v in group_versions().items() if g]
        return web.json_response({"kind": "APIGroupList", "apiVersion": "v1", "groups": listed})

    async def group(request: web.Request) -> web.Response:
        name = request.match_info["group"]
        versions = group_versions().get(name)
        if not name or not versions:
            raise _missing()
        return web.json_response(
            {"kind": "APIGroup", "apiVersion": "v1", **_api_group(name, versions)}
        )

    async def core_resources(_request: web.Request) -> web.Response:
        return web.json_response(resource_list("", "v1"))

    async def group_resources(request: web.Request) -> web.Response:
        group = request.match_info["group"]
        body = resource_list(group, request.match_info["version"])
        if body is None:
            # A version the group lacks is a Status 404; a group not served, no API at all.
            if group in group_versions():
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            raise _missing()
        return web.json_response(body)

    app.router.add_get("/version", version)
    app.router.add_get("/version/", version)
    app.router.add_get("/api", core)
    app.router.add_get("/api/", core)
    app.router.add_get("/api/v1", core_resources)
    app.router.add_get("/api/v1/", core_resources)
    app.router.add_get("/apis", groups)
    app.router.add_get("/apis/", groups)
    app.router.add_get("/apis/{group}", group)
    app.router.add_get("/apis/{group}/", group)
    app.router.add_get("/apis/{group}/{version}", group_resources)
    app.router.add_get("/apis/{group}/{version}/", group_resources)


def _missing() -> ApiError:
    """A group or group version not served: no discovery document, no API at all."""
    return NotServed()
