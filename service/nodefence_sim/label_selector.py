"""Label selectors as the API server parses them (``k8s.io/apimachinery/pkg/labels``).

The simulated cluster has its own parser, written from the API server's grammar, rather than
the one the rules engine uses: a fake that shared the product's parser would agree with the
product's mistakes, and the tests run against it could never catch them. It follows the real
lexer and recursive-descent parser token for token (``in``/``notin`` are keywords only where an
operator may stand, ``x in ()`` holds the empty value, ``a=`` means the empty value, ``gt`` and
``lt`` compare integers), validates keys and values as ``NewRequirement`` does, and words its
errors as the API server does, so a client sees the same 400 here as on a real cluster.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum, StrEnum


class LabelSelectorError(ValueError):
    """The text is not a label selector the API server accepts; the message is the server's."""


class Operator(StrEnum):
    # The spellings of ``k8s.io/apimachinery/pkg/selection``: error messages list them.
    IN = "in"
    NOT_IN = "notin"
    EQUALS = "="
    DOUBLE_EQUALS = "=="
    NOT_EQUALS = "!="
    GREATER_THAN = "gt"
    LESS_THAN = "lt"
    EXISTS = "exists"
    DOES_NOT_EXIST = "!"


BINARY_OPERATORS = ", ".join(
    op.value
    for op in (
        Operator.IN,
        Operator.NOT_IN,
        Operator.EQUALS,
        Operator.DOUBLE_EQUALS,
        Operator.NOT_EQUALS,
        Operator.GREATER_THAN,
        Operator.LESS_THAN,
    )
)

_INT64 = re.compile(r"[+-]?[0-9]+")
_INT64_RANGE = range(-(2**63), 2**63)


def _int64(text: str) -> int | None:
    """``strconv.ParseInt(text, 10, 64)``: decimal digits and a sign only (Python's ``int``
    would also take spaces and underscores)."""
    if not _INT64.fullmatch(text):
        return None
    value = int(text)
    return value if value in _INT64_RANGE else None


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        match self.operator:
            case Operator.IN | Operator.EQUALS | Operator.DOUBLE_EQUALS:
                return value is not None and value in self.values
            case Operator.NOT_IN | Operator.NOT_EQUALS:
                return value is None or value not in self.values
            case Operator.EXISTS:
                return value is not None
            case Operator.DOES_NOT_EXIST:
                return value is None
            case Operator.GREATER_THAN | Operator.LESS_THAN:
                have = None if value is None else _int64(value)
                want = _int64(self.values[0]) if len(self.values) == 1 else None
                if have is None or want is None:
                    return False
                return have > want if self.operator is Operator.GREATER_THAN else have < want


