"""Label and field selectors with the syntax and semantics of the real API server."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from nodefence_sim import label_selector
from nodefence_sim.errors import bad_request
from nodefence_sim.field_selector import FieldSelectorError, parse_field_terms


def parse_label_selector(selector: str | None) -> label_selector.LabelSelector:
    """The simulator's own parser (``label_selector``), not the rules engine's, so that the
    product's parser is tested against an independent one; a bad selector is the API server's
    400."""
    try:
        return label_selector.parse_label_selector(selector or "")
    except label_selector.LabelSelectorError as exc:
        raise bad_request(str(exc)) from None


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
    try:
        terms = parse_field_terms(selector)
    except FieldSelectorError as exc:
        raise bad_request(str(exc)) from None
    for term in terms:
        if term.field not in allowed:
            raise bad_request(f"field label not supported: {term.field}")

    def _source(obj: Mapping[str, Any], key: str) -> str:
        if key == "source":
            return _dig(obj, "source.component") or _dig(obj, "reportingComponent")
        return _dig(obj, key)

    def matches(obj: Mapping[str, Any]) -> bool:
        return all(term.holds(_source(obj, term.field)) for term in terms)

    return matches
