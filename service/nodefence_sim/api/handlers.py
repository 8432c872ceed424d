"""The REST verbs on resource URLs, translated to store calls with the real server's replies."""

from __future__ import annotations

import copy
import json
import uuid
from typing import Any

from aiohttp import web
from multidict import MultiMapping

from nodefence_sim.api.apply import applied_config, apply_options, is_apply, server_side_apply
from nodefence_sim.api.defaults import defaults_on_create, secret_data, service_update
from nodefence_sim.api.fieldvalidation import check_object, check_patch, parse
from nodefence_sim.api.listoptions import list_options
from nodefence_sim.api.paging import Page, Pager, parse_limit
from nodefence_sim.api.patching import apply_patch
from nodefence_sim.api.paths import Target, is_watch, resolve
from nodefence_sim.api.protobuf import decode_body
from nodefence_sim.api.tables import format_selector, table, wants_table
from nodefence_sim.api.watch import INITIAL_EVENTS_END, serve_watch
from nodefence_sim.controllers.disruption import evict
from nodefence_sim.errors import ApiError, already_exists, bad_request, conflict, not_found
from nodefence_sim.immutability import check_create, registry_update
from nodefence_sim.managed import manager_for
from nodefence_sim.resources import (
    DAEMONSETS,
    DEPLOYMENTS,
    EVENTS,
    NAMESPACES,
    NODES,
    PODS,
    REPLICASETS,
    REVIEWS,
    RUNTIME_SUBRESOURCES,
    SECRETS,
    SELF_SUBJECT_RULES_REVIEWS,
    SERVICES,
    STATEFULSETS,
    SUBRESOURCE_VERBS,
    ResourceType,
)
from nodefence_sim.simulation import Simulation
from nodefence_sim.store import DeleteOptions, rfc3339
from nodefence_sim.validation import validate_event, validate_node

Obj = dict[str, Any]

PROTOBUF = "application/vnd.kubernetes.protobuf"
ALLOW_ALL_REASON = (
    "the simulated API server has no authorization: every request of every user is allowed"
)
_NO_RUNTIME = {
    "log": "no container logs to read",
    "exec": "no container to run a command in",
    "attach": "no container to attach to",
    "portforward": "no pod port to forward",
}
# Registries that answer a completed delete with the deleted object rather than a Status.
_RETURNS_DELETED_OBJECT = frozenset({PODS.key})
# A new workload's status: the fields the Go types serialise even when zero.
_EMPTY_APPS_STATUS: dict[tuple[str, str], Obj] = {
    STATEFULSETS.key: {"replicas": 0, "availableReplicas": 0},
    DEPLOYMENTS.key: {},
    REPLICASETS.key: {"replicas": 0},
    DAEMONSETS.key: {
        "currentNumberScheduled": 0,
        "numberMisscheduled": 0,
        "desiredNumberScheduled": 0,
        "numberReady": 0,
    },
}
_APPS = frozenset(_EMPTY_APPS_STATUS)


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(
        status=status,
        body=json.dumps(body, separators=(",", ":")).encode(),
        content_type="application/json",
    )


async def _read_json(request: web.Request, checked: ResourceType | None = None) -> Any:
    """The body as JSON; a protobuf one decoded to the JSON it stands for, and a JSON one of a
    ``checked`` type field-validated as the Go decoder would."""
    raw = await request.read()
    if request.content_type == PROTOBUF:
        return decode_body(raw)
    if not raw.strip():
        return None
    try:
        body = json.loads(raw) if checked is None else parse(raw)
    except ValueError as exc:
        raise bad_request(f"the object provided is unrecognized: {exc}") from exc
    return body if checked is None else check_object(request, checked, body)


def _manager(request: web.Request) -> str:
    return manager_for(request.query.get("fieldManager"), request.headers.get("User-Agent"))


def _is_dry_run(query: MultiMapping[str], body: Any = None) -> bool:
    values = query.getall("dryRun", [])
    if isinstance(body, dict):
        values = [*values, *(body.get("dryRun") or [])]
    for value in values:
        if value != "All":
            raise bad_request(f"Invalid dry run value: {value!r}; supported values: All")
    return bool(values)


