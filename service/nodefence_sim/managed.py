"""``metadata.managedFields``: who wrote which fields, and when by the API server's clock.

A real API server records, for every manager, the fields it last set and the time of its last
write that changed something. That time comes from the server, not from the writer, which makes
it the one timestamp on a Lease that a kubelet with a wrong clock cannot skew: it is what a
liveness judge compares with the server's ``Date``. The bookkeeping here follows the
structured-merge-diff updater the real server runs for Update operations: the writer gains the
fields it added or changed, every other manager loses the fields the writer changed or removed,
and an empty entry disappears. Field sets are kept as the leaf paths of the object in the real
``f:``/``k:``/``v:`` notation, typed by the schema facts of ``fieldsets`` (the facts
server-side apply merges by, so that an apply's conflicts are found against what updates own).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from nodefence_sim import fieldsets
from nodefence_sim.errors import ApiError

UNKNOWN_MANAGER = "unknown"
# The managers the simulated components write as: the names their real counterparts get from
# their User-Agent.
KUBELET = "kubelet"
CONTROLLER_MANAGER = "kube-controller-manager"
SCHEDULER = "kube-scheduler"
PROVISIONER = "csi-provisioner"
# What loading a scenario writes as: an administrator applying manifests.
SCENARIO_LOADER = "kubectl-client-side-apply"
MAX_MANAGER_LENGTH = 128
UPDATE = "Update"
FIELDS_V1 = "FieldsV1"

Path = tuple[str, ...]
FieldValues = dict[Path, Any]

# Fields that are never owned (the server's own bookkeeping, identity and type).
_STRIPPED_METADATA = frozenset(
    {
        "name",
        "namespace",
        "creationTimestamp",
        "selfLink",
        "uid",
        "generation",
        "managedFields",
        "resourceVersion",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
    }
)
_SELF = fieldsets.SELF


def manager_for(field_manager: str | None, user_agent: str | None) -> str:
    """The manager a request writes as: ``fieldManager``, else the User-Agent's product name (the
    part before the first ``/``), else ``unknown``; a bad ``fieldManager`` is refused as the
    real server refuses it."""
    if field_manager is not None:
        if len(field_manager) > MAX_MANAGER_LENGTH:
            raise ApiError(
                422,
                "Invalid",
                f"fieldManager: Too long: may not be longer than {MAX_MANAGER_LENGTH}",
            )
        if not field_manager.isprintable():
            raise ApiError(
                422,
                "Invalid",
                f"fieldManager: Invalid value: {json.dumps(field_manager)}: "
                "may only contain printable characters",
            )
        if field_manager:
            return field_manager
    prefix = (user_agent or "").split("/", 1)[0].strip()
    return prefix or UNKNOWN_MANAGER


def leaf_values(obj: Mapping[str, Any], *, part: str, map_markers: bool = True) -> FieldValues:
    """The owned leaves of ``obj`` with their values. ``part`` is ``"main"`` (everything but
    status), ``"status"`` (only status) or ``"all"`` (an object without a status subresource).

    ``map_markers`` names a map itself (``.``) beside its keys, as an update that adds the map
    owns it; the field set of an applied configuration owns only the keys."""
    values: FieldValues = {}
    kind = str(obj.get("kind", ""))
    for key, value in obj.items():
        if key in ("apiVersion", "kind"):
            continue
        if part == "main" and key == "status":
            continue
        if part == "status" and key != "status":
            continue
        owned = value
        if key == "metadata" and isinstance(value, Mapping):
            owned = {k: v for k, v in value.items() if k not in _STRIPPED_METADATA}
            if not owned:
                continue
        _Flattener(kind, map_markers, values).walk(owned, (f"f:{key}",), (str(key),))
    return values


class _Flattener:
    def __init__(self, kind: str, map_markers: bool, out: FieldValues) -> None:
        self.kind = kind
        self.map_markers = map_markers
        self.out = out

    def walk(self, value: Any, path: Path, names: fieldsets.Names) -> None:
        kind = self.kind
        if isinstance(value, Mapping) and value and not fieldsets.is_atomic(kind, names):
            if self.map_markers and fieldsets.is_map(kind, names):
                self.out[(*path, _SELF)] = None
            for key, child in value.items():
                self.walk(child, (*path, f"f:{key}"), (*names, str(key)))
            return
        if isinstance(value, list) and value and self._walk_list(value, path, names):
            return
        self.out[path] = copy.deepcopy(value)

    def _walk_list(self, value: list[Any], path: Path, names: fieldsets.Names) -> bool:
        """Descend into a keyed list or a set; ``False`` when the list is owned whole (atomic,
        or not well-formed for its type: a missing or repeated key)."""
        keys = fieldsets.list_keys(self.kind, names)
        if keys is not None:
            if not all(isinstance(item, Mapping) for item in value):
                return False
            try:
                elements = [fieldsets.key_element(item, keys) for item in value]
            except fieldsets.MissingKeyError:
                return False
            if len(set(elements)) != len(elements):
                return False
            for element, item in zip(elements, value, strict=True):
                if fieldsets.atomic_elements(names):
                    self.out[(*path, element)] = copy.deepcopy(item)
                    continue
                self.out[(*path, element, _SELF)] = None
                for child_key, child in item.items():
                    self.walk(child, (*path, element, f"f:{child_key}"), (*names, str(child_key)))
            return True
        if fieldsets.is_set(self.kind, names):
            if not all(isinstance(item, str | int | float) for item in value):
                return False
            if len({json.dumps(item) for item in value}) != len(value):
                return False
            for item in value:
                self.out[(*path, fieldsets.value_element(item))] = None
            return True
        return False


def encode(paths: Iterable[Path]) -> dict[str, Any]:
    """Leaf paths as the nested ``fieldsV1`` object."""
    root: dict[str, Any] = {}
    for path in sorted(paths):
        node = root
        for element in path:
            node = node.setdefault(element, {})
    return root


def decode(fields: Any) -> set[Path]:
    """The leaf paths a ``fieldsV1`` object names (anything malformed names nothing)."""
    paths: set[Path] = set()

    def walk(node: Any, prefix: Path) -> None:
        if not isinstance(node, Mapping):
            return
        if not node and prefix:
            paths.add(prefix)
            return
        for key, child in node.items():
            walk(child, (*prefix, str(key)))

    walk(fields, ())
    return paths


def owner_time(obj: Mapping[str, Any], path: Path) -> datetime | None:
    """When the server last recorded a write of the field at ``path`` (the time of the entry
    that owns it), or ``None`` when no entry does."""
    entries = (obj.get("metadata") or {}).get("managedFields") or []
    times = [
        datetime.fromisoformat(str(e["time"]).replace("Z", "+00:00"))
        for e in entries
        if isinstance(e, Mapping) and e.get("time") and path in decode(e.get("fieldsV1"))
    ]
    return max(times, default=None)


class ServerEntries(list[dict[str, Any]]):
    """managedFields the server computed itself for an apply (ownership moved by the apply's
    own rules). A write that carries them stores them as they are; a client cannot send this
    type, only a JSON list."""


def _identity(entry: Mapping[str, Any]) -> tuple[str, str, str, str]:
    """Entries are kept per manager, operation, subresource and (for updates) API version."""
    return (
        str(entry.get("manager", "")),
        str(entry.get("operation", "")),
        str(entry.get("subresource", "")),
        str(entry.get("apiVersion", "")),
    )


def _is_reset(entries: Any) -> bool:
    """``[{}]`` is how a client strips managedFields (an empty list means "not sent")."""
    return isinstance(entries, list) and bool(entries) and all(e == {} for e in entries)


def _usable(entries: Any) -> list[dict[str, Any]]:
    if not isinstance(entries, list):
        return []
    return [
        dict(e)
        for e in entries
        if isinstance(e, Mapping) and e.get("manager") and e.get("operation") in (UPDATE, "Apply")
    ]


def base_entries(
    live: list[dict[str, Any]], sent: Any, *, client_may_set: bool
) -> list[dict[str, Any]] | None:
    """The entries a write starts from: the stored ones, or the client's own when it sent some
    (not on a subresource, where the real server ignores them). ``None`` means reset.

    A client may rearrange or drop entries but never date them: an entry that matches a stored
    one keeps the stored time, and one the server has never seen is dated by this write."""
    if isinstance(sent, ServerEntries):
        return ServerEntries(copy.deepcopy(list(sent)))
    if not client_may_set or sent is None:
        return copy.deepcopy(live)
    if _is_reset(sent):
        return None
    usable = _usable(sent)
    if not usable:
        return copy.deepcopy(live)
    stored = {_identity(e): e.get("time") for e in live}
    result = []
    for sent_entry in usable:
        entry = copy.deepcopy(sent_entry)
        entry.pop("time", None)
        time = stored.get(_identity(entry))
        if time is not None:
            entry["time"] = time
        result.append(entry)
    return result


def sort_entries(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The order the real server stores entries in: operation, time, manager, version,
    subresource."""
    return sorted(
        entries,
        key=lambda e: (
            str(e.get("operation", "")),
            str(e.get("time", "")),
            str(e.get("manager", "")),
            str(e.get("apiVersion", "")),
            str(e.get("subresource", "")),
        ),
    )


