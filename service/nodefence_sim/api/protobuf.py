"""Protobuf request bodies (``application/vnd.kubernetes.protobuf``), decoded into the JSON
object a JSON client would have sent for the same write.

kubectl's generators (``create namespace|configmap|deployment|...``), ``auth can-i`` and
``drain``, like every typed client-go client, send built-in kinds as protobuf and never fall back
to JSON, so a server that cannot read them cannot be driven by them. The body is the
``runtime.Unknown`` envelope behind the ``k8s\\x00`` prefix: the kind's ``TypeMeta`` and the
message's bytes, whose fields the tables of ``proto_schema`` name.

Decoding follows Go's: fields of unknown numbers are dropped, the last of a repeated scalar
wins, and a zero that Go's JSON encoder would have left out is left out, so defaulting sees what
it sees for a JSON body.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from nodefence_sim.api.proto_schema import (
    DELETE_OPTIONS,
    EXTRA_VALUE,
    FIELDS_V1,
    INT_OR_STRING,
    KINDS,
    MESSAGES,
    MICRO_TIME,
    QUANTITY,
    TIME,
    Field,
)
from nodefence_sim.errors import ApiError, bad_request

MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"

VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5
# The wire type of each scalar, as Go's marshaller writes it.
_SCALAR_WIRE = {"string": LENGTH, "bytes": LENGTH, "int32": VARINT, "int64": VARINT, "bool": VARINT}
# Seconds of Go's zero time.Time, which Kubernetes writes for an unset non-pointer Time.
_GO_ZERO_SECONDS = -62135596800


class WireError(ValueError):
    """Bytes that are not a protobuf encoding (truncated, or a wire type Kubernetes never uses)."""


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """The unsigned varint at ``pos`` and the position after it."""
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise WireError("unexpected EOF")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift >= 64:
            raise WireError("integer overflow")


def fields(buf: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of each field of a message: an int for a varint, the
    bytes for a length-delimited or fixed-width field."""
    pos = 0
    while pos < len(buf):
        key, pos = read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise WireError("illegal tag 0")
        if wire == VARINT:
            value, pos = read_varint(buf, pos)
            yield number, wire, value
            continue
        if wire == LENGTH:
            size, pos = read_varint(buf, pos)
        elif wire == FIXED64:
            size = 8
        elif wire == FIXED32:
            size = 4
        else:
            raise WireError(f"illegal wireType {wire} for field {number}")
        if pos + size > len(buf):
            raise WireError("unexpected EOF")
        yield number, wire, buf[pos : pos + size]
        pos += size


def signed(value: int, bits: int) -> int:
    """A varint as Go reads it into an intN: two's complement, truncated to ``bits``."""
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def envelope(body: bytes) -> tuple[str, str, bytes]:
    """(apiVersion, kind, raw message) of a ``runtime.Unknown`` body."""
    if not body.startswith(MAGIC):
        raise WireError("the body does not start with the Kubernetes protobuf prefix k8s\\x00")
    api_version = kind = ""
    raw = b""
    for number, wire, value in fields(body[len(MAGIC) :]):
        if number == 1 and isinstance(value, bytes) and wire == LENGTH:
            for sub, sub_wire, sub_value in fields(value):
                if isinstance(sub_value, bytes) and sub_wire == LENGTH and sub in (1, 2):
                    text = sub_value.decode()
                    api_version, kind = (text, kind) if sub == 1 else (api_version, text)
        elif number == 2 and isinstance(value, bytes):
            raw = value
        elif number == 3 and isinstance(value, bytes) and value:
            raise WireError(f"content encoding {value.decode(errors='replace')!r} is not supported")
    return api_version, kind, raw


