"""Field selectors as the API server parses them (``k8s.io/apimachinery/pkg/fields``).

Terms are split on commas that are not escaped, each term at its first ``!=``, ``==`` or ``=``,
and the value unescaped (``\\,``, ``\\=`` and ``\\\\`` stand for themselves; any other escape, or a
bare ``,`` or ``=`` left in a value, is an error). Nothing is trimmed: ``a = b`` names the field
``"a "``, which no kind supports, as on a real cluster. Which fields a kind supports is the
caller's to check, after parsing, as the API server does.
"""

from __future__ import annotations

from dataclasses import dataclass

_OPERATORS = ("!=", "==", "=")


class FieldSelectorError(ValueError):
    """The text is not a field selector the API server accepts; the message is the server's."""


@dataclass(frozen=True)
class FieldTerm:
    field: str
    value: str
    negated: bool = False

    def holds(self, actual: str) -> bool:
        return (actual == self.value) != self.negated


def _split_terms(text: str) -> list[str]:
    """Split on commas not preceded by an escaping backslash; the backslash stays."""
    terms: list[str] = []
    start = 0
    escaped = False
    for i, char in enumerate(text):
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == ",":
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return terms


def _split_term(term: str) -> tuple[str, str, str] | None:
    """At the first place an operator starts (``!=`` before ``==`` before ``=``)."""
    for i in range(len(term)):
        for op in _OPERATORS:
            if term.startswith(op, i):
                return term[:i], op, term[i + len(op) :]
    return None


def _unescape(value: str) -> str:
    out: list[str] = []
    escaped = False
    for char in value:
        if escaped:
            if char not in "\\,=":
                raise FieldSelectorError(
                    f"invalid field selector: invalid escape sequence: \\{char}"
                )
            out.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char in ",=":
            # Go prints the rune with %v: its code point.
            raise FieldSelectorError(
                f"invalid field selector: unescaped character in value: {ord(char)}"
            )
        else:
            out.append(char)
    if escaped:
        raise FieldSelectorError("invalid field selector: invalid escape sequence: \\")
    return "".join(out)


def parse_field_terms(text: str) -> list[FieldTerm]:
    """``fields.ParseSelector``: every term must hold; empty terms are skipped."""
    terms: list[FieldTerm] = []
    for part in sorted(_split_terms(text)) if text else []:
        if part == "":
            continue
        split = _split_term(part)
        if split is None:
            raise FieldSelectorError(f"invalid selector: '{text}'; can't understand '{part}'")
        field, op, raw = split
        terms.append(FieldTerm(field, _unescape(raw), negated=op == "!="))
    return terms
