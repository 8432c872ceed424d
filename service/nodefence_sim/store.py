"""The simulator's object store: the etcd + registry part of an API server.

Every write goes through here so that uid, resourceVersion, generation, graceful deletion,
finalizers, preconditions and watch events behave as the real server's do. It is synchronous:
the simulator runs on one event loop, so a read-modify-write without an ``await`` in between is
atomic, which is what makes resourceVersion conflicts meaningful.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, cast

from nodefence_sim import managed
from nodefence_sim.errors import ApiError, already_exists, conflict, invalid, not_found
from nodefence_sim.resources import BY_KIND, EVENTS, NAMESPACES, NODES, PODS, ResourceType
from nodefence_sim.selectors import parse_field_selector, parse_label_selector
from nodefence_sim.validation import validate_event, validate_node

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace or "", name)

_T = TypeVar("_T")

HISTORY = 20000
DEFAULT_POD_GRACE = 30


def clone(value: _T) -> _T:
    """A deep copy of JSON-shaped data (dicts, lists, scalars), several times faster than
    ``copy.deepcopy``, which every write and read pays for."""
    return cast(_T, _copy(value))


def _copy(value: Any) -> Any:
    if type(value) is dict:
        return {k: _copy(v) for k, v in value.items()}
    if type(value) is list:
        return [_copy(v) for v in value]
    return value


def utcnow() -> datetime:
    return datetime.now(UTC)


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


@dataclass
class WatchEvent:
    type: str  # ADDED, MODIFIED, DELETED
    resource: ResourceType
    object: Obj
    resource_version: int
    # The object as stored before a MODIFIED or DELETED event (a reference: read only).
    previous: Obj | None = None


@dataclass
class _Subscriber:
    resource: ResourceType
    namespace: str | None
    predicate: Callable[[Obj], bool]
    queue: asyncio.Queue[WatchEvent | None] = field(default_factory=asyncio.Queue)


@dataclass(frozen=True)
class DeleteOptions:
    grace_period_seconds: int | None = None
    uid: str | None = None
    resource_version: str | None = None
    propagation_policy: str | None = None
    dry_run: bool = False


class Store:
    """All objects of all served types, keyed by type, namespace and name."""

    def __init__(self, now: Callable[[], datetime] = utcnow) -> None:
        self.now = now
        self._rv = 1000
        self._objects: dict[tuple[str, str], dict[Key, Obj]] = {}
        self._history: deque[WatchEvent] = deque(maxlen=HISTORY)
        self._subscribers: list[_Subscriber] = []
        self._listeners: list[Callable[[WatchEvent], None]] = []
        self._admission: list[Callable[[ResourceType, Obj], None]] = []
        # Pods by spec.nodeName: what a kubelet, the node controllers and a
        # ``spec.nodeName=`` field selector read, without a pass over every pod.
        self._pods_by_node: dict[str, dict[Key, Obj]] = {}

    # ------------------------------------------------------------------ reads
    @property
    def resource_version(self) -> str:
        return str(self._rv)

    def _table(self, rt: ResourceType) -> dict[Key, Obj]:
        return self._objects.setdefault(rt.key, {})

    @staticmethod
    def _key(rt: ResourceType, namespace: str | None, name: str) -> Key:
        return ((namespace or "") if rt.namespaced else "", name)

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        obj = self._table(rt).get(self._key(rt, namespace, name))
        if obj is None:
            raise not_found(rt.plural, name, rt.group)
        return clone(obj)

    def peek(self, rt: ResourceType, namespace: str | None, name: str) -> Obj | None:
        """The stored object itself (no copy): for controllers that only read."""
        return self._table(rt).get(self._key(rt, namespace, name))

    def items(self, rt: ResourceType, namespace: str | None = None) -> list[Obj]:
        """Stored objects without copying, for controllers that only read."""
        table = self._table(rt)
        if namespace is None or not rt.namespaced:
            return list(table.values())
        return [o for (ns, _), o in table.items() if ns == namespace]

    def pods_on(self, node: str) -> list[Obj]:
        """The stored pods bound to ``node`` (no copies), for controllers that only read."""
        return list(self._pods_by_node.get(node, {}).values())

    def select(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[list[Obj], str]:
        """The matching stored objects themselves, by namespace and name, and the list's
        resourceVersion. Stored objects are never changed in place (every write stores a new
        one), so the result is a consistent snapshot that callers must only read."""
        predicate = self.predicate(rt, label_selector, field_selector)
        node = _bound_node(rt, field_selector)
        if node is not None:
            candidates: list[Obj] = [
                o
                for (ns, _), o in self._pods_by_node.get(node, {}).items()
                if namespace is None or ns == namespace
            ]
        else:
            candidates = self.items(rt, namespace)
        selected = [o for o in candidates if predicate(o)]
        selected.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
        return selected, self.resource_version

    def list_objects(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[list[Obj], str]:
        """``select``, copied: for callers that change what they get."""
        selected, rv = self.select(rt, namespace, label_selector, field_selector)
        return [clone(o) for o in selected], rv

    @staticmethod
    def predicate(
        rt: ResourceType, label_selector: str | None, field_selector: str | None
    ) -> Callable[[Obj], bool]:
        selector = parse_label_selector(label_selector)
        fields = parse_field_selector(field_selector, rt.kind)

        def matches(obj: Obj) -> bool:
            return selector.matches(obj["metadata"].get("labels") or {}) and fields(obj)

        return matches

    # ----------------------------------------------------------------- writes
    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _put(self, rt: ResourceType, key: Key, obj: Obj) -> None:
        table = self._table(rt)
        if rt.key == PODS.key:
            self._unindex(key, table.get(key))
            node = obj.get("spec", {}).get("nodeName")
            if node:
                self._pods_by_node.setdefault(str(node), {})[key] = obj
        table[key] = obj

    def _drop(self, rt: ResourceType, key: Key) -> None:
        table = self._table(rt)
        if rt.key == PODS.key:
            self._unindex(key, table.get(key))
        del table[key]

    def _unindex(self, key: Key, old: Obj | None) -> None:
        node = (old or {}).get("spec", {}).get("nodeName")
        if not node:
            return
        bound = self._pods_by_node.get(str(node))
        if bound is not None:
            bound.pop(key, None)
            if not bound:
                del self._pods_by_node[str(node)]

    def _emit(self, type_: str, rt: ResourceType, obj: Obj, previous: Obj | None = None) -> None:
        event = WatchEvent(type_, rt, obj, int(obj["metadata"]["resourceVersion"]), previous)
        self._history.append(event)
        for sub in self._subscribers:
            if sub.resource.key != rt.key:
                continue
            ns = obj["metadata"].get("namespace")
            if sub.namespace is not None and rt.namespaced and ns != sub.namespace:
                continue
            if sub.predicate(event.object):
                sub.queue.put_nowait(event)
        for listener in list(self._listeners):
            listener(event)

    def add_listener(self, listener: Callable[[WatchEvent], None]) -> None:
        """Controllers hear about every change synchronously (to wake their loops)."""
        self._listeners.append(listener)

    def add_admission(self, plugin: Callable[[ResourceType, Obj], None]) -> None:
        """Mutating admission on create: ``plugin`` may change the new object in place (as
        DefaultTolerationSeconds does to pods) or refuse it by raising an ``ApiError``."""
        self._admission.append(plugin)

    def create(
        self,
        rt: ResourceType,
        namespace: str | None,
        obj: Mapping[str, Any],
        *,
        manager: str = managed.UNKNOWN_MANAGER,
        uid: str | None = None,
    ) -> Obj:
        """POST semantics; ``manager`` is who writes (it owns every field it sets). ``uid`` is
        the one the registry chose already (defaulting that uses it ran before the store)."""
        new = clone(dict(obj))
        meta = new.setdefault("metadata", {})
        if not meta.get("name"):
            prefix = meta.get("generateName")
            if not prefix:
                raise invalid(
                    rt.kind, "", "metadata.name: Required value: name or generateName is required"
                )
            meta["name"] = prefix + uuid.uuid4().hex[:5]
        if rt.namespaced:
            ns = namespace or meta.get("namespace") or "default"
            if meta.get("namespace") and namespace and meta["namespace"] != namespace:
                raise ApiError(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does not "
                    "match the namespace sent on the request",
                )
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        key = self._key(rt, meta.get("namespace"), meta["name"])
        table = self._table(rt)
        if key in table:
            raise already_exists(rt.plural, meta["name"], rt.group)
        for plugin in self._admission:
            plugin(rt, new)
        new["apiVersion"] = rt.group_version
        new["kind"] = rt.kind
        meta["uid"] = uid or str(uuid.uuid4())
        meta["creationTimestamp"] = rfc3339(self.now())
        meta["generation"] = 1
        meta.pop("deletionTimestamp", None)
        meta.pop("deletionGracePeriodSeconds", None)
        if rt.key == NODES.key:
            validate_node(new)
        elif rt.key == EVENTS.key:
            validate_event(new)
        self._record_fields(rt, {}, new, obj, manager, subresource="", moment=None)
        meta["resourceVersion"] = self._next_rv()
        self._put(rt, key, new)
        self._emit("ADDED", rt, new)
        return clone(new)

    def update(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        obj: Mapping[str, Any],
        *,
        subresource: str = "",
        check_rv: bool = True,
        manager: str = managed.UNKNOWN_MANAGER,
        written_at: datetime | None = None,
    ) -> Obj:
        """PUT semantics. ``subresource`` "" keeps the stored status (for types with a status
        subresource), "status" keeps everything but status, "all" (controllers) replaces both,
        recorded as the main and the status write a real component makes.

        ``manager`` owns what it changes, dated by the server's clock; ``written_at`` is only
        for a write that stands for one made earlier (a kubelet that died in the past made its
        last renewal then, and the server dated it then).
        """
        table = self._table(rt)
        key = self._key(rt, namespace, name)
        old = table.get(key)
        if old is None:
            raise not_found(rt.plural, name, rt.group)
        new = clone(dict(obj))
        meta = new.setdefault("metadata", {})
        if meta.get("name", name) != name:
            raise ApiError(
                400, "BadRequest", "the name of the object does not match the name on the URL"
            )
        sent_rv = meta.get("resourceVersion")
        if check_rv and sent_rv and sent_rv != old["metadata"]["resourceVersion"]:
            raise conflict(
                rt.plural,
                name,
                "the object has been modified; please apply your "
                "changes to the latest version and try again",
                rt.group,
            )
        if meta.get("uid") and meta["uid"] != old["metadata"]["uid"]:
            raise conflict(
                rt.plural,
                name,
                "Precondition failed: UID in precondition: "
                f"{meta['uid']}, UID in object meta: {old['metadata']['uid']}",
                rt.group,
            )
        if subresource == "status":
            merged = clone(old)
            merged["status"] = new.get("status", {})
            new = merged
            meta = new["metadata"]
        else:
            for immutable in (
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "namespace",
            ):
                if immutable in old["metadata"]:
                    meta[immutable] = old["metadata"][immutable]
                else:
                    meta.pop(immutable, None)
            if subresource == "" and "status" in rt.subresources:
                if "status" in old:
                    new["status"] = clone(old["status"])
                else:
                    new.pop("status", None)
            if new.get("spec") != old.get("spec"):
                meta["generation"] = int(old["metadata"].get("generation", 1)) + 1
            else:
                meta["generation"] = old["metadata"].get("generation", 1)
        meta["name"] = name
        new["apiVersion"] = rt.group_version
        new["kind"] = rt.kind
        if rt.key == NODES.key and subresource != "status":
            validate_node(new)
        elif rt.key == EVENTS.key:
            validate_event(new)
        self._record_fields(rt, old, new, obj, manager, subresource=subresource, moment=written_at)
        if new == old or _same_but_rv(new, old):
            return clone(old)
        meta["resourceVersion"] = self._next_rv()
        if (
            meta.get("deletionTimestamp")
            and not meta.get("finalizers")
            and self._may_finish_deletion(rt, new)
        ):
            self._drop(rt, key)
            self._emit("DELETED", rt, new, old)
            return clone(new)
        self._put(rt, key, new)
        self._emit("MODIFIED", rt, new, old)
        return clone(new)

    def _record_fields(
        self,
        rt: ResourceType,
        old: Obj,
        new: Obj,
        sent: Mapping[str, Any],
        manager: str,
        *,
        subresource: str,
        moment: datetime | None,
    ) -> None:
        """Set ``new``'s managedFields for ``manager``'s write of ``new`` over ``old``."""
        meta = new["metadata"]
        live = list(old.get("metadata", {}).get("managedFields") or [])
        sent_fields = (sent.get("metadata") or {}).get("managedFields")
        base = managed.base_entries(
            live, sent_fields, client_may_set=subresource in ("", "all") or not old
        )
        if base is None:
            meta.pop("managedFields", None)
            return
        has_status = "status" in rt.subresources
        if subresource == "status":
            parts = [("status", "status")]
        elif not has_status or not old:
            parts = [("all", "")]
        elif subresource == "all":
            parts = [("main", ""), ("status", "status")]
        else:
            parts = [("main", "")]
        stamp = rfc3339(moment or self.now())
        entries = base
        for part, sub in parts:
            entries = managed.record_write(
                entries,
                managed.leaf_values(old, part=part),
                managed.leaf_values(new, part=part),
                manager=manager,
                api_version=rt.group_version,
                subresource=sub,
                moment=stamp,
            )
        if entries:
            meta["managedFields"] = managed.sort_entries(entries)
        else:
            meta.pop("managedFields", None)

    @staticmethod
    def _may_finish_deletion(rt: ResourceType, obj: Obj) -> bool:
        """An object whose deletion is due goes once no finalizer holds it; a pod still in its
        graceful period waits for the kubelet instead."""
        if rt.key == NAMESPACES.key:
            return not (obj.get("spec") or {}).get("finalizers")
        if rt.key != PODS.key:
            return True
        return int(obj["metadata"].get("deletionGracePeriodSeconds") or 0) == 0

    def delete(
        self, rt: ResourceType, namespace: str | None, name: str, options: DeleteOptions
    ) -> tuple[Obj, bool]:
        """Delete with the registry's rules; returns (object, removed_now)."""
        table = self._table(rt)
        key = self._key(rt, namespace, name)
        old = table.get(key)
        if old is None:
            raise not_found(rt.plural, name, rt.group)
        meta = old["metadata"]
        if options.uid and options.uid != meta["uid"]:
            raise conflict(
                rt.plural,
                name,
                "Precondition failed: UID in precondition: "
                f"{options.uid}, UID in object meta: {meta['uid']}",
                rt.group,
            )
        if options.resource_version and options.resource_version != meta["resourceVersion"]:
            raise conflict(
                rt.plural,
                name,
                "Precondition failed: ResourceVersion in "
                f"precondition: {options.resource_version}, ResourceVersion in object "
                f"meta: {meta['resourceVersion']}",
                rt.group,
            )
        grace = self._grace_period(rt, old, options.grace_period_seconds)
        if options.dry_run:
            return clone(old), False
        if rt.key == NAMESPACES.key and (old.get("spec") or {}).get("finalizers"):
            return self._begin_namespace_deletion(key, old), False
        finalizers = list(meta.get("finalizers") or [])
        if (
            options.propagation_policy == "Foreground"
            and "foregroundDeletion" not in finalizers
            and self.dependents(meta["uid"])
        ):
            finalizers.append("foregroundDeletion")
        if (
            options.propagation_policy == "Orphan"
            and "orphan" not in finalizers
            and self.dependents(meta["uid"])
        ):
            finalizers.append("orphan")
        if grace == 0 and not finalizers:
            self._drop(rt, key)
            removed = clone(old)
            removed["metadata"]["resourceVersion"] = self._next_rv()
            if "deletionTimestamp" not in removed["metadata"]:
                removed["metadata"]["deletionTimestamp"] = rfc3339(self.now())
                removed["metadata"]["deletionGracePeriodSeconds"] = 0
            self._emit("DELETED", rt, removed, old)
            return clone(removed), True
        new = clone(old)
        nmeta = new["metadata"]
        current_grace = nmeta.get("deletionGracePeriodSeconds")
        if nmeta.get("deletionTimestamp") is None or (
            current_grace is not None and grace < int(current_grace)
        ):
            nmeta["deletionTimestamp"] = rfc3339(self.now() + timedelta(seconds=grace))
            nmeta["deletionGracePeriodSeconds"] = grace
        if finalizers:
            nmeta["finalizers"] = finalizers
        if new == old:
            return clone(old), False
        nmeta["resourceVersion"] = self._next_rv()
        self._put(rt, key, new)
        self._emit("MODIFIED", rt, new, old)
        return clone(new), False

    def _begin_namespace_deletion(self, key: Key, old: Obj) -> Obj:
        """The namespace registry's delete: a namespace its finalizers still hold is only
        marked (Terminating from now); deleting it again while it is, is a conflict."""
        if old["metadata"].get("deletionTimestamp"):
            raise conflict(
                NAMESPACES.plural,
                old["metadata"]["name"],
                "The system is ensuring all content is removed from this namespace.  Upon "
                "completion, this namespace will automatically be purged by the system.",
            )
        new = clone(old)
        new["metadata"]["deletionTimestamp"] = rfc3339(self.now())
        new["metadata"]["deletionGracePeriodSeconds"] = 0
        new.setdefault("status", {})["phase"] = "Terminating"
        new["metadata"]["resourceVersion"] = self._next_rv()
        self._table(NAMESPACES)[key] = new
        self._emit("MODIFIED", NAMESPACES, new)
        return clone(new)

    def force_delete_pod(self, pod: Mapping[str, Any]) -> bool:
        """Grace 0 with the pod's UID as precondition, as the kubelet and PodGC do, so a
        same-named replacement is never hit; False when the pod is gone or was replaced."""
        meta = pod["metadata"]
        options = DeleteOptions(grace_period_seconds=0, uid=meta["uid"])
        try:
            self.delete(PODS, meta["namespace"], meta["name"], options)
        except ApiError:
            return False
        return True

    def _grace_period(self, rt: ResourceType, obj: Obj, requested: int | None) -> int:
        if rt.key != PODS.key:
            return 0
        spec = obj.get("spec", {})
        phase = obj.get("status", {}).get("phase")
        if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
            return 0
        if requested is not None:
            return max(0, int(requested))
        value = spec.get("terminationGracePeriodSeconds")
        return DEFAULT_POD_GRACE if value is None else int(value)

    def dependents(self, owner_uid: str) -> list[tuple[ResourceType, Obj]]:
        """Objects whose ownerReferences name ``owner_uid`` (for garbage collection)."""
        found: list[tuple[ResourceType, Obj]] = []
        for obj_table in self._objects.values():
            for obj in obj_table.values():
                refs = obj["metadata"].get("ownerReferences") or []
                if any(ref.get("uid") == owner_uid for ref in refs):
                    rt = BY_KIND.get(obj["kind"])
                    if rt is not None:
                        found.append((rt, obj))
        return found

    # ------------------------------------------------------------------ watch
    async def watch(
        self,
        rt: ResourceType,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        since: str | None,
    ) -> AsyncIterator[WatchEvent]:
        """Events after resourceVersion ``since`` (replayed from history), then live ones.

        A ``since`` older than the retained history raises 410 Gone, as etcd compaction does.
        """
        predicate = self.predicate(rt, label_selector, field_selector)
        sub = _Subscriber(rt, namespace if rt.namespaced else None, predicate)
        backlog: list[WatchEvent] = []
        if since not in (None, "", "0"):
            since_rv = int(str(since))
            if (
                self._history
                and since_rv < self._history[0].resource_version - 1
                and (len(self._history) == self._history.maxlen)
            ):
                raise ApiError(
                    410,
                    "Expired",
                    f"too old resource version: {since_rv} ({self._history[0].resource_version})",
                )
            for event in self._history:
                if event.resource_version <= since_rv or event.resource.key != rt.key:
                    continue
                ns = event.object["metadata"].get("namespace")
                if sub.namespace is not None and ns != sub.namespace:
                    continue
                if predicate(event.object):
                    backlog.append(event)
        else:
            for obj in self.items(rt, namespace):
                if predicate(obj):
                    backlog.append(
                        WatchEvent("ADDED", rt, obj, int(obj["metadata"]["resourceVersion"]))
                    )
        self._subscribers.append(sub)
        try:
            for event in backlog:
                yield event
            while True:
                item = await sub.queue.get()
                if item is None:
                    return
                yield item
        finally:
            self._subscribers.remove(sub)

    def close_watches(self) -> None:
        for sub in self._subscribers:
            sub.queue.put_nowait(None)


_VERSION_FIELDS = ("resourceVersion", "generation")


def _same_but_rv(new: Obj, old: Obj) -> bool:
    """Equal but for resourceVersion and generation: a write that changes nothing else is no
    change (no new version, no event), as the real registry's no-op update is."""
    if new.keys() != old.keys():
        return False
    if any(new[k] != old[k] for k in new if k != "metadata"):
        return False
    a, b = new["metadata"], old["metadata"]
    keys = (a.keys() | b.keys()) - set(_VERSION_FIELDS)
    return all(a.get(k, _ABSENT) == b.get(k, _ABSENT) for k in keys)


_ABSENT = object()


def _bound_node(rt: ResourceType, field_selector: str | None) -> str | None:
    """The node a pod field selector pins with ``spec.nodeName=X`` (the kubelet's and
    nodefence's query), so the list is read from the index."""
    if rt.key != PODS.key or not field_selector:
        return None
    for part in field_selector.split(","):
        key, sep, value = part.partition("=")
        node = value.lstrip("=").strip()
        if sep and node and not key.endswith("!") and key.strip() == "spec.nodeName":
            return node
    return None
