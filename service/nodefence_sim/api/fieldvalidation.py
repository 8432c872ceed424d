"""Server-side field validation (``fieldValidation=Strict|Warn|Ignore``) of JSON bodies.

A real API server decodes a JSON body into the Go type of its kind: a field the type does not
have is dropped, a field given twice keeps its last value, and a value of the wrong JSON type
fails the request (400). ``fieldValidation`` says what it does about the first two: ``Strict``
refuses the write, ``Warn`` (the default since 1.27) stores it and says so in a ``Warning``
header, ``Ignore`` stays silent. kubectl sends ``Strict`` when the OpenAPI document declares the
parameter, so without this a typo in a manifest is stored on the simulator and refused by a
cluster. The field names and types come from the protobuf tables, which are the Go types'.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from aiohttp import web
from multidict import MultiMapping

from nodefence_sim.api.proto_schema import (
    DELETE_OPTIONS,
    EXTRA_VALUE,
    FIELDS_V1,
    INT_OR_STRING,
    KINDS,
    MESSAGES,
    MICRO_TIME,
    QUANTITY,
    SCALARS,
    TIME,
    Field,
)
from nodefence_sim.errors import ApiError, bad_request
from nodefence_sim.resources import ResourceType

STRICT, WARN, IGNORE = "Strict", "Warn", "Ignore"
# Typed request storage (aiohttp 3.14): a plain string key is warned about on every run.
_WARNINGS = web.RequestKey("nodefence_sim.warnings", list[str])
_MAX_ERRORS = 100
_QUANTITY = re.compile(r"([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)")
_QUANTITY_FORMAT = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
_GO_SCALAR = {"string": "string", "int32": "int32", "int64": "int64", "bool": "bool"}
_INT_RANGE = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
# Struct types that embed TypeMeta, and so take apiVersion and kind, wherever they appear.
_TYPED = frozenset({*KINDS.values(), DELETE_OPTIONS})


class _Pairs(dict[str, Any]):
    """A JSON object that remembers the keys it was given more than once."""

    duplicates: list[str]


def _object_pairs(pairs: list[tuple[str, Any]]) -> _Pairs:
    obj = _Pairs()
    obj.duplicates = []
    for key, value in pairs:
        if key in obj and key not in obj.duplicates:
            obj.duplicates.append(key)
        obj[key] = value
    return obj


def parse(raw: bytes) -> Any:
    """JSON with duplicate keys noted (the last value wins, as in Go)."""
    return json.loads(raw, object_pairs_hook=_object_pairs)


def directive(query: MultiMapping[str]) -> str:
    value = query.get("fieldValidation", WARN) or WARN
    if value not in (STRICT, WARN, IGNORE):
        raise bad_request(
            f"fieldValidation parameter unsupported: {value!r}; supported values: "
            f"{IGNORE!r}, {WARN!r}, {STRICT!r}"
        )
    return value


class _TypeError(Exception):
    """Go's ``json.UnmarshalTypeError``: the first value of a wrong JSON type."""

    def __init__(self, value: Any, go_type: str, struct: str, path: list[str]) -> None:
        what = value if isinstance(value, _Number) else _json_kind(value)
        super().__init__(
            f"json: cannot unmarshal {what} into Go struct field {struct}.{'.'.join(path)} "
            f"of type {go_type}"
        )


class _Number(str):
    """How Go names a number that does not fit the integer it is decoded into."""


class _PlainError(Exception):
    """A type's own UnmarshalJSON refusing a value (a Quantity that is not one)."""


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return "number"


def _go_type(field: Field, element: bool) -> str:
    """The Go type Go's decoder names in its error (the element's for a list item)."""
    if field.type in MESSAGES or field.type in (QUANTITY, INT_OR_STRING, TIME, MICRO_TIME):
        base = ".".join(field.type.split(".")[-2:])
    elif field.type == "bytes":
        base = "[]uint8"
    else:
        base = _GO_SCALAR.get(field.type, field.type)
    if field.go_type:
        base = field.go_type
    if element or not field.shape or field.shape == "inline":
        return base
    return f"[]{base}" if field.shape == "list" else f"map[string]{base}"


def _json_fields(message: str) -> dict[str, Field]:
    """The JSON keys of a message, the fields of its embedded structs flattened in."""
    out: dict[str, Field] = {}
    for field in MESSAGES[message].values():
        if field.shape == "inline":
            out.update(_json_fields(field.type))
        else:
            out[field.name] = field
    return out


_FIELDS: dict[str, dict[str, Field]] = {name: _json_fields(name) for name in MESSAGES}


