"""The real cluster tier: the session's ``real_backend`` (``tests/real_backend.py``, shared with
the simulator's conformance tests), read with the official ``kubernetes`` client over TLS with a
token, and ``nodefence serve`` per test, whose logs a failing test's report carries.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
from bench.processes import Processes, processes
from tests.real_backend import GRACE_SECONDS, RealBackend

__all__ = ["GRACE_SECONDS", "RealBackend"]

LOGS_KEY = pytest.StashKey[Processes]()


@pytest.fixture
def procs(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Processes]:
    with processes(tmp_path) as group:
        request.node.stash[LOGS_KEY] = group
        yield group


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    group = item.stash.get(LOGS_KEY, None)
    if report.failed and group is not None and call.when == "call":
        report.sections.append(("process logs", group.report()))
    return report
