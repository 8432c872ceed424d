"""Server-side apply (``PATCH`` with ``application/apply-patch+yaml``), as structured-merge-diff
and the API server's field manager do it.

An applied configuration is a manager's whole intent for the fields it names: it is merged into
the live object by the schema (``fieldsets``), the manager then owns exactly the fields it sent,
and the fields it sent last time but left out now are removed unless another manager owns them.
Changing a field another manager owns (an ``Update`` by ``kubectl edit`` or a controller, or
another ``Apply``) is a conflict unless forced, when the ownership moves; setting it to the value
it already has shares it. Two things of the real field manager that users meet are kept: the
upgrade from client-side apply (``kubectl`` may take the fields its last-applied annotation still
describes without forcing) and that annotation kept in step by later server-side applies.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml
from multidict import MultiMapping

from nodefence_sim import fieldsets, managed
from nodefence_sim.errors import ApiError, bad_request
from nodefence_sim.fieldsets import SELF, Names, Path
from nodefence_sim.resources import ResourceType

Obj = dict[str, Any]

APPLY = "Apply"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
# The manager ``kubectl apply --server-side`` writes as, which the field manager lets upgrade
# from client-side apply.
KUBECTL = "kubectl"
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


class _Loader(yaml.SafeLoader):
    """YAML as the API server reads it: timestamps stay strings (they are strings in JSON)."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def is_apply(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower() == "application/apply-patch+yaml"


@dataclass(frozen=True)
class ApplyOptions:
    manager: str
    force: bool
    subresource: str


def apply_options(query: MultiMapping[str], subresource: str) -> ApplyOptions:
    """PatchOptions of an apply, refused as the real server's validation refuses them."""
    field_manager = query.get("fieldManager") or ""
    if not field_manager:
        message = "Required value: is required for apply patch"
        raise ApiError(
            422,
            "Invalid",
            f'PatchOptions.meta.k8s.io "" is invalid: fieldManager: {message}',
            kind="PatchOptions",
            group="meta.k8s.io",
            causes=[{"reason": "FieldValueRequired", "message": message, "field": "fieldManager"}],
        )
    manager = managed.manager_for(field_manager, None)
    raw_force = query.get("force")
    if raw_force is not None and raw_force not in _TRUE | _FALSE:
        raise bad_request(f'strconv.ParseBool: parsing "{raw_force}": invalid syntax')
    return ApplyOptions(manager, raw_force in _TRUE, subresource)


