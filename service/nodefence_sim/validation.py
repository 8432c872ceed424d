"""Object validation the real API server performs and clients depend on being refused.

Only what a fencing tool can get wrong is checked: a Node's taints, as ``validateNodeTaints`` in
``pkg/apis/core/validation`` does on create and update. A simulator that stored a duplicate or
misspelt taint would let a client believe a write succeeded that a real cluster rejects with 422.
The messages and causes are the real server's, so a client's error handling sees what it will
see in production.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from nodefence_sim.errors import ApiError

TAINT_EFFECTS = ("NoExecute", "NoSchedule", "PreferNoSchedule")

_QUALIFIED_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QUALIFIED_NAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character"
)
_LABEL_VALUE_FMT = f"({_QUALIFIED_NAME_FMT})?"
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character"
)
_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT = rf"{_DNS1123_LABEL_FMT}(\.{_DNS1123_LABEL_FMT})*"
_DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character"
)
_NAME_MAX = 63
_SUBDOMAIN_MAX = 253


def _regex_error(message: str, fmt: str, *examples: str) -> str:
    """``validation.RegexError``, whose examples are joined exactly as Go joins them."""
    listed = " or ".join(f"'{e}', " for e in examples)
    return f"{message} (e.g. {listed}regex used for validation is '{fmt}')"


def _full(pattern: str, value: str) -> bool:
    return re.fullmatch(pattern, value) is not None


def qualified_name_errors(value: str) -> list[str]:
    """``validation.IsQualifiedName``: an optional DNS subdomain prefix and ``/``, then a name."""
    parts = value.split("/")
    errors: list[str] = []
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errors.append("prefix part must be non-empty")
        elif len(prefix) > _SUBDOMAIN_MAX:
            errors.append(f"prefix part must be no more than {_SUBDOMAIN_MAX} characters")
        elif not _full(_DNS1123_SUBDOMAIN_FMT, prefix):
            errors.append(
                "prefix part "
                + _regex_error(_DNS1123_SUBDOMAIN_MSG, _DNS1123_SUBDOMAIN_FMT, "example.com")
            )
    else:
        return [
            "a qualified name "
            + _regex_error(_QUALIFIED_NAME_MSG, _QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errors.append("name part must be non-empty")
    elif len(name) > _NAME_MAX:
        errors.append(f"name part must be no more than {_NAME_MAX} characters")
    # Go's IsQualifiedName: an empty name fails the pattern too, and says so as well.
    if not _full(_QUALIFIED_NAME_FMT, name):
        errors.append(
            "name part "
            + _regex_error(_QUALIFIED_NAME_MSG, _QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
        )
    return errors


def label_value_errors(value: str) -> list[str]:
    """``validation.IsValidLabelValue``."""
    errors: list[str] = []
    if len(value) > _NAME_MAX:
        errors.append(f"must be no more than {_NAME_MAX} characters")
    if not _full(_LABEL_VALUE_FMT, value):
        errors.append(
            _regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345")
        )
    return errors


def _go_quote(value: Any) -> str:
    return json.dumps(value if isinstance(value, str) else str(value), ensure_ascii=False)


def _taint_repr(taint: Mapping[str, Any]) -> str:
    """How ``field.Duplicate`` prints the offending ``core.Taint`` (Go's ``%#v``)."""
    added = f"(*v1.Time)({taint.get('timeAdded') or 'nil'})"
    return (
        f"core.Taint{{Key:{_go_quote(taint.get('key', ''))}, "
        f"Value:{_go_quote(taint.get('value', ''))}, "
        f"Effect:{_go_quote(taint.get('effect', ''))}, TimeAdded:{added}}}"
    )


def taint_causes(taints: Any, path: str = "spec.taints") -> list[dict[str, str]]:
    """The field errors ``validateNodeTaints`` reports, as Status causes."""
    causes: list[dict[str, str]] = []

    def add(reason: str, field: str, message: str) -> None:
        causes.append({"reason": reason, "message": message, "field": field})

    if not isinstance(taints, list):
        return causes
    seen: set[tuple[str, str]] = set()
    for index, taint in enumerate(taints):
        at = f"{path}[{index}]"
        if not isinstance(taint, Mapping):
            add("FieldValueInvalid", at, "Invalid value: a taint must be an object")
            continue
        key = str(taint.get("key") or "")
        value = str(taint.get("value") or "")
        effect = str(taint.get("effect") or "")
        for message in qualified_name_errors(key):
            add("FieldValueInvalid", f"{at}.key", f"Invalid value: {_go_quote(key)}: {message}")
        for message in label_value_errors(value):
            add("FieldValueInvalid", f"{at}.value", f"Invalid value: {_go_quote(value)}: {message}")
        if not effect:
            add("FieldValueRequired", f"{at}.effect", "Required value")
        elif effect not in TAINT_EFFECTS:
            supported = ", ".join(_go_quote(e) for e in TAINT_EFFECTS)
            add(
                "FieldValueNotSupported",
                f"{at}.effect",
                f"Unsupported value: {_go_quote(effect)}: supported values: {supported}",
            )
        if (key, effect) in seen:
            add(
                "FieldValueDuplicate",
                at,
                f"Duplicate value: {_taint_repr(taint)}: taints must be unique by key and "
                "effect pair",
            )
            continue
        seen.add((key, effect))
    return causes


def validate_node(node: Mapping[str, Any]) -> None:
    """Refuse a Node the real server would refuse, with its 422 ``Invalid`` Status."""
    spec = node.get("spec") or {}
    causes = taint_causes(spec.get("taints") if isinstance(spec, Mapping) else None)
    if not causes:
        return
    name = str((node.get("metadata") or {}).get("name", ""))
    errors = [f"{c['field']}: {c['message']}" for c in causes]
    listed = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
    raise ApiError(
        422,
        "Invalid",
        f'Node "{name}" is invalid: {listed}',
        kind="Node",
        name=name,
        causes=causes,
    )


# ``pkg/apis/core/validation/events.go``: the limits of an Event that carries an eventTime.
_EVENT_FIELD_LIMIT = 128
_EVENT_NOTE_LIMIT = 1024


def event_causes(event: Mapping[str, Any], namespace: str) -> list[dict[str, str]]:
    """The field errors ``legacyValidateEvent`` reports for an Event created or updated
    through core/v1, as Status causes, in its order. An Event without ``eventTime`` (the form
    most clients write) must be in its involved object's namespace, or, about an object
    without one (a Node), in ``default`` (or no namespace); one with ``eventTime`` must also
    name its reporter and action."""
    causes: list[dict[str, str]] = []

    def invalid(field: str, value: str, message: str) -> None:
        causes.append(
            {
                "reason": "FieldValueInvalid",
                "message": f"Invalid value: {_go_quote(value)}: {message}",
                "field": field,
            }
        )

    def required(field: str) -> None:
        causes.append({"reason": "FieldValueRequired", "message": "Required value", "field": field})

    involved = event.get("involvedObject")
    involved_ns = str((involved if isinstance(involved, Mapping) else {}).get("namespace") or "")
    mismatch = "does not match event.namespace"
    if not event.get("eventTime"):
        if (not involved_ns and namespace not in ("", "default")) or (
            involved_ns and namespace != involved_ns
        ):
            invalid("involvedObject.namespace", involved_ns, mismatch)
        return causes
    if not involved_ns and namespace not in ("default", "kube-system"):
        invalid("involvedObject.namespace", involved_ns, mismatch)
    controller = str(event.get("reportingComponent") or "")
    if not controller:
        required("reportingComponent")
    for message in qualified_name_errors(controller):
        invalid("reportingComponent", controller, message)
    limits = (
        ("reportingInstance", _EVENT_FIELD_LIMIT),
        ("action", _EVENT_FIELD_LIMIT),
        ("reason", _EVENT_FIELD_LIMIT),
    )
    for field, limit in limits:
        value = str(event.get(field) or "")
        if not value:
            required(field)
        if len(value) > limit:
            invalid(field, "", f"can have at most {limit} characters")
    if len(str(event.get("message") or "")) > _EVENT_NOTE_LIMIT:
        invalid("message", "", f"can have at most {_EVENT_NOTE_LIMIT} characters")
    return causes


def validate_event(event: Mapping[str, Any]) -> None:
    """Refuse an Event the real server would refuse, with its 422 ``Invalid`` Status."""
    meta = event.get("metadata") or {}
    namespace = str(meta.get("namespace") or "")
    causes = event_causes(event, namespace)
    if not causes:
        return
    name = str(meta.get("name", ""))
    errors = [f"{c['field']}: {c['message']}" for c in causes]
    listed = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
    raise ApiError(
        422,
        "Invalid",
        f'Event "{name}" is invalid: {listed}',
        kind="Event",
        name=name,
        causes=causes,
    )