@dataclass(frozen=True)
class LabelSelector:
    """All requirements must hold; no requirement at all selects everything."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)


# --------------------------------------------------------------------------- validation
_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_NAME_TEXT = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    f"validation is '{_NAME.pattern}')"
)
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_SUBDOMAIN_TEXT = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    f"for validation is '{_SUBDOMAIN.pattern}')"
)
_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_VALUE_TEXT = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    f"'my_value',  or '12345', regex used for validation is '{_VALUE.pattern}')"
)


def _max_len(limit: int) -> str:
    return f"must be no more than {limit} characters"


def _key_problems(key: str) -> list[str]:
    """``validation.IsQualifiedName``: an optional DNS-subdomain prefix and a name."""
    parts = key.split("/")
    if len(parts) == 1:
        prefix, name = None, parts[0]
    elif len(parts) == 2:
        prefix, name = parts
    else:
        return [
            f"a qualified name {_NAME_TEXT} with an optional DNS subdomain prefix and '/' "
            "(e.g. 'example.com/MyName')"
        ]
    problems: list[str] = []
    if prefix is not None:
        if not prefix:
            problems.append("prefix part must be non-empty")
        else:
            if len(prefix) > 253:
                problems.append(f"prefix part {_max_len(253)}")
            if not _SUBDOMAIN.fullmatch(prefix):
                problems.append(f"prefix part {_SUBDOMAIN_TEXT}")
    if not name:
        problems.append("name part must be non-empty")
    elif len(name) > 63:
        problems.append(f"name part {_max_len(63)}")
    if name and not _NAME.fullmatch(name):
        problems.append(f"name part {_NAME_TEXT}")
    return problems


def _value_problems(value: str) -> list[str]:
    """``validation.IsValidLabelValue``."""
    problems = [_max_len(63)] if len(value) > 63 else []
    if not _VALUE.fullmatch(value):
        problems.append(_VALUE_TEXT)
    return problems


def _invalid(path: str, value: str, problems: list[str]) -> str:
    """A ``field.Invalid`` error as Go prints it (the value quoted with ``%q``)."""
    quoted = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return f"{path}: Invalid value: {quoted}: {'; '.join(problems)}"


def _new_requirement(key: str, operator: Operator, values: list[str]) -> Requirement:
    """``labels.NewRequirement`` with no field path: every problem, aggregated."""
    errors: list[str] = []
    if problems := _key_problems(key):
        errors.append(_invalid("key", key, problems))
    if operator in (Operator.GREATER_THAN, Operator.LESS_THAN):
        errors.extend(
            _invalid(f"values[{i}]", v, ["for 'Gt', 'Lt' operators, the value must be an integer"])
            for i, v in enumerate(values)
            if _int64(v) is None
        )
    errors.extend(
        _invalid(f"values[{i}][{key}]", v, problems)
        for i, v in enumerate(values)
        if (problems := _value_problems(v))
    )
    if errors:
        raise LabelSelectorError(errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]")
    return Requirement(key, operator, tuple(values))


# --------------------------------------------------------------------------------- lexer
class _Token(Enum):
    ERROR = "error"
    END = "end of string"
    CLOSE = ")"
    COMMA = ","
    NOT = "!"
    DOUBLE_EQUALS = "=="
    EQUALS = "="
    GREATER = ">"
    IDENTIFIER = "identifier"
    IN = "in"
    LESS = "<"
    NOT_EQUALS = "!="
    NOT_IN = "notin"
    OPEN = "("


_LITERALS = {t.value: t for t in _Token if t not in (_Token.ERROR, _Token.END, _Token.IDENTIFIER)}
_SPECIAL = frozenset("=!(),><")
_WHITESPACE = frozenset(" \t\r\n")
_WORD_ENDS = _SPECIAL | _WHITESPACE | {"\x00"}


def _lex(text: str) -> list[tuple[_Token, str]]:
    """The whole input as tokens, ending in END. The real lexer reads a NUL as it reads the end
    of the string: where a token would start it ends the input, and it ends (and is swallowed
    by) a word or operator it follows."""
    items: list[tuple[_Token, str]] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos] in _WHITESPACE:
            pos += 1
        if pos >= len(text) or text[pos] == "\x00":
            items.append((_Token.END, ""))
            return items
        if text[pos] in _SPECIAL:
            # The longest run of special characters that still spells an operator.
            found: tuple[_Token, str] | None = None
            end = pos
            while end < len(text) and text[end] in _SPECIAL:
                spelled = text[pos : end + 1]
                if spelled in _LITERALS:
                    found = (_LITERALS[spelled], spelled)
                elif found is not None:
                    break
                end += 1
            if found is None:
                items.append((_Token.ERROR, f"error expected: keyword found '{text[pos:end]}'"))
                pos = end
            else:
                items.append(found)
                pos += len(found[1])
            pos += text.startswith("\x00", pos)
            continue
        end = pos
        while end < len(text) and text[end] not in _WORD_ENDS:
            end += 1
        word = text[pos:end]
        keyword = _LITERALS.get(word)
        items.append(
            (keyword, word) if keyword in (_Token.IN, _Token.NOT_IN) else (_Token.IDENTIFIER, word)
        )
        pos = end + text.startswith("\x00", end)


# -------------------------------------------------------------------------------- parser
class _Parser:
    """Where a value may stand, ``in`` and ``notin`` are plain words (``a in (in)``)."""

    def __init__(self, text: str) -> None:
        self.items = _lex(text)
        self.position = 0

    def _as_value(self, item: tuple[_Token, str]) -> tuple[_Token, str]:
        token, literal = item
        return (_Token.IDENTIFIER, literal) if token in (_Token.IN, _Token.NOT_IN) else item

    def peek(self) -> tuple[_Token, str]:
        return self._as_value(self.items[self.position])

    def take(self, *, operator: bool = False) -> tuple[_Token, str]:
        item = self.items[self.position]
        self.position += 1
        return item if operator else self._as_value(item)

    def parse(self) -> list[Requirement]:
        requirements: list[Requirement] = []
        while True:
            token, literal = self.peek()
            if token is _Token.END:
                return requirements
            if token not in (_Token.IDENTIFIER, _Token.NOT):
                raise LabelSelectorError(
                    f"found '{literal}', expected: !, identifier, or 'end of string'"
                )
            try:
                requirements.append(self.requirement())
            except LabelSelectorError as exc:
                raise LabelSelectorError(f"unable to parse requirement: {exc}") from None
            token, literal = self.take()
            if token is _Token.END:
                return requirements
            if token is not _Token.COMMA:
                raise LabelSelectorError(f"found '{literal}', expected: ',' or 'end of string'")
            after, literal = self.peek()
            if after not in (_Token.IDENTIFIER, _Token.NOT):
                raise LabelSelectorError(f"found '{literal}', expected: identifier after ','")

    def requirement(self) -> Requirement:
        key, inferred = self.key_and_inferred_operator()
        if inferred is not None:
            return _new_requirement(key, inferred, [])
        operator = self.operator()
        if operator in (Operator.IN, Operator.NOT_IN):
            values = self.value_set()
        else:
            values = self.exact_value()
        return _new_requirement(key, operator, sorted(values))

    def key_and_inferred_operator(self) -> tuple[str, Operator | None]:
        operator: Operator | None = None
        token, literal = self.take()
        if token is _Token.NOT:
            operator = Operator.DOES_NOT_EXIST
            token, literal = self.take()
        if token is not _Token.IDENTIFIER:
            raise LabelSelectorError(f"found '{literal}', expected: identifier")
        if problems := _key_problems(literal):
            raise LabelSelectorError(_invalid("<nil>", literal, problems))
        if operator is None and self.peek()[0] in (_Token.END, _Token.COMMA):
            operator = Operator.EXISTS
        return literal, operator

    def operator(self) -> Operator:
        token, literal = self.take(operator=True)
        spelled = {
            _Token.IN: Operator.IN,
            _Token.EQUALS: Operator.EQUALS,
            _Token.DOUBLE_EQUALS: Operator.DOUBLE_EQUALS,
            _Token.GREATER: Operator.GREATER_THAN,
            _Token.LESS: Operator.LESS_THAN,
            _Token.NOT_IN: Operator.NOT_IN,
            _Token.NOT_EQUALS: Operator.NOT_EQUALS,
        }.get(token)
        if spelled is None:
            raise LabelSelectorError(f"found '{literal}', expected: {BINARY_OPERATORS}")
        return spelled

    def value_set(self) -> set[str]:
        token, literal = self.take()
        if token is not _Token.OPEN:
            raise LabelSelectorError(f"found '{literal}' expected: '('")
        token, literal = self.peek()
        if token is _Token.CLOSE:
            self.take()
            return {""}
        if token not in (_Token.IDENTIFIER, _Token.COMMA):
            raise LabelSelectorError(f"found '{literal}', expected: ',', ')' or identifier")
        values = self.identifiers()
        self.take()  # the ')' that ended the list
        return values

    def identifiers(self) -> set[str]:
        """A comma-separated list in which an empty place is the empty value: ``(a,,b)``."""
        values: set[str] = set()
        while True:
            token, literal = self.take()
            if token is _Token.IDENTIFIER:
                values.add(literal)
                after, literal = self.peek()
                if after is _Token.CLOSE:
                    return values
                if after is not _Token.COMMA:
                    raise LabelSelectorError(f"found '{literal}', expected: ',' or ')'")
            elif token is _Token.COMMA:
                if not values:
                    values.add("")
                after = self.peek()[0]
                if after is _Token.CLOSE:
                    values.add("")
                    return values
                if after is _Token.COMMA:
                    values.add("")
            else:
                raise LabelSelectorError(f"found '{literal}', expected: ',', or identifier")

    def exact_value(self) -> set[str]:
        if self.peek()[0] in (_Token.END, _Token.COMMA):
            return {""}
        token, literal = self.take()
        if token is not _Token.IDENTIFIER:
            raise LabelSelectorError(f"found '{literal}', expected: identifier")
        return {literal}


def parse_label_selector(text: str) -> LabelSelector:
    """``labels.Parse``: requirements sorted by key, as the API server keeps them."""
    requirements = _Parser(text).parse()
    return LabelSelector(tuple(sorted(requirements, key=lambda r: r.key)))
