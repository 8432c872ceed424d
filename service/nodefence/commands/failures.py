"""How a command ends when it cannot do its job: one line on stderr and a non-zero exit.

An operator reading ``nodefence status`` at 3 a.m. needs "cannot reach the Kubernetes API at
..." and the cause, not forty lines of asyncio internals; a script piping ``status`` into
``head`` needs the command to stop quietly when nobody reads the rest.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from nodefence.engine.printable import printable
from nodefence.errors import ClusterUnavailableError, ConfigError, NodefenceError

# What a shell reports for a process ended by SIGPIPE (128 + 13) or SIGINT (128 + 2).
BROKEN_PIPE = 141
INTERRUPTED = 130
# What a refused or failed command exits with; 2 stays the exit code of bad settings or usage.
REFUSED = 1


class CommandRefusedError(NodefenceError):
    """The command will not do what was asked, and changed nothing; the message says why and,
    where there is one, what to do instead."""


def _where() -> str:
    from nodefence.kube.access import locate

    try:
        return f" ({locate().named_by})"
    except ConfigError as exc:
        return f" ({exc})"


def failure_line(exc: BaseException) -> str | None:
    """The line to print for a failure a command can meet in normal use; None for a bug, which
    keeps its traceback."""
    from kubernetes_asyncio.config import ConfigException

    from nodefence.kube.client import KubeError, ReplyTooLargeError

    if isinstance(exc, (CommandRefusedError, ConfigError)):
        # A kubeconfig that cannot be used, a context it does not have: one line naming it.
        return f"nodefence: {exc}"
    if isinstance(exc, ReplyTooLargeError):
        return f"nodefence: the Kubernetes API{_where()} sent a reply too large to read: {exc}"
    if isinstance(exc, ClusterUnavailableError):
        return f"nodefence: cannot reach the Kubernetes API{_where()}: {exc}"
    if isinstance(exc, KubeError):
        hint = ""
        if exc.status in (401, 403):
            hint = " (the credentials in use may not do this; see deploy/README.md for the RBAC)"
        return f"nodefence: the Kubernetes API refused the request: {exc}{hint}"
    if isinstance(exc, ConfigException):
        return f"nodefence: no usable cluster configuration{_where()}: {exc}"
    return None


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush finds no closed pipe."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


def run_command(command: Callable[[], int]) -> int:
    """Run one command; known failures become one line on stderr and a non-zero exit."""
    try:
        code = command()
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
        return BROKEN_PIPE
    except KeyboardInterrupt:
        # Ctrl-C is the operator's own decision, not a failure to explain with a traceback.
        print("nodefence: interrupted", file=sys.stderr)
        return INTERRUPTED
    except Exception as exc:
        line = failure_line(exc)
        if line is None:
            raise
        # One line: a newline inside what it quotes (a name, a BMC's words) is shown escaped.
        print(printable(line), file=sys.stderr)
        return REFUSED
    return code
