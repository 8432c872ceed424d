"""The three patch formats the API server accepts, with the real server's semantics.

Strategic merge patch needs to know, for each list, whether it is replaced whole or merged by a
key; the real server reads that from the Go types' ``patchStrategy``/``patchMergeKey`` tags. The
tables below carry those tags for the fields of the served types, so ``kubectl taint`` (taints are
replaced whole), ``kubectl patch`` of finalizers (merged as a set) and condition updates (merged
by ``type``) behave as they do against a real cluster.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch

from nodefence_sim.errors import ApiError, bad_request

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

# Lists merged by a key field, by field name (the same tag on every type that has the field).
MERGE_KEYS: dict[str, str] = {
    "conditions": "type",
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "imagePullSecrets": "name",
    "ports": "containerPort",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ownerReferences": "uid",
    "addresses": "type",
    "hostAliases": "ip",
}
# Lists of scalars merged as a set: (parent field, field).
PRIMITIVE_SETS: frozenset[tuple[str, str]] = frozenset({("metadata", "finalizers")})

_DIRECTIVE = "$patch"
_DELETE_PRIMITIVE = "$deleteFromPrimitiveList/"
_SET_ORDER = "$setElementOrder/"
_RETAIN_KEYS = "$retainKeys"


def apply_patch(content_type: str, current: dict[str, Any], body: bytes) -> dict[str, Any]:
    """The object ``current`` becomes after the patch ``body`` of ``content_type``."""
    media = content_type.split(";", 1)[0].strip().lower()
    if media == APPLY_PATCH:
        raise ApiError(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: "
            f"{JSON_PATCH}, {MERGE_PATCH}, {STRATEGIC_MERGE_PATCH} (the simulated API server "
            "serves server-side apply on objects and their status, not on the scale "
            "subresource)",
        )
    if media not in (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH):
        raise ApiError(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format - accepted media types include: "
            f"{JSON_PATCH}, {MERGE_PATCH}, {STRATEGIC_MERGE_PATCH}, {APPLY_PATCH}",
        )
    try:
        patch = json.loads(body or b"null")
    except ValueError as exc:
        raise bad_request(f"error decoding patch: {exc}") from exc
    if media == JSON_PATCH:
        return json_patch(current, patch)
    if not isinstance(patch, dict):
        raise bad_request(
            "json: cannot unmarshal patch into Go value of type map[string]interface {}"
        )
    if media == MERGE_PATCH:
        result = merge_patch(current, patch)
    else:
        result = strategic_merge(current, patch, "")
    if not isinstance(result, dict):
        raise bad_request("patch did not produce an object")
    return result


def json_patch(current: dict[str, Any], patch: Any) -> dict[str, Any]:
    """RFC 6902. A failed ``test`` or a missing path is a 422 whose message says only that the
    request was rejected, as the real server's is (it drops the underlying error)."""
    if not isinstance(patch, list):
        raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    try:
        compiled = jsonpatch.JsonPatch(patch)
    except (jsonpatch.InvalidJsonPatch, TypeError) as exc:
        raise bad_request(str(exc)) from exc
    try:
        result = compiled.apply(copy.deepcopy(current))
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, KeyError, IndexError):
        raise ApiError(
            422, "Invalid", "the server rejected our request due to an error in our request"
        ) from None
    if not isinstance(result, dict):
        raise ApiError(
            422, "Invalid", "the server rejected our request due to an error in our request"
        )
    return result


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge(target: Any, patch: dict[str, Any], parent: str) -> Any:
    """Strategic merge of a map ``patch`` into ``target`` (the field it sits in is ``parent``)."""
    directive = patch.get(_DIRECTIVE)
    if directive == "delete":
        return None
    body = {k: v for k, v in patch.items() if k not in (_DIRECTIVE, _RETAIN_KEYS)}
    if directive == "replace":
        return _strip_directives(body)
    if directive is not None:
        raise bad_request(f"Unknown patch type: {directive}")
    result: dict[str, Any] = copy.deepcopy(target) if isinstance(target, dict) else {}
    retain = patch.get(_RETAIN_KEYS)
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    deletions: dict[str, list[Any]] = {}
    for key, value in body.items():
        if key.startswith(_DELETE_PRIMITIVE):
            deletions[key[len(_DELETE_PRIMITIVE) :]] = list(value or [])
            continue
        if key.startswith(_SET_ORDER):
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            merged = strategic_merge(result.get(key), value, key)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            result[key] = _merge_list(result.get(key), value, parent, key)
        else:
            result[key] = value
    for key, removed in deletions.items():
        if isinstance(result.get(key), list):
            result[key] = [item for item in result[key] if item not in removed]
    return result


def _merge_list(current: Any, patch: list[Any], parent: str, field: str) -> list[Any]:
    existing = list(current) if isinstance(current, list) else []
    if (parent, field) in PRIMITIVE_SETS:
        merged = list(existing)
        for item in patch:
            if item not in merged:
                merged.append(item)
        return merged
    key = MERGE_KEYS.get(field)
    if key is None or not all(isinstance(item, dict) for item in patch):
        return [_strip_directives(item) for item in patch]
    if any(isinstance(item, dict) and item.get(_DIRECTIVE) == "replace" for item in patch):
        return [
            _strip_directives(item)
            for item in patch
            if not (isinstance(item, dict) and item.get(_DIRECTIVE) == "replace")
        ]
    merged = copy.deepcopy(existing)
    for item in patch:
        if key not in item:
            raise bad_request(f"map: {item} does not contain declared merge key: {key}")
        index = next(
            (
                i
                for i, old in enumerate(merged)
                if isinstance(old, dict) and old.get(key) == item[key]
            ),
            None,
        )
        if item.get(_DIRECTIVE) == "delete":
            if index is not None:
                del merged[index]
            continue
        if index is None:
            merged.append(_strip_directives(item))
        else:
            merged[index] = strategic_merge(merged[index], item, field)
    return merged


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_directives(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value