def record_write(
    entries: list[dict[str, Any]],
    old: FieldValues,
    new: FieldValues,
    *,
    manager: str,
    api_version: str,
    subresource: str,
    moment: str,
) -> list[dict[str, Any]]:
    """``entries`` after ``manager`` turned ``old`` into ``new``: the writer takes what it
    added or changed and its entry is dated ``moment``; the others lose those fields and the
    removed ones; empty entries go. Undated entries (a client's invention) get ``moment``.
    Entries an apply computed are its record of the write already, and stay as they are."""
    if isinstance(entries, ServerEntries):
        return entries
    changed = {p for p, v in new.items() if p not in old or old[p] != v}
    removed = set(old) - set(new)
    identity = (manager, UPDATE, subresource, api_version)
    result: list[dict[str, Any]] = []
    mine: dict[str, Any] | None = None
    for entry in entries:
        paths = decode(entry.get("fieldsV1"))
        if _identity(entry) == identity:
            mine = entry
            continue
        kept = paths - changed - removed
        if not kept:
            continue
        result.append({**entry, "time": entry.get("time", moment), "fieldsType": FIELDS_V1})
        result[-1]["fieldsV1"] = encode(kept)
    previous = decode((mine or {}).get("fieldsV1")) - removed
    owned = previous | changed
    if owned:
        entry = {
            "manager": manager,
            "operation": UPDATE,
            "apiVersion": api_version,
            "time": moment if changed or mine is None else mine.get("time", moment),
            "fieldsType": FIELDS_V1,
            "fieldsV1": encode(owned),
        }
        if subresource:
            entry["subresource"] = subresource
        result.append(entry)
    return result
