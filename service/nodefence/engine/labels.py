"""Kubernetes label selectors (equality- and set-based), parsed and matched without I/O.

Rules select nodes with the same selector syntax operators already use with ``kubectl -l``, so
a rule reads like the command that would list the nodes it covers. The parser is strict: a
selector that the API server would reject is a policy error, not a silent "matches nothing".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

# A qualified key: optional DNS-subdomain prefix (lower case, as the API server requires, so a
# rule cannot name a label no node can carry) and a name of at most 63 characters.
_PREFIX = r"(?:[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?/)?"
_KEY = _PREFIX + r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_VALUE = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?"
_SET_RE = re.compile(rf"^({_KEY})\s+(in|notin)\s+\(([^()]*)\)$")
_EQ_RE = re.compile(rf"^({_KEY})\s*(==|=|!=)\s*({_VALUE})$")
_EXISTS_RE = re.compile(rf"^(!?)\s*({_KEY})$")
_VALUE_RE = re.compile(rf"^{_VALUE}$")


class SelectorError(ValueError):
    """The selector is not valid Kubernetes label selector syntax."""


class Operator(StrEnum):
    EQUALS = "="
    NOT_EQUALS = "!="
    IN = "in"
    NOT_IN = "notin"
    EXISTS = "exists"
    DOES_NOT_EXIST = "!"


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        match self.operator:
            case Operator.EQUALS | Operator.IN:
                return value is not None and value in self.values
            case Operator.NOT_EQUALS | Operator.NOT_IN:
                return value is None or value not in self.values
            case Operator.EXISTS:
                return value is not None
            case Operator.DOES_NOT_EXIST:
                return value is None


@dataclass(frozen=True)
class Selector:
    """A conjunction of requirements; the empty selector matches every label set."""

    requirements: tuple[Requirement, ...] = ()
    text: str = ""

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)


def _split_top_level(selector: str) -> list[str]:
    """Split on the commas that separate requirements, not those inside ``in (a, b)``."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise SelectorError(f"unbalanced ')' in selector {selector!r}")
        if char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    if depth != 0:
        raise SelectorError(f"unbalanced '(' in selector {selector!r}")
    parts.append("".join(current).strip())
    return parts


def _parse_requirement(part: str) -> Requirement:
    if not part:
        raise SelectorError("empty requirement (stray comma?)")
    if m := _SET_RE.match(part):
        values = tuple(v.strip() for v in m.group(3).split(","))
        if not values or any(not v or not _VALUE_RE.match(v) for v in values):
            raise SelectorError(f"invalid value set in requirement {part!r}")
        return Requirement(m.group(1), Operator(m.group(2)), tuple(sorted(set(values))))
    if m := _EQ_RE.match(part):
        operator = Operator.NOT_EQUALS if m.group(2) == "!=" else Operator.EQUALS
        return Requirement(m.group(1), operator, (m.group(3),))
    if m := _EXISTS_RE.match(part):
        operator = Operator.DOES_NOT_EXIST if m.group(1) else Operator.EXISTS
        return Requirement(m.group(2), operator)
    raise SelectorError(f"unable to parse requirement {part!r}")


def parse_selector(text: str | None) -> Selector:
    """Parse ``kubectl -l`` syntax: ``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``, ``a notin (x)``,
    ``a``, ``!a``, joined by commas (all must hold)."""
    if text is None or not text.strip():
        return Selector((), "")
    requirements = tuple(_parse_requirement(part) for part in _split_top_level(text.strip()))
    return Selector(requirements, text.strip())
