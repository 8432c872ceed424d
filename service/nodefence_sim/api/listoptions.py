"""The ``ListOptions`` of a list or watch as a real server reads them before serving it: decoded
as its parameter codec does, defaulted (``SetListOptionsDefaults``) and checked
(``ValidateListOptions`` of ``apimachinery/pkg/apis/meta/internalversion/validation``), with the
WatchList feature on, as it is by default from Kubernetes 1.34; a refused combination is its 422.

A client that sends a combination a real cluster refuses must see the refusal here too, or it
works against the simulator and fails in production. The defaulting matters as much: a watch
from resourceVersion ``""`` or ``"0"`` that names neither ``sendInitialEvents`` nor
``resourceVersionMatch`` is served as a streaming list, so with bookmarks allowed it ends its
initial events with the ``k8s.io/initial-events-end`` bookmark too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace

from nodefence_sim.errors import ApiError

_NOT_OLDER_THAN = "NotOlderThan"
_EXACT = "Exact"
_MATCH = "resourceVersionMatch"
_INITIAL = "sendInitialEvents"

# (field, cause reason, message after "<field>: ")
FieldError = tuple[str, str, str]

_NEEDS_RV = "resourceVersionMatch is forbidden unless resourceVersion is provided"
_WITH_CONTINUE = "resourceVersionMatch is forbidden when continue is provided"
_EXACT_AT_ZERO = 'resourceVersionMatch "exact" is forbidden for resourceVersion "0"'
_ON_LIST = "sendInitialEvents is forbidden for list"
_NEEDS_NOT_OLDER_THAN = (
    f"sendInitialEvents requires setting resourceVersionMatch to {_NOT_OLDER_THAN}"
)
_NEEDS_INITIAL = "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"


@dataclass(frozen=True)
class ListOptions:
    """The options that decide what a list or watch serves and where a watch starts."""

    resource_version: str
    resource_version_match: str
    send_initial_events: bool | None
    allow_watch_bookmarks: bool
    continue_token: str


def _flag(query: Mapping[str, str], name: str) -> bool | None:
    """A boolean parameter as the codec decodes it: ``None`` when absent, false for ``0`` or
    ``false`` in any case, true for anything else, the empty value included."""
    value = query.get(name)
    if value is None:
        return None
    return value != "0" and value.lower() != "false"


def _decode(query: Mapping[str, str], watch: bool) -> ListOptions:
    """The options as the server sees them after ``SetListOptionsDefaults``."""
    options = ListOptions(
        resource_version=query.get("resourceVersion", ""),
        resource_version_match=query.get(_MATCH, ""),
        send_initial_events=_flag(query, _INITIAL),
        allow_watch_bookmarks=bool(_flag(query, "allowWatchBookmarks")),
        continue_token=query.get("continue", ""),
    )
    legacy = options.resource_version in ("", "0")
    if (
        watch
        and legacy
        and options.send_initial_events is None
        and not options.resource_version_match
    ):
        return replace(options, resource_version_match=_NOT_OLDER_THAN, send_initial_events=True)
    return options


def _forbidden(field: str, detail: str) -> FieldError:
    return (field, "FieldValueForbidden", f"Forbidden: {detail}")


def _unsupported(field: str, value: str, supported: tuple[str, ...]) -> FieldError:
    """``field.NotSupported``: the value and the choices in double quotes (Go's ``%q``)."""
    listed = ", ".join(json.dumps(s, ensure_ascii=False) for s in supported)
    shown = json.dumps(value, ensure_ascii=False)
    return (
        field,
        "FieldValueNotSupported",
        f"Unsupported value: {shown}: supported values: {listed}",
    )


def _list_errors(options: ListOptions) -> list[FieldError]:
    """What a list (or a collection delete) may not combine."""
    errors: list[FieldError] = []
    match, rv = options.resource_version_match, options.resource_version
    if match:
        if not rv:
            errors.append(_forbidden(_MATCH, _NEEDS_RV))
        if options.continue_token:
            errors.append(_forbidden(_MATCH, _WITH_CONTINUE))
        if match not in (_EXACT, _NOT_OLDER_THAN):
            errors.append(_unsupported(_MATCH, match, (_EXACT, _NOT_OLDER_THAN, "")))
        if match == _EXACT and rv == "0":
            errors.append(_forbidden(_MATCH, _EXACT_AT_ZERO))
    if options.send_initial_events is not None:
        errors.append(_forbidden(_INITIAL, _ON_LIST))
    return errors


def _watch_errors(options: ListOptions) -> list[FieldError]:
    """What a watch may not combine: ``resourceVersionMatch`` only as ``NotOlderThan`` and only
    with ``sendInitialEvents``, which needs it."""
    errors: list[FieldError] = []
    match = options.resource_version_match
    initial = options.send_initial_events is not None
    if initial and match != _NOT_OLDER_THAN:
        errors.append(_forbidden(_MATCH, _NEEDS_NOT_OLDER_THAN))
    if match:
        if not initial:
            errors.append(_forbidden(_MATCH, _NEEDS_INITIAL))
        if match != _NOT_OLDER_THAN:
            errors.append(_unsupported(_MATCH, match, (_NOT_OLDER_THAN,)))
        if options.continue_token:
            errors.append(_forbidden(_MATCH, _WITH_CONTINUE))
    return errors


def list_options(query: Mapping[str, str], watch: bool) -> ListOptions:
    """The defaulted options of a list (or, with ``watch``, a watch), or the 422
    ``ListOptions.meta.k8s.io "" is invalid`` a real server answers if they do not go together.

    The message names each distinct error once, bracketed when there are several, as
    ``ErrorList.ToAggregate`` prints them; the causes list every one.
    """
    options = _decode(query, watch)
    errors = _watch_errors(options) if watch else _list_errors(options)
    if not errors:
        return options
    rendered = list(dict.fromkeys(f"{field}: {message}" for field, _reason, message in errors))
    listed = rendered[0] if len(rendered) == 1 else "[" + ", ".join(rendered) + "]"
    raise ApiError(
        422,
        "Invalid",
        f'ListOptions.meta.k8s.io "" is invalid: {listed}',
        kind="ListOptions",
        group="meta.k8s.io",
        causes=[{"reason": r, "message": m, "field": f} for f, r, m in errors],
    )