def _delete_options(body: Obj, query: MultiMapping[str]) -> DeleteOptions:
    """DeleteOptions from a body (a delete's or an eviction's) and the query."""
    grace = body.get("gracePeriodSeconds", query.get("gracePeriodSeconds"))
    preconditions = body.get("preconditions") or {}
    policy = body.get("propagationPolicy", query.get("propagationPolicy"))
    if policy not in (None, "Orphan", "Background", "Foreground"):
        raise bad_request(f"invalid propagationPolicy: {policy}")
    try:
        grace_value = None if grace is None else int(grace)
    except (TypeError, ValueError) as exc:
        raise bad_request(f"invalid gracePeriodSeconds: {grace}") from exc
    return DeleteOptions(
        grace_period_seconds=grace_value,
        uid=preconditions.get("uid"),
        resource_version=preconditions.get("resourceVersion"),
        propagation_policy=policy,
        dry_run=_is_dry_run(query, body),
    )


def _method_not_allowed() -> ApiError:
    return ApiError(
        405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
    )


def _scale_of(obj: Obj) -> Obj:
    meta = obj["metadata"]
    selector = (obj.get("spec") or {}).get("selector") or {}
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            key: meta[key]
            for key in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if key in meta
        },
        "spec": {"replicas": int(obj["spec"].get("replicas", 1))},
        "status": {
            "replicas": int((obj.get("status") or {}).get("replicas", 0)),
            "selector": format_selector(selector),
        },
    }


