"""What every suite shares: the run's summary of skipped suites, and logging left as found.

The run's summary says which suites were skipped and for want of what.

Several suites drive real tools (kubectl, promtool, amtool, Alertmanager, faketime,
sushy-emulator). On a machine without one of them those tests skip, and a passing run would
hide that the safety they check was never exercised there; so the end of every run lists each
reason with the test files it skipped, and how to get the tool (``.ci/run`` installs them all).

The real control plane (``tests/real_backend.py``) is registered here, at the top, so that one
session-wide ``real_backend`` serves every tier that runs against it.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterator

import pytest

from nodefence.observability.logging import reset_logging

pytest_plugins = ["tests.real_backend"]

INSTALL_HINT = "as root, bash .ci/run installs every tool these suites need"


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """Leave structlog and the root logger as found, for the tests of other packages."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    reset_logging()
    root.handlers = handlers
    root.setLevel(level)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    by_reason: dict[str, set[str]] = defaultdict(set)
    counts: dict[str, int] = defaultdict(int)
    for report in terminalreporter.stats.get("skipped", []):
        if not isinstance(report.longrepr, tuple):
            continue
        reason = str(report.longrepr[2]).removeprefix("Skipped: ")
        by_reason[reason].add(report.nodeid.split("::", 1)[0])
        counts[reason] += 1
    if not by_reason:
        return
    terminalreporter.section("skipped suites")
    for reason in sorted(by_reason):
        files = ", ".join(sorted(by_reason[reason]))
        terminalreporter.write_line(f"{counts[reason]} skipped: {reason} ({files})")
    terminalreporter.write_line(INSTALL_HINT)
