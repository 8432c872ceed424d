"""Label and field selectors with the syntax and semantics of the real API server."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from nodefence.engine.labels import Selector, SelectorError, parse_selector
from nodefence_sim.errors import bad_request


def parse_label_selector(selector: str | None) -> Selector:
    """The same parser the rules engine uses; a bad selector is the API server's 400."""
    try:
        return parse_selector(selector)
    except SelectorError as exc:
        raise bad_request(f"unable to parse requirement: {exc}") from None


def _dig(obj: Mapping[str, Any], path: str) -> str:
    current: Any = obj
    for part in path.split("."):
        if not isinstance(current, Mapping):
            return ""
        current = current.get(part)
    if current is None:
        return ""
    if isinstance(current, bool):
        return "true" if current else "false"
    return str(current)


# Field selectors the real server supports, by kind (metadata.name/namespace for every kind).
SUPPORTED_FIELDS: dict[str, frozenset[str]] = {
    "Pod": frozenset(
        {
            "spec.nodeName",
            "status.phase",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "status.podIP",
            "status.nominatedNodeName",
            "spec.hostNetwork",
        }
    ),
    "Event": frozenset(
        {
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        }
    ),
    "Node": frozenset({"spec.unschedulable"}),
    "Namespace": frozenset({"status.phase"}),
}


def parse_field_selector(selector: str | None, kind: str) -> Callable[[Mapping[str, Any]], bool]:
    if not selector:
        return lambda _obj: True
    allowed = SUPPORTED_FIELDS.get(kind, frozenset()) | {"metadata.name", "metadata.namespace"}
    checks: list[tuple[str, bool, str]] = []
    for part in selector.split(","):
        if not part.strip():
            continue
        if "!=" in part:
            key, value = part.split("!=", 1)
            negate = True
        elif "==" in part:
            key, value = part.split("==", 1)
            negate = False
        elif "=" in part:
            key, value = part.split("=", 1)
            negate = False
        else:
            raise bad_request(f"invalid selector: {selector!r}; can't understand {part!r}")
        key = key.strip()
        if key not in allowed:
            raise bad_request(f"field label not supported: {key}")
        checks.append((key, negate, value.strip()))

    def _source(obj: Mapping[str, Any], key: str) -> str:
        if key == "source":
            return _dig(obj, "source.component") or _dig(obj, "reportingComponent")
        return _dig(obj, key)

    def matches(obj: Mapping[str, Any]) -> bool:
        return all((_source(obj, key) == value) != negate for key, negate, value in checks)

    return matches
