"""Label and field selectors with the syntax and semantics of the real API server."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nodefence.sim.errors import bad_request

_SET_RE = re.compile(r"^\s*(!?)\s*([A-Za-z0-9._/-]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EXISTS_RE = re.compile(r"^\s*(!?)\s*([A-Za-z0-9._/-]+)\s*$")
_EQ_RE = re.compile(r"^\s*([A-Za-z0-9._/-]+)\s*(==|=|!=)\s*([A-Za-z0-9._-]*)\s*$")


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!exists"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "=":
            return present and value == self.values[0]
        if self.op == "!=":
            return not present or value != self.values[0]
        if self.op == "in":
            return present and value in self.values
        if self.op == "notin":
            return not present or value not in self.values
        if self.op == "exists":
            return present
        return not present


def _split_top_level(selector: str) -> list[str]:
    """Split on commas that are not inside a ``(...)`` value set."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [p for p in parts if p.strip()]


def parse_label_selector(selector: str | None) -> list[Requirement]:
    if not selector:
        return []
    requirements: list[Requirement] = []
    for part in _split_top_level(selector):
        if m := _SET_RE.match(part):
            if m.group(1):
                raise bad_request(f"unable to parse requirement: {part!r}")
            values = tuple(v.strip() for v in m.group(4).split(",") if v.strip())
            requirements.append(Requirement(m.group(2), m.group(3), values))
        elif m := _EQ_RE.match(part):
            op = "!=" if m.group(2) == "!=" else "="
            requirements.append(Requirement(m.group(1), op, (m.group(3),)))
        elif m := _EXISTS_RE.match(part):
            requirements.append(Requirement(m.group(2), "!exists" if m.group(1) else "exists"))
        else:
            raise bad_request(f"unable to parse requirement: {part!r}")
    return requirements


def labels_match(requirements: list[Requirement], labels: Mapping[str, str] | None) -> bool:
    actual = labels or {}
    return all(r.matches(actual) for r in requirements)


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
