"""Text from outside nodefence, made safe to show a person on a terminal.

Much of what nodefence shows was written by someone else: a node's own credentials write its
Ready condition's reason and message, a BMC reports a UUID, a fence agent prints its error,
whoever may edit a ConfigMap writes a pause reason. A terminal obeys the control characters in
such text: ``ESC ] 52`` writes the operator's clipboard, a carriage return lets a forged line
("Node compute01 is Ready; never fenced") overwrite the real one, bidirectional overrides make a
line read in another order than it is stored. So every human output shows them as visible
escapes (``\\x1b``, ``\\r``, ``\\u202e``) instead; JSON output keeps the exact value (its encoder
escapes them already).

Two forms: :func:`printable` escapes every such character, newline included, for one line of a
report (a newline inside a value would start a forged line of its own); :func:`terminal_safe`
keeps newlines, for the writer every command's output goes through
(``nodefence.commands.output``), which cannot tell a line the program ended from one a value
ended. Pure functions: this module only turns text into text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# C0 controls, DEL and C1 controls (a terminal reads 0x9b as CSI, as ESC [), then the
# bidirectional formatting characters (Arabic letter mark, LRM/RLM, the embeddings and overrides
# U+202A-U+202E, the isolates U+2066-U+2069) and the line and paragraph separators.
_CONTROLS = "\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_ANY = re.compile(f"[\n{_CONTROLS}]")
_BUT_NEWLINE = re.compile(f"[{_CONTROLS}]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _visible(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` as one line a terminal shows and never obeys: every control, bidirectional
    formatting and line-breaking character written as a visible escape. Text without any is
    returned as it is, so applying this twice changes nothing."""
    return _ANY.sub(_visible, text)


def terminal_safe(text: str) -> str:
    """``text`` with the same characters escaped except the newline, which the writer of a
    command's whole output must let through."""
    return _BUT_NEWLINE.sub(_visible, text)


def printable_lines(lines: Iterable[str]) -> str:
    """A report's lines joined for a terminal: a newline is the program's only where it ends
    one of ``lines``; one inside a line (from a value) is shown as ``\\n``."""
    return "\n".join(printable(line) for line in lines)