class _Walk:
    """One pass over a body: the pruned object, its strict errors, or the first type error."""

    def __init__(self) -> None:
        self.strict: list[str] = []

    def _note(self, message: str) -> None:
        if message not in self.strict and len(self.strict) < _MAX_ERRORS:
            self.strict.append(message)

    def _duplicates(self, obj: Mapping[str, Any], where: str) -> None:
        for key in getattr(obj, "duplicates", ()):
            self._note(f'duplicate field "{where}{key}"')

    def free(self, value: Any, where: str) -> Any:
        """Untyped JSON (a FieldsV1), kept as given, its duplicates still reported."""
        if isinstance(value, dict):
            self._duplicates(value, where + "." if where else "")
            return {k: self.free(v, f"{where}.{k}" if where else k) for k, v in value.items()}
        if isinstance(value, list):
            return [self.free(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return value

    def message(
        self, obj: dict[str, Any], message: str, where: str, path: list[str], top: bool
    ) -> dict[str, Any]:
        known = _FIELDS[message]
        struct = message.rsplit(".", 1)[-1]
        prefix = where + "." if where else ""
        self._duplicates(obj, prefix)
        out: dict[str, Any] = {}
        for key, value in obj.items():
            field = known.get(key)
            if field is None:
                if key in ("apiVersion", "kind") and (top or message in _TYPED):
                    if value is not None and not isinstance(value, str):
                        raise _TypeError(value, "string", struct, [*path, key])
                    out[key] = value
                else:
                    self._note(f'unknown field "{prefix}{key}"')
                continue
            out[key] = self.field(field, value, prefix + key, [*path, key], struct)
        return out

    def field(self, field: Field, value: Any, where: str, path: list[str], struct: str) -> Any:
        if value is None:
            return None
        if field.shape == "list":
            if not isinstance(value, list):
                raise _TypeError(value, _go_type(field, False), struct, path)
            return [
                self.single(field, item, f"{where}[{i}]", path, struct)
                for i, item in enumerate(value)
            ]
        if field.shape == "map":
            if not isinstance(value, dict):
                raise _TypeError(value, _go_type(field, False), struct, path)
            self._duplicates(value, where + ".")
            return {
                key: self.single(field, item, f"{where}.{key}", path, struct)
                for key, item in value.items()
            }
        return self.single(field, value, where, path, struct)

    def single(self, field: Field, value: Any, where: str, path: list[str], struct: str) -> Any:
        """One value of the field's type (an element, for a list or map)."""
        kind = field.type
        if value is None:
            return None
        if kind in SCALARS:
            if kind in ("string", "bytes"):
                ok = isinstance(value, str)
            elif kind == "bool":
                ok = isinstance(value, bool)
            else:
                ok = isinstance(value, int) and not isinstance(value, bool)
                low, high = _INT_RANGE[kind]
                if (ok and not low <= value <= high) or isinstance(value, float):
                    raise _TypeError(
                        _Number(f"number {value}"), _go_type(field, True), struct, path
                    )
            if not ok:
                raise _TypeError(value, _go_type(field, True), struct, path)
            return value
        if kind == QUANTITY:
            text = value if isinstance(value, str) else json.dumps(value)
            if not _QUANTITY.fullmatch(text.strip()):
                raise _PlainError(_QUANTITY_FORMAT)
            return value
        if kind == INT_OR_STRING:
            if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
                return value
            raise _TypeError(value, "int32", struct, path)
        if kind in (TIME, MICRO_TIME):
            if not isinstance(value, str):
                raise _TypeError(value, "string", struct, path)
            return value
        if kind == FIELDS_V1:
            return self.free(value, where)
        if kind == EXTRA_VALUE:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise _TypeError(value, "v1.ExtraValue", struct, path)
            return list(value)
        if not isinstance(value, dict):
            raise _TypeError(value, _go_type(field, True), struct, path)
        return self.message(value, kind, where, path, False)


def _describe(value: Any) -> str:
    """A value as Go's ``%+v`` prints a ``map[string]interface{}`` (keys sorted)."""
    if isinstance(value, dict):
        inner = " ".join(f"{k}:{_describe(value[k])}" for k in sorted(value))
        return f"map[{inner}]"
    if isinstance(value, list):
        return "[" + " ".join(_describe(v) for v in value) + "]"
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _warn(request: web.Request, messages: list[str]) -> None:
    request.setdefault(_WARNINGS, []).extend(messages)


def message_of(rt: ResourceType, subresource: str = "") -> str | None:
    if subresource == "scale":
        return KINDS.get(("autoscaling/v1", "Scale"))
    return KINDS.get((rt.group_version, rt.kind))


def check_object(request: web.Request, rt: ResourceType, body: Any) -> Any:
    """A create's or update's JSON body as the Go decoder leaves it: unknown fields dropped (or
    refused, under Strict), a wrong type refused whatever the directive."""
    message = message_of(rt)
    if message is None or not isinstance(body, dict):
        return body
    mode = directive(request.query)
    walk = _Walk()
    kind = body.get("kind") if isinstance(body.get("kind"), str) and body.get("kind") else rt.kind
    version = body.get("apiVersion") if isinstance(body.get("apiVersion"), str) else ""
    version = (version or rt.group_version).rsplit("/", 1)[-1]
    prefix = f"{kind} in version {json.dumps(version)} cannot be handled as a {rt.kind}: "
    try:
        pruned = walk.message(body, message, "", [], True)
    except (_TypeError, _PlainError) as exc:
        raise bad_request(prefix + str(exc)) from None
    if walk.strict and mode == STRICT:
        raise bad_request(prefix + "strict decoding error: " + ", ".join(walk.strict))
    if mode == WARN:
        _warn(request, walk.strict)
    return pruned


def _strip_directives(value: Any) -> Any:
    """A strategic merge patch without its ``$patch``/``$setElementOrder`` directives, which
    are not fields of the type."""
    if isinstance(value, dict):
        out = _Pairs({k: _strip_directives(v) for k, v in value.items() if not k.startswith("$")})
        out.duplicates = list(getattr(value, "duplicates", []))
        return out
    if isinstance(value, list):
        return [_strip_directives(v) for v in value if not _is_directive(v)]
    return value


def _is_directive(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"$patch"}


def check_patch(
    request: web.Request, rt: ResourceType, subresource: str, media: str, raw: bytes
) -> bytes:
    """A merge or strategic merge patch's body, its unknown fields dropped: the real server
    checks the patched object, and a stored object has none of its own, so the patch's are the
    ones it finds. Under Strict they are a 422 naming the patch, as the real one is."""
    message = message_of(rt, subresource)
    if message is None or media not in (
        "application/merge-patch+json",
        "application/strategic-merge-patch+json",
    ):
        return raw
    mode = directive(request.query)
    try:
        patch = parse(raw or b"null")
    except ValueError:
        return raw
    if not isinstance(patch, dict):
        return raw
    walk = _Walk()
    strategic = media == "application/strategic-merge-patch+json"
    checked = _strip_directives(patch) if strategic else patch
    try:
        walk.message(checked, message, "", [], True)
    except (_TypeError, _PlainError) as exc:
        raise _invalid_patch(patch, strategic, str(exc)) from None
    if not walk.strict:
        return raw
    if mode == STRICT:
        raise _invalid_patch(patch, strategic, "strict decoding error: " + ", ".join(walk.strict))
    if mode == WARN:
        _warn(request, walk.strict)
    return json.dumps(_prune(patch, message)).encode()


def _prune(value: Any, message: str) -> Any:
    """The patch with only the fields (and directives) the type has."""
    known = _FIELDS[message]
    out: dict[str, Any] = {}
    for key, item in value.items():
        field = known.get(key)
        if key.startswith("$") or key in ("apiVersion", "kind"):
            out[key] = item
        elif field is not None:
            out[key] = _prune_field(field, item)
    return out


def _prune_field(field: Field, value: Any) -> Any:
    if field.type not in MESSAGES:
        return value
    if field.shape == "list" and isinstance(value, list):
        return [_prune(v, field.type) if isinstance(v, dict) else v for v in value]
    if field.shape == "map" and isinstance(value, dict):
        return {k: _prune(v, field.type) if isinstance(v, dict) else v for k, v in value.items()}
    return _prune(value, field.type) if isinstance(value, dict) else value


def _invalid_patch(patch: Any, strategic: bool, detail: str) -> ApiError:
    shown = _describe(patch) if strategic else json.dumps(patch, separators=(",", ":"))
    message = f"Invalid value: {json.dumps(shown)}: {detail}"
    return ApiError(
        422,
        "Invalid",
        f' "" is invalid: patch: {message}',
        causes=[{"reason": "FieldValueInvalid", "message": message, "field": "patch"}],
    )


def add_warning_headers(app: web.Application) -> None:
    """Each strict decoding warning of a request as its own ``Warning: 299`` header, which
    kubectl prints as ``Warning: unknown field "spec.foo"``."""

    async def headers(request: web.Request, response: web.StreamResponse) -> None:
        for message in request.get(_WARNINGS, ()):
            response.headers.add("Warning", f"299 - {json.dumps(message)}")

    app.on_response_prepare.append(headers)