def applied_config(body: bytes, rt: ResourceType, name: str, namespace: str | None) -> Obj:
    """The applied configuration of ``body`` (YAML or JSON) for the object at the URL."""
    try:
        config = yaml.load(body or b"{}", Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise bad_request(f"error decoding YAML: {exc}") from exc
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise bad_request(
            "error decoding YAML: error unmarshaling JSON: while decoding JSON: json: cannot "
            f"unmarshal {_json_type(config)} into Go value of type map[string]interface {{}}"
        )
    config = _string_keys(config)
    api_version = str(config.get("apiVersion") or "")
    group, _, version = api_version.rpartition("/")
    if api_version != rt.group_version or config.get("kind") != rt.kind:
        raise bad_request(
            f"invalid object type: {group}/{version}, Kind={config.get('kind') or ''}"
        )
    meta = config.get("metadata")
    if meta is None:
        meta = config["metadata"] = {}
    if not isinstance(meta, dict):
        raise bad_request("metadata must be an object")
    if "managedFields" in meta:
        raise bad_request("metadata.managedFields must be nil")
    if meta.get("name", name) != name:
        raise bad_request(
            f"the name of the object ({meta['name']}) does not match the name on the URL ({name})"
        )
    if namespace and meta.get("namespace", namespace) != namespace:
        raise bad_request(
            f"the namespace of the object ({meta['namespace']}) does not match the namespace "
            f"on the URL ({namespace})"
        )
    return dict(config)


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "bool"
    return "number"


def _string_keys(value: Any) -> Any:
    """Mapping keys as JSON has them (YAML allows ``80: x``; the server reads ``"80"``)."""
    if isinstance(value, dict):
        return {str(k): _string_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_string_keys(v) for v in value]
    return value


def server_side_apply(
    rt: ResourceType,
    live: Mapping[str, Any] | None,
    config: Obj,
    options: ApplyOptions,
    moment: str,
) -> Obj:
    """The object after ``options.manager`` applied ``config`` to ``live`` (``None``: the
    object does not exist yet), its managedFields computed here (``managed.ServerEntries``).
    Raises the 409 a real server answers when the apply changes fields others own."""
    current: Obj = copy.deepcopy(dict(live)) if live is not None else {}
    part = _part(rt, options.subresource)
    intent = _intent(config, part)
    kind = rt.kind
    gvk = f"{rt.group}/{rt.version}, Kind={rt.kind}"
    merged: Obj = dict(_merge(current, intent, kind, (), gvk))
    if live is None:
        merged["apiVersion"] = rt.group_version
        merged["kind"] = rt.kind
    applied = _owned(intent, kind, part)
    entries = [dict(e) for e in (current.get("metadata") or {}).get("managedFields") or []]
    mine = next((e for e in entries if _is_mine(e, options)), None)
    others = [e for e in entries if e is not mine]
    last = managed.decode((mine or {}).get("fieldsV1"))
    if last:
        owned_now = set(applied).union(*(managed.decode(e.get("fieldsV1")) for e in others))
        _prune(merged, last - owned_now, owned_now, kind)
    before = _flat(current, kind, part)
    after = _flat(merged, kind, part)
    changed = {p for p, v in after.items() if p not in before or before[p] != v}
    removed = set(before) - set(after)
    conflicts = {
        id(e): paths for e in others if (paths := managed.decode(e.get("fieldsV1")) & changed)
    }
    if conflicts and not options.force:
        allowed = _upgradable(current, kind, part) if options.manager == KUBECTL else set()
        remaining = {key: paths - allowed for key, paths in conflicts.items() if paths - allowed}
        if remaining:
            raise _conflict_error([(e, remaining[id(e)]) for e in others if id(e) in remaining])
    result = []
    for other in others:
        kept = managed.decode(other.get("fieldsV1")) - removed - conflicts.get(id(other), set())
        if kept:
            result.append(
                {**other, "fieldsType": managed.FIELDS_V1, "fieldsV1": managed.encode(kept)}
            )
    if applied:
        object_changed = _without_fields(merged) != _without_fields(current)
        entry: Obj = {
            "manager": options.manager,
            "operation": APPLY,
            "apiVersion": rt.group_version,
            "time": moment if object_changed or mine is None else mine.get("time", moment),
            "fieldsType": managed.FIELDS_V1,
            "fieldsV1": managed.encode(applied),
        }
        if options.subresource:
            entry["subresource"] = options.subresource
        result.append(entry)
    if options.manager == KUBECTL and LAST_APPLIED in _annotations(current):
        merged["metadata"].setdefault("annotations", {})[LAST_APPLIED] = _last_applied(config)
    merged.setdefault("metadata", {})["managedFields"] = managed.ServerEntries(
        managed.sort_entries(result)
    )
    return merged


def _part(rt: ResourceType, subresource: str) -> str:
    """Which part of the object the request writes, in ``managed.leaf_values`` terms."""
    if subresource == "status":
        return "status"
    return "main" if "status" in rt.subresources else "all"


def _intent(config: Obj, part: str) -> Obj:
    """What of ``config`` the endpoint writes: the status subresource writes only status, and
    the object itself of a kind with a status subresource leaves status alone (the registry
    resets it), so neither is merged nor owned."""
    if part == "status":
        return {key: config[key] for key in ("apiVersion", "kind", "status") if key in config}
    if part == "main":
        return {key: value for key, value in config.items() if key != "status"}
    return config


def _is_mine(entry: Mapping[str, Any], options: ApplyOptions) -> bool:
    return (
        entry.get("manager") == options.manager
        and entry.get("operation") == APPLY
        and str(entry.get("subresource", "")) == options.subresource
    )


def _flat(obj: Mapping[str, Any], kind: str, part: str) -> managed.FieldValues:
    return managed.leaf_values({**obj, "kind": kind}, part=part)


def _owned(intent: Obj, kind: str, part: str) -> set[Path]:
    """The field set of an applied configuration (its map keys, not the maps)."""
    return set(managed.leaf_values({**intent, "kind": kind}, part=part, map_markers=False))


def _without_fields(obj: Mapping[str, Any]) -> Obj:
    result = copy.deepcopy(dict(obj))
    result.get("metadata", {}).pop("managedFields", None)
    return result


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    annotations = (obj.get("metadata") or {}).get("annotations")
    return annotations if isinstance(annotations, Mapping) else {}


def _last_applied(config: Obj) -> str:
    """The annotation as the field manager writes it: the applied configuration without the
    annotation itself, as Go encodes a map (sorted keys, ``<>&`` escaped, a final newline)."""
    body = copy.deepcopy(config)
    annotations = body.get("metadata", {}).get("annotations")
    if isinstance(annotations, dict):
        annotations.pop(LAST_APPLIED, None)
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026") + "\n"


def _upgradable(current: Obj, kind: str, part: str) -> set[Path]:
    """The fields ``kubectl`` takes over from client-side apply without forcing: those its
    last-applied annotation names with the value the object still has."""
    raw = _annotations(current).get(LAST_APPLIED)
    if not isinstance(raw, str) or not raw:
        return set()
    try:
        last = json.loads(raw)
    except ValueError:
        return set()
    if not isinstance(last, dict):
        return set()
    then = managed.leaf_values({**last, "kind": kind}, part=part, map_markers=False)
    now = managed.leaf_values({**current, "kind": kind}, part=part, map_markers=False)
    return {path for path, value in then.items() if path in now and now[path] == value}


def _conflict_error(conflicts: list[tuple[Obj, set[Path]]]) -> ApiError:
    """409 as the field manager words it: one line for one conflict, else by manager."""
    causes = []
    by_manager: dict[str, list[str]] = {}
    for entry, paths in conflicts:
        who = _print_manager(entry)
        for path in sorted(paths):
            shown = fieldsets.path_string(path[:-1] if path[-1] == SELF else path)
            causes.append(
                {"type": "FieldManagerConflict", "message": f"conflict with {who}", "field": shown}
            )
            by_manager.setdefault(who, []).append(shown)
    if len(causes) == 1:
        message = f"Apply failed with 1 conflict: {causes[0]['message']}: {causes[0]['field']}"
    else:
        lines = []
        for who in sorted(by_manager):
            lines.append(f"conflicts with {who}:")
            lines.extend(f"- {shown}" for shown in by_manager[who])
        message = f"Apply failed with {len(causes)} conflicts: " + "\n".join(lines)
    return ApiError(409, "Conflict", message, causes=causes)


def _print_manager(entry: Mapping[str, Any]) -> str:
    """A manager as conflicts name it; an update is named with its API version (the server
    keys managers without their time, so none is printed)."""
    shown = json.dumps(str(entry.get("manager", "")))
    if entry.get("subresource"):
        shown += f" with subresource {json.dumps(str(entry['subresource']))}"
    if entry.get("operation") == managed.UPDATE:
        shown += f" using {entry.get('apiVersion', '')}"
    return shown


# ------------------------------------------------------------------------------------ merge
def _merge(live: Any, config: Any, kind: str, names: Names, gvk: str) -> Any:
    """``config`` merged into ``live`` by the schema: structs and maps field by field, keyed
    lists element by element, sets as a union, anything atomic replaced. A ``null`` in the
    configuration leaves the field unset."""
    if isinstance(config, Mapping):
        if not isinstance(live, Mapping) or (names and fieldsets.is_atomic(kind, names)):
            return _drop_nulls(config)
        result = copy.deepcopy(dict(live))
        for key, value in config.items():
            if value is None:
                result.pop(key, None)
            else:
                result[key] = _merge(result.get(key), value, kind, (*names, key), gvk)
        return result
    if isinstance(config, list) and names:
        keys = fieldsets.list_keys(kind, names)
        if keys is not None:
            return _merge_keyed(
                live if isinstance(live, list) else [],
                config,
                keys,
                kind=kind,
                names=names,
                gvk=gvk,
            )
        if fieldsets.is_set(kind, names):
            merged = list(live) if isinstance(live, list) else []
            merged.extend(item for item in _unique(config) if item not in merged)
            return merged
    return _drop_nulls(config)


def _unique(items: list[Any]) -> list[Any]:
    seen: list[Any] = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen


def _drop_nulls(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return copy.deepcopy(value)


def _merge_keyed(
    live: list[Any], config: list[Any], keys: tuple[str, ...], *, kind: str, names: Names, gvk: str
) -> list[Any]:
    """Elements matched by their keys. Live elements the configuration does not name keep their
    places; named ones follow the configuration's order from the first of them on."""
    where = ".".join(("", *names))
    config_keys: list[str] = []
    for index, item in enumerate(config):
        if not isinstance(item, Mapping):
            raise _typed_error(gvk, f"{where}: element {index}: expected map, got {item!r}")
        try:
            key = fieldsets.key_element(item, keys)
        except fieldsets.MissingKeyError as exc:
            raise _typed_error(
                gvk,
                f"{where}: element {index}: associative list with keys has an element that "
                f'omits key field "{exc.key}" (and doesn\'t have default value)',
            ) from None
        if key in config_keys:
            shown = fieldsets.path_string((key,))
            raise _typed_error(gvk, f"{where}: duplicate entries for key {shown}")
        config_keys.append(key)
    by_key = dict(zip(config_keys, config, strict=True))
    live_by_key: dict[str, Any] = {}
    live_keys: list[str | None] = []
    for item in live:
        found = _live_key(item, keys)
        live_keys.append(found)
        if found is not None:
            live_by_key.setdefault(found, item)
    out: list[Any] = []
    emitted: set[str] = set()
    cursor = 0

    def emit(key: str) -> None:
        out.append(_merge(live_by_key.get(key), by_key[key], kind, names, gvk))
        emitted.add(key)

    for item, live_key in zip(live, live_keys, strict=True):
        if live_key is None or live_key not in by_key:
            out.append(copy.deepcopy(item))
            continue
        while live_key not in emitted and cursor < len(config_keys):
            if config_keys[cursor] not in emitted:
                emit(config_keys[cursor])
            cursor += 1
    for key in config_keys:
        if key not in emitted:
            emit(key)
    return out


def _live_key(item: Any, keys: tuple[str, ...]) -> str | None:
    """A stored element's key; one without its keys is kept where it is, never matched."""
    if not isinstance(item, Mapping):
        return None
    try:
        return fieldsets.key_element(item, keys)
    except fieldsets.MissingKeyError:
        return None


def _typed_error(gvk: str, detail: str) -> ApiError:
    return ApiError(
        500,
        "InternalError",
        f"Internal error occurred: failed to create typed patch object ({gvk}): {detail}",
    )


# ------------------------------------------------------------------------------------ prune
def _prune(obj: Obj, paths: set[Path], owned: set[Path], kind: str) -> None:
    """Remove the fields at ``paths`` (a path ending in ``.`` removes the element itself), and
    the maps, lists and structs left empty by it, as the field manager drops what nobody owns.
    A struct's field (or a map field) something below is still owned stays: only its unowned
    parts go. A list element goes whole, with what others own inside it."""
    kept_parents = {
        path[:end] for path in owned for end in range(1, len(path)) if path[end - 1] != SELF
    }
    targets = {path[:-1] if path and path[-1] == SELF else path for path in paths}
    for target in sorted(targets, key=lambda t: (len(t), t)):
        if not target or (target[-1].startswith("f:") and target in kept_parents):
            continue
        _remove(obj, target, kind, ())


def _remove(node: Any, path: Path, kind: str, names: Names) -> bool:
    """Remove ``path`` below ``node``; whether something was removed. The keys of an element
    that stays are never removed (another manager still owns the element)."""
    element, rest = path[0], path[1:]
    prefix, _, detail = element.partition(":")
    if prefix == "f" and isinstance(node, dict) and detail in node:
        if not rest:
            del node[detail]
            return True
        child = node[detail]
        removed = _remove(child, rest, kind, (*names, detail))
        if removed and isinstance(child, dict | list) and not child:
            del node[detail]
        return removed
    if prefix in ("k", "v") and isinstance(node, list):
        index = _find(node, element, kind, names)
        if index is None:
            return False
        if not rest:
            del node[index]
            return True
        keys = fieldsets.list_keys(kind, names) or ()
        if rest[0] in {fieldsets.field_element(key) for key in keys}:
            return False
        child = node[index]
        removed = _remove(child, rest, kind, names)
        if removed and isinstance(child, dict | list) and not child:
            del node[index]
        return removed
    return False


def _find(items: list[Any], element: str, kind: str, names: Names) -> int | None:
    keys = fieldsets.list_keys(kind, names) if names else None
    for index, item in enumerate(items):
        if element.startswith("v:"):
            if fieldsets.value_element(item) == element:
                return index
            continue
        if keys is None or not isinstance(item, Mapping):
            continue
        try:
            if fieldsets.key_element(item, keys) == element:
                return index
        except fieldsets.MissingKeyError:
            continue
    return None
