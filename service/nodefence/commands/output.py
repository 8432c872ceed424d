"""The one writer every command's output goes through: nothing a command prints can drive the
operator's terminal.

``nodefence.cli.main`` puts :class:`TerminalSafe` in front of stdout and stderr for the whole
of a command, so a command added later, a failure line quoting a BMC's
error, or an argument error all pass through it without having to remember to: every control
and bidirectional formatting character but the newline is written as a visible escape
(``engine.printable``). JSON output is unchanged by it (the encoder escapes those characters
already, so ``-o json`` keeps each value exact). The reports' own renderers also escape the
newlines inside values (``printable_lines``), which this writer cannot tell from theirs.

The long-running servers (``serve``, ``simulate``) write logs, not text for a terminal, and are
left to their own streams (:func:`unguarded`).
"""

from __future__ import annotations

import contextlib
import io
import sys
from collections.abc import Iterator
from typing import Any, TextIO

from nodefence.engine.printable import terminal_safe


class TerminalSafe(io.TextIOBase):
    """A text stream that writes through to ``stream`` with control characters escaped; every
    other attribute (``fileno``, ``isatty``, ``encoding``, ``buffer``) is the stream's own."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(terminal_safe(text))
        # What was asked of it was written, as a person would count it.
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.stream.fileno()

    def isatty(self) -> bool:
        return self.stream.isatty()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self.stream.encoding

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def _raw(stream: TextIO) -> TextIO:
    return stream.stream if isinstance(stream, TerminalSafe) else stream


@contextlib.contextmanager
def guarded() -> Iterator[None]:
    """stdout and stderr through :class:`TerminalSafe` while the block runs."""
    out, err = sys.stdout, sys.stderr
    sys.stdout = TerminalSafe(_raw(out))
    sys.stderr = TerminalSafe(_raw(err))
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        sys.stdout, sys.stderr = out, err


@contextlib.contextmanager
def unguarded() -> Iterator[None]:
    """The streams as they were before :func:`guarded`, for a server whose output is logs."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _raw(out), _raw(err)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err
