"""Alertmanager's label matchers, with Alertmanager's semantics.

nodefence judges matchers it did not write: the ones that identify this cluster's alerts on a
shared Alertmanager (``NODEFENCE_ALERTMANAGER_MATCHERS``) and the ones of every silence an
operator set. Both must mean here what they mean to Alertmanager, or a silence that holds the
alert would not hold nodefence: ``=`` and ``!=`` compare the whole value, ``=~`` and ``!~`` are
regular expressions anchored at both ends, and a label the alert does not carry has the empty
value (so ``node!="x"`` matches an alert without a ``node`` label, and ``node=~".*"`` too).

Alertmanager's regular expressions are Go's RE2; Python's ``re`` reads the same syntax for the
patterns people write in silences (classes, alternations, repetitions). A pattern Python cannot
compile is kept, and judged by the caller on the safe side (``Matcher.compiles``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

Operator = Literal["=", "!=", "=~", "!~"]
OPERATORS: tuple[Operator, ...] = ("=~", "!~", "!=", "=")
# A label name as Alertmanager's classic parser takes it; the UTF-8 names newer versions allow
# are written quoted, which ``parse`` accepts too.
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# What one setting or one stored silence may hold: a bound on text read from outside.
MAX_MATCHERS = 32
MAX_VALUE_CHARS = 1024


class MatcherError(ValueError):
    """A matcher list that cannot be read; the message says where and why."""


@lru_cache(maxsize=1024)
def _compiled(pattern: str) -> re.Pattern[str] | None:
    try:
        return re.compile(pattern, re.DOTALL)
    except re.error:
        return None


@dataclass(frozen=True)
class Matcher:
    name: str
    value: str
    op: Operator = "="
    _regex: re.Pattern[str] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.op in {"=~", "!~"}:
            object.__setattr__(self, "_regex", _compiled(self.value))

    @property
    def compiles(self) -> bool:
        """False for a regular expression Python cannot read: its verdict is unknown."""
        return self.op in {"=", "!="} or self._regex is not None

    def matches(self, labels: Mapping[str, str], *, unknown: bool = True) -> bool:
        """Whether the labels satisfy this matcher; ``unknown`` is the answer for a regular
        expression that does not compile, chosen by the caller for its safe side."""
        value = labels.get(self.name, "")
        if self.op == "=":
            return value == self.value
        if self.op == "!=":
            return value != self.value
        if self._regex is None:
            return unknown
        found = self._regex.fullmatch(value) is not None
        return found if self.op == "=~" else not found

    def __str__(self) -> str:
        escaped = self.value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'{self.name}{self.op}"{escaped}"'


def all_match(
    matchers: tuple[Matcher, ...], labels: Mapping[str, str], *, unknown: bool = True
) -> bool:
    return all(m.matches(labels, unknown=unknown) for m in matchers)


def parse(text: str) -> tuple[Matcher, ...]:
    """A comma-separated matcher list in Alertmanager's syntax (``cluster="prod-a"``,
    ``region=~"eu-.*", env!="test"``), optionally in braces, as ``amtool`` and the API's
    ``filter`` take it. Every value is quoted; a regular expression must compile."""
    rest = text.strip()
    if rest.startswith("{") and rest.endswith("}"):
        rest = rest[1:-1].strip()
    found: list[Matcher] = []
    while rest:
        matcher, rest = _one(rest)
        found.append(matcher)
        rest = rest.lstrip()
        if rest.startswith(","):
            rest = rest[1:].lstrip()
            if not rest:
                raise MatcherError("a comma ends the list")
        elif rest:
            raise MatcherError(f"expected a comma before {rest[:20]!r}")
    if len(found) > MAX_MATCHERS:
        raise MatcherError(f"more than {MAX_MATCHERS} matchers")
    return tuple(found)


def _one(text: str) -> tuple[Matcher, str]:
    if text.startswith('"'):
        name, rest = _quoted(text)
    else:
        named = _NAME.match(text)
        if named is None:
            raise MatcherError(f"expected a label name at {text[:20]!r}")
        name, rest = named.group(0), text[named.end() :]
    rest = rest.lstrip()
    op = next((o for o in OPERATORS if rest.startswith(o)), None)
    if op is None:
        raise MatcherError(f"expected =, !=, =~ or !~ after {name!r}")
    rest = rest[len(op) :].lstrip()
    if not rest.startswith('"'):
        raise MatcherError(f"the value of {name!r} must be quoted")
    value, rest = _quoted(rest)
    if len(value) > MAX_VALUE_CHARS:
        raise MatcherError(f"the value of {name!r} is longer than {MAX_VALUE_CHARS} characters")
    matcher = Matcher(name, value, op)
    if not matcher.compiles:
        raise MatcherError(f"the regular expression of {name!r} does not compile: {value!r}")
    return matcher, rest


def _quoted(text: str) -> tuple[str, str]:
    """The double-quoted string at the start of ``text`` (escapes ``\\"``, ``\\\\``, ``\\n``)
    and what follows it."""
    out: list[str] = []
    index = 1
    while index < len(text):
        char = text[index]
        if char == "\\" and index + 1 < len(text):
            following = text[index + 1]
            out.append("\n" if following == "n" else following)
            index += 2
            continue
        if char == '"':
            return "".join(out), text[index + 1 :]
        out.append(char)
        index += 1
    raise MatcherError("a quoted value is not closed")


def equalities(matchers: tuple[Matcher, ...]) -> dict[str, str]:
    """The labels the matchers fix to one value (``name="value"``): the labels an alert of this
    cluster carries for certain, which a silence is judged against."""
    return {m.name: m.value for m in matchers if m.op == "="}