class ResourceHandlers:
    """Serves every resource URL of the simulation's store."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.pager = Pager()

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        target = resolve(request.path)
        if target is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        method = request.method
        if target.subresource in RUNTIME_SUBRESOURCES:
            raise self._no_runtime(target, method)
        if target.resource.key in REVIEWS:
            if method != "POST" or target.name:
                raise _method_not_allowed()
            return await self._review(request, target)
        if target.subresource == "eviction":
            if method != "POST":
                raise _method_not_allowed()
            return await self._evict(request, target)
        if target.subresource == "scale":
            return await self._scale(request, target)
        if method == "GET":
            if is_watch(request.query):
                return await serve_watch(
                    request, self.sim, target, self._watch_renderer(request, target)
                )
            if target.name:
                return self._get(request, target)
            return self._list(request, target)
        if target.name:
            if method == "PUT":
                return await self._update(request, target)
            if method == "PATCH":
                if is_apply(request.content_type):
                    return await self._apply(request, target)
                return await self._patch(request, target)
            if method == "DELETE" and not target.subresource:
                return await self._delete(request, target)
        elif not target.subresource:
            if method == "POST":
                return await self._create(request, target)
            if method == "DELETE":
                return await self._delete_collection(request, target)
        raise ApiError(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )

    async def _review(self, request: web.Request, target: Target) -> web.Response:
        """Access reviews: the simulator authorizes everything, and says so."""
        body = await _read_json(request)
        if not isinstance(body, dict):
            raise bad_request("the body of the request was empty or not an object")
        rt = target.resource
        review = copy.deepcopy(body)
        review.update(apiVersion=rt.group_version, kind=rt.kind)
        review.setdefault("metadata", {})["creationTimestamp"] = None
        review.setdefault("spec", {})
        if rt.key == SELF_SUBJECT_RULES_REVIEWS.key:
            review["status"] = {
                "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
                "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                "incomplete": False,
            }
        else:
            review["status"] = {"allowed": True, "reason": ALLOW_ALL_REASON}
        return _json(review, 201)

    async def _evict(self, request: web.Request, target: Target) -> web.Response:
        """``policy/v1`` Eviction: the budget may refuse (429); the delete uses the
        eviction's options, so its grace period applies."""
        body = await _read_json(request)
        if not isinstance(body, dict):
            raise bad_request("the body of the request was empty or not an object")
        if (body.get("metadata") or {}).get("name", target.name) != target.name:
            raise bad_request("name in URL does not match name in Eviction object")
        options = _delete_options(body.get("deleteOptions") or {}, request.query)
        evict(self.sim, str(target.namespace), target.name, options)
        return _json(
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "code": 201,
            },
            201,
        )

    async def _scale(self, request: web.Request, target: Target) -> web.Response:
        """``autoscaling/v1`` Scale of a Deployment, StatefulSet or ReplicaSet: reads and
        writes ``spec.replicas`` of the workload itself."""
        rt = target.resource
        current = self.sim.store.get(rt, target.namespace, target.name)
        if request.method == "GET":
            return _json(_scale_of(current))
        if request.method == "PUT":
            sent = await _read_json(request)
        elif request.method == "PATCH":
            sent = apply_patch(request.content_type, _scale_of(current), await request.read())
        else:
            raise _method_not_allowed()
        if not isinstance(sent, dict):
            raise bad_request("the body of the request was empty or not an object")
        replicas = (sent.get("spec") or {}).get("replicas", 0)
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            raise ApiError(
                422,
                "Invalid",
                f'Scale.autoscaling "{target.name}" is invalid: spec.replicas: Invalid value: '
                f"{json.dumps(replicas)}: must be greater than or equal to 0",
            )
        sent_rv = (sent.get("metadata") or {}).get("resourceVersion")
        current["spec"]["replicas"] = replicas
        current["metadata"]["resourceVersion"] = sent_rv or current["metadata"]["resourceVersion"]
        if _is_dry_run(request.query):
            return _json(_scale_of(self._dry_run_write(target, current)))
        updated = self.sim.store.update(
            rt, target.namespace, target.name, current, manager=_manager(request)
        )
        return _json(_scale_of(updated))

    def _no_runtime(self, target: Target, method: str) -> ApiError:
        """What ``kubectl logs``, ``exec``, ``attach`` and ``port-forward`` get: the pod is
        real, but no container runtime stands behind it to stream from."""
        verbs = SUBRESOURCE_VERBS[target.subresource]
        if {"GET": "get", "POST": "create"}.get(method) not in verbs:
            return ApiError(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            )
        self.sim.store.get(PODS, target.namespace, target.name)
        return bad_request(
            f'pods "{target.name}": {_NO_RUNTIME[target.subresource]}: the simulated cluster '
            "has no container runtime (its kubelets run no containers)"
        )

    # -------------------------------------------------------------------- reads
    def _respond(
        self,
        request: web.Request,
        rt: ResourceType,
        objects: list[Obj],
        rv: str,
        *,
        single: Obj | None = None,
        page: Page | None = None,
    ) -> web.Response:
        list_meta: Obj = {"resourceVersion": rv}
        if page is not None and page.continue_token:
            list_meta["continue"] = page.continue_token
            if page.remaining is not None:
                list_meta["remainingItemCount"] = page.remaining
        if wants_table(request.headers.get("Accept", "")):
            rendered = table(
                rt,
                objects,
                self.sim.store.now(),
                resource_version=rv,
                include_object=request.query.get("includeObject", "Metadata"),
            )
            rendered["metadata"] = list_meta
            return _json(rendered)
        if single is not None:
            return _json(single)
        return _json(
            {
                "kind": f"{rt.kind}List",
                "apiVersion": rt.group_version,
                "metadata": list_meta,
                "items": objects,
            }
        )

    def _get(self, request: web.Request, target: Target) -> web.Response:
        obj = self.sim.store.get(target.resource, target.namespace, target.name)
        return self._respond(
            request, target.resource, [obj], obj["metadata"]["resourceVersion"], single=obj
        )

    def _list(self, request: web.Request, target: Target) -> web.Response:
        if target.subresource:
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method")
        query = request.query
        list_options(query, watch=False)
        labels, fields = query.get("labelSelector") or "", query.get("fieldSelector") or ""
        page = self.pager.page(
            (target.resource.key, target.namespace or "", labels, fields),
            lambda: self.sim.store.select(target.resource, target.namespace, labels, fields),
            limit=parse_limit(query.get("limit")),
            token=query.get("continue", ""),
            filtered=bool(labels or fields),
        )
        return self._respond(request, target.resource, page.items, page.resource_version, page=page)

    def _watch_renderer(self, request: web.Request, target: Target) -> Any:
        if not wants_table(request.headers.get("Accept", "")):
            return lambda _type, obj: obj
        include = request.query.get("includeObject", "Metadata")

        def render(_type: str, obj: Obj) -> Obj:
            meta = obj["metadata"]
            if INITIAL_EVENTS_END not in (meta.get("annotations") or {}):
                return table(
                    target.resource,
                    [obj],
                    self.sim.store.now(),
                    resource_version=meta.get("resourceVersion", ""),
                    include_object=include,
                )
            # The bookmark ending the initial events is an empty object: its row prints blank
            # cells and, unless the full object was asked for, carries its metadata even with
            # includeObject=None, so that a Table client still finds the annotation.
            rendered = table(
                target.resource,
                [{**obj, "metadata": {**meta, "name": ""}}],
                self.sim.store.now(),
                resource_version=meta.get("resourceVersion", ""),
                include_object="Object" if include == "Object" else "Metadata",
            )
            rendered["rows"][0]["object"] = (
                obj if include == "Object" else {**rendered["rows"][0]["object"], "metadata": meta}
            )
            return rendered

        return render

    # ------------------------------------------------------------------- writes
    def _check_namespace(self, target: Target) -> None:
        namespace = target.namespace
        if namespace is not None and self.sim.store.peek(NAMESPACES, None, namespace) is None:
            raise not_found("namespaces", namespace)

    async def _create(self, request: web.Request, target: Target) -> web.Response:
        rt = target.resource
        body = await _read_json(request, rt)
        if not isinstance(body, dict):
            raise bad_request("the body of the request was empty or not an object")
        kind = body.get("kind")
        if kind and kind != rt.kind:
            raise bad_request(
                f"the kind of the object ({kind}) does not match the resource ({rt.plural})"
            )
        if target.namespace is None and rt.namespaced:
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method")
        self._check_namespace(target)
        uid = str(uuid.uuid4())
        obj = _prepare_for_create(rt, body, uid, self.sim.store.items(rt))
        if _is_dry_run(request.query):
            return _json(self._dry_run_create(target, obj), 201)
        created = self.sim.store.create(
            rt, target.namespace, obj, manager=_manager(request), uid=uid
        )
        return _json(created, 201)

    def _dry_run_create(self, target: Target, obj: Obj) -> Obj:
        rt = target.resource
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise ApiError(
                    422, "Invalid", f"{rt.kind} is invalid: metadata.name: Required value"
                )
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        if self.sim.store.peek(rt, target.namespace, meta["name"]) is not None:
            raise already_exists(rt.plural, meta["name"], rt.group)
        if rt.namespaced:
            meta["namespace"] = target.namespace
        meta.update(
            creationTimestamp=rfc3339(self.sim.store.now()),
            generation=1,
        )
        obj["apiVersion"] = rt.group_version
        obj["kind"] = rt.kind
        if rt.key == NODES.key:
            validate_node(obj)
        elif rt.key == EVENTS.key:
            validate_event(obj)
        return obj

    async def _update(self, request: web.Request, target: Target) -> web.Response:
        rt = target.resource
        body = await _read_json(request, rt)
        if not isinstance(body, dict):
            raise bad_request("the body of the request was empty or not an object")
        return self._write(request, target, body, _manager(request))

    def _write(self, request: web.Request, target: Target, new: Obj, manager: str) -> web.Response:
        """How every update, patch and apply ends: the type's registry rules, then a dry run or
        the stored write by ``manager``."""
        self._registry_update(target, new)
        if _is_dry_run(request.query):
            return _json(self._dry_run_write(target, new))
        updated = self.sim.store.update(
            target.resource,
            target.namespace,
            target.name,
            new,
            subresource=target.subresource,
            manager=manager,
        )
        return _json(updated)

    def _registry_update(self, target: Target, new: Obj) -> None:
        """What a type's registry does to every update: a Secret's ``stringData`` goes into
        ``data``; a Service keeps the IPs and node ports it was allocated."""
        old = self.sim.store.peek(target.resource, target.namespace, target.name)
        registry_update(target.resource, target.subresource, old, new, self.sim.settings.version)
        if target.subresource:
            return
        if target.resource.key == SECRETS.key:
            secret_data(new)
        elif target.resource.key == SERVICES.key:
            old = self.sim.store.peek(target.resource, target.namespace, target.name)
            if old is not None:
                service_update(old, new)

    def _dry_run_write(self, target: Target, obj: Obj) -> Obj:
        """The object as a write would leave it, checked for conflicts but not stored."""
        rt = target.resource
        current = self.sim.store.get(rt, target.namespace, target.name)
        sent_rv = obj.get("metadata", {}).get("resourceVersion")
        if sent_rv and sent_rv != current["metadata"]["resourceVersion"]:
            raise conflict(
                rt.plural,
                target.name,
                "the object has been modified; please apply your changes to the latest "
                "version and try again",
                rt.group,
            )
        result = copy.deepcopy(obj)
        meta = result.setdefault("metadata", {})
        for key in ("uid", "creationTimestamp", "namespace", "resourceVersion", "generation"):
            if key in current["metadata"]:
                meta[key] = current["metadata"][key]
        if target.subresource == "status":
            current["status"] = result.get("status", {})
            return current
        if "status" in rt.subresources:
            if "status" in current:
                result["status"] = current["status"]
            else:
                result.pop("status", None)
        result["apiVersion"] = rt.group_version
        result["kind"] = rt.kind
        if rt.key == NODES.key:
            validate_node(result)
        elif rt.key == EVENTS.key:
            validate_event(result)
        return result

    async def _patch(self, request: web.Request, target: Target) -> web.Response:
        rt = target.resource
        current = self.sim.store.get(rt, target.namespace, target.name)
        media = request.content_type
        raw = check_patch(request, rt, target.subresource, media, await request.read())
        patched = apply_patch(media, current, raw)
        meta = patched.get("metadata")
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        if meta.get("name", target.name) != target.name:
            raise bad_request("the name of the object does not match the name on the URL")
        return self._write(request, target, patched, _manager(request))

    async def _apply(self, request: web.Request, target: Target) -> web.Response:
        """Server-side apply; on a missing object it is a create (201), defaulted as one."""
        rt = target.resource
        options = apply_options(request.query, target.subresource)
        config = applied_config(await request.read(), rt, target.name, target.namespace)
        moment = rfc3339(self.sim.store.now())
        live = self.sim.store.peek(rt, target.namespace, target.name)
        if live is None:
            if target.subresource:
                raise not_found(rt.plural, target.name, rt.group)
            self._check_namespace(target)
            uid = str(uuid.uuid4())
            new = server_side_apply(rt, None, config, options, moment)
            new["metadata"].update(name=target.name)
            obj = _prepare_for_create(rt, new, uid, self.sim.store.items(rt))
            if _is_dry_run(request.query):
                return _json(self._dry_run_create(target, obj), 201)
            created = self.sim.store.create(
                rt, target.namespace, obj, manager=options.manager, uid=uid
            )
            return _json(created, 201)
        applied = server_side_apply(rt, live, config, options, moment)
        return self._write(request, target, applied, options.manager)

    async def _delete_options(self, request: web.Request) -> DeleteOptions:
        body = await _read_json(request)
        if body is not None and not isinstance(body, dict):
            raise bad_request("DeleteOptions must be an object")
        return _delete_options(body or {}, request.query)

    async def _delete(self, request: web.Request, target: Target) -> web.Response:
        rt = target.resource
        options = await self._delete_options(request)
        obj, removed = self.sim.store.delete(rt, target.namespace, target.name, options)
        if removed and rt.key not in _RETURNS_DELETED_OBJECT:
            details: Obj = {"name": target.name, "kind": rt.plural, "uid": obj["metadata"]["uid"]}
            if rt.group:
                details["group"] = rt.group
            return _json(
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Success",
                    "details": details,
                }
            )
        return _json(obj)

    async def _delete_collection(self, request: web.Request, target: Target) -> web.Response:
        # A real server checks these ListOptions, as a list's or (with watch) a watch's, before
        # it reads the DeleteOptions body.
        list_options(request.query, watch=is_watch(request.query))
        rt = target.resource
        options = await self._delete_options(request)
        objects, _ = self.sim.store.list_objects(
            rt,
            target.namespace,
            request.query.get("labelSelector"),
            request.query.get("fieldSelector"),
        )
        deleted = []
        for obj in objects:
            meta = obj["metadata"]
            try:
                result, _ = self.sim.store.delete(rt, meta.get("namespace"), meta["name"], options)
            except ApiError as exc:
                if exc.code == 404:
                    continue
                raise
            deleted.append(result)
        return _json(
            {
                "kind": f"{rt.kind}List",
                "apiVersion": rt.group_version,
                "metadata": {"resourceVersion": self.sim.store.resource_version},
                "items": deleted,
            }
        )


def _prepare_for_create(rt: ResourceType, body: Obj, uid: str, existing: list[Obj]) -> Obj:
    """Defaults and status resets the real registries apply on create (``uid`` is the new
    object's, ``existing`` the stored objects of its type)."""
    check_create(rt, body)
    obj = copy.deepcopy(body)
    obj.setdefault("metadata", {})["uid"] = uid
    defaults_on_create(rt, obj, existing)
    if rt.key == PODS.key:
        obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
    elif rt.key == NAMESPACES.key:
        obj["spec"] = {"finalizers": ["kubernetes"]}
        obj["status"] = {"phase": "Active"}
        labels = obj["metadata"].setdefault("labels", {})
        labels.setdefault("kubernetes.io/metadata.name", obj["metadata"].get("name", ""))
    elif rt.key in _APPS:
        obj["status"] = dict(_EMPTY_APPS_STATUS[rt.key])
    return obj
