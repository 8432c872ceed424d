"""URL layout of the Kubernetes REST API: which type, namespace, object and verb a request is."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from nodefence_sim.errors import ApiError, NotServed
from nodefence_sim.resources import NAMESPACES, RESOURCE_TYPES, ResourceType, find

# The API groups served (core is ``""``): a path under any other is no API at all.
SERVED_GROUPS = frozenset(rt.group for rt in RESOURCE_TYPES)


def not_served(path: str) -> bool:
    """Whether the real server answers ``path`` as no API at all (``NotServed``): outside
    ``/api`` and outside every served group under ``/apis``. Anything under ``/api`` or a served
    group, a version or resource it lacks included, gets a ``Status`` 404 instead."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"]:
        return False
    return not (parts[:1] == ["apis"] and (len(parts) == 1 or parts[1] in SERVED_GROUPS))


@dataclass(frozen=True)
class Target:
    """A resolved resource URL: ``name`` is empty for a collection."""

    resource: ResourceType
    namespace: str | None
    name: str
    subresource: str


def _not_found(path: str) -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource")


def resolve(path: str) -> Target | None:
    """Resolve a resource path; None for paths that are not resource URLs (discovery).

    Raises 404 for a resource URL naming a type the simulator does not serve, so clients get
    the same answer a real server sends: a ``Status`` within a group version it serves, the
    plain text ``404 page not found`` (``NotServed``) under a group it does not serve.
    """
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    if group not in SERVED_GROUPS:
        raise NotServed()
    if not rest:
        return None
    namespace: str | None = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        rt = find(group, version, rest[2])
        if rt is not None and rt.namespaced:
            namespace = rest[1]
            rest = rest[2:]
        elif group == "" and len(rest) == 3 and rest[2] in NAMESPACES.subresources:
            rest = rest[:3]
        else:
            raise _not_found(path)
    rt = find(group, version, rest[0])
    if rt is None or len(rest) > 3:
        raise _not_found(path)
    name = rest[1] if len(rest) >= 2 else ""
    subresource = rest[2] if len(rest) == 3 else ""
    if subresource and subresource not in rt.subresources:
        raise _not_found(path)
    if name and rt.namespaced and namespace is None:
        raise _not_found(path)
    return Target(rt, namespace, name, subresource)


def verb_for(method: str, path: str, watch: bool) -> str:
    """The Kubernetes verb of a request (for fault rules and the request log).

    Unresolvable paths count as ``get``: they are discovery or 404s either way.
    """
    try:
        target = resolve(path)
    except ApiError:
        target = None
    method = method.upper()
    if target is None:
        return "get" if method == "GET" else method.lower()
    collection = not target.name
    if method == "GET":
        if watch:
            return "watch"
        return "list" if collection else "get"
    if method == "POST":
        return "create"
    if method == "PUT":
        return "update"
    if method == "PATCH":
        return "patch"
    if method == "DELETE":
        return "deletecollection" if collection else "delete"
    return method.lower()


def is_watch(query: Mapping[str, str]) -> bool:
    """``watch`` parsed as Go's ``strconv.ParseBool`` does (clients send ``true`` or ``True``)."""
    return query.get("watch", "") in ("1", "t", "T", "true", "TRUE", "True")