def _rfc3339(seconds: int, nanos: int, micro: bool) -> str | None:
    if seconds == _GO_ZERO_SECONDS and not nanos:
        return None
    moment = datetime.fromtimestamp(seconds, UTC)
    if micro:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{nanos // 1000:06d}Z"
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _special(name: str, buf: bytes) -> Any:
    """The JSON of the wrapper types that marshal themselves (Quantity as its string, ...)."""
    values: dict[int, int | bytes] = {}
    items: list[str] = []
    for number, _wire, value in fields(buf):
        if name == EXTRA_VALUE and number == 1 and isinstance(value, bytes):
            items.append(value.decode())
        values[number] = value
    if name == EXTRA_VALUE:
        return items
    if name == QUANTITY:
        text = values.get(1, b"0")
        return text.decode() if isinstance(text, bytes) else "0"
    if name == INT_OR_STRING:
        if values.get(1) == 1:
            text = values.get(3, b"")
            return text.decode() if isinstance(text, bytes) else ""
        int_value = values.get(2, 0)
        return signed(int_value, 32) if isinstance(int_value, int) else 0
    if name in (TIME, MICRO_TIME):
        if not buf:
            return None
        seconds, nanos = values.get(1, 0), values.get(2, 0)
        if not isinstance(seconds, int) or not isinstance(nanos, int):
            raise WireError(f"malformed {name}")
        # Time keeps whole seconds, as Go's Time.Unmarshal does.
        return _rfc3339(signed(seconds, 64), signed(nanos, 32), name == MICRO_TIME)
    if name == FIELDS_V1:
        raw = values.get(1, b"")
        return json.loads(raw) if isinstance(raw, bytes) and raw else {}
    raise WireError(f"no decoder for {name}")


def _scalar(field: Field, wire: int, value: int | bytes) -> Any:
    expected = _SCALAR_WIRE[field.type]
    if wire != expected:
        raise WireError(f"wrong wireType {wire} for field {field.name}")
    if field.type == "string" and isinstance(value, bytes):
        return value.decode()
    if field.type == "bytes" and isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if field.type == "bool":
        return bool(value)
    assert isinstance(value, int)
    return signed(value, 32 if field.type == "int32" else 64)


def _packed(field: Field, value: bytes) -> list[Any]:
    """A repeated integer or bool written packed (one length-delimited run of varints)."""
    out: list[Any] = []
    pos = 0
    while pos < len(value):
        number, pos = read_varint(value, pos)
        out.append(_scalar(field, VARINT, number))
    return out


def _value(field: Field, wire: int, value: int | bytes) -> Any:
    if field.type in _SCALAR_WIRE:
        return _scalar(field, wire, value)
    if wire != LENGTH or not isinstance(value, bytes):
        raise WireError(f"wrong wireType {wire} for field {field.name}")
    return decode_message(field.type, value)


def _is_zero(value: Any) -> bool:
    return value is not None and not isinstance(value, dict | list) and not value


def decode_message(name: str, buf: bytes) -> Any:
    """The JSON value of message ``name`` encoded in ``buf``."""
    table = MESSAGES.get(name)
    if table is None:
        return _special(name, buf)
    out: dict[str, Any] = {}
    for number, wire, value in fields(buf):
        field = table.get(number)
        if field is None:
            continue
        if field.shape == "map":
            if wire != LENGTH or not isinstance(value, bytes):
                raise WireError(f"wrong wireType {wire} for field {field.name}")
            key, item = "", None
            for entry_number, entry_wire, entry_value in fields(value):
                if entry_number == 1 and isinstance(entry_value, bytes):
                    key = entry_value.decode()
                elif entry_number == 2:
                    item = _value(field, entry_wire, entry_value)
            if item is None:
                item = decode_message(field.type, b"") if field.type in MESSAGES else ""
            out.setdefault(field.name, {})[key] = item
        elif field.shape == "list":
            items = out.setdefault(field.name, [])
            if wire == LENGTH and field.type in ("int32", "int64", "bool"):
                assert isinstance(value, bytes)
                items.extend(_packed(field, value))
            else:
                items.append(_value(field, wire, value))
        elif field.shape == "inline":
            out.update(_value(field, wire, value))
        else:
            decoded = _value(field, wire, value)
            if _is_zero(decoded) and not (field.pointer or field.always) and field.type != QUANTITY:
                out.pop(field.name, None)
                continue
            out[field.name] = decoded
    return out


def message_of(api_version: str, kind: str) -> str | None:
    """The message a body of this kind is, or None when the simulator has no table for it."""
    if kind == "DeleteOptions":
        return DELETE_OPTIONS
    return KINDS.get((api_version, kind))


def decode_body(body: bytes) -> dict[str, Any]:
    """The JSON object of a protobuf request body: 400 for bytes that are not a Kubernetes
    protobuf encoding, 415 (as the real server answers a media type it has no serializer for)
    for a kind without a field table."""
    try:
        api_version, kind, raw = envelope(body)
    except (WireError, UnicodeDecodeError) as exc:
        raise bad_request(
            f"the body of the request could not be decoded as protobuf: {exc}"
        ) from exc
    name = message_of(api_version, kind)
    if name is None:
        raise ApiError(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format - accepted media types include: "
            f"application/json (the simulated API server has no protobuf field table for "
            f"{kind or 'an object without a kind'} in {api_version or 'no apiVersion'}; "
            f"send it as JSON)",
        )
    try:
        obj = decode_message(name, raw)
    except (WireError, UnicodeDecodeError, ValueError) as exc:
        raise bad_request(
            f"{kind} in version {json.dumps(api_version.rsplit('/', 1)[-1])} cannot be handled "
            f"as a {kind}: proto: {exc}"
        ) from exc
    assert isinstance(obj, dict)
    return {"kind": kind, "apiVersion": api_version, **obj}
