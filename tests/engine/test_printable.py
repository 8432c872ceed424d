"""Text from outside, as a terminal is shown it: every control, bidirectional formatting and
line-breaking character as a visible escape; everything else, non-ASCII letters included, as
it is; escaping twice changes nothing."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from nodefence.engine.printable import printable, printable_lines, terminal_safe

UNSAFE = (
    [chr(c) for c in range(0x20)]
    + [chr(c) for c in range(0x7F, 0xA0)]
    + ["\u061c", "\u200e", "\u200f", "\u2028", "\u2029"]
    + [chr(c) for c in range(0x202A, 0x202F)]
    + [chr(c) for c in range(0x2066, 0x206A)]
)


def test_each_unsafe_character_is_shown_as_an_escape() -> None:
    assert printable("\x1b]52;c;aGk=\x07") == "\\x1b]52;c;aGk=\\x07"
    assert printable("a\rb\nc\td") == "a\\rb\\nc\\td"
    assert printable("\x9b2J\x7f\u202eevil\u2066") == "\\x9b2J\\x7f\\u202eevil\\u2066"
    for char in UNSAFE:
        shown = printable(char)
        assert shown.startswith("\\"), repr(char)
        assert shown.isascii(), repr(char)
        assert shown.isprintable(), repr(char)


def test_the_writer_keeps_newlines_and_escapes_the_rest() -> None:
    assert terminal_safe("one\x1b[2J\ntwo\r") == "one\\x1b[2J\ntwo\\r"


def test_a_newline_inside_a_line_is_escaped_between_lines_kept() -> None:
    assert printable_lines(["first", "second\nforged"]) == "first\nsecond\\nforged"


@given(st.text())
def test_nothing_unsafe_survives_and_twice_is_once(text: str) -> None:
    shown = printable(text)
    assert not any(char in shown for char in UNSAFE)
    assert printable(shown) == shown
    if not any(char in text for char in UNSAFE):
        assert shown == text
