"""Fixtures for the end-to-end tests: a process group per test whose logs join the failure
report, and the check that the real Prometheus and Alertmanager binaries are installed."""

from __future__ import annotations

import os
import shutil
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
from bench.processes import Processes, processes

BINARIES = ("prometheus", "prometheus-alertmanager")
LOGS_KEY = pytest.StashKey[Processes]()


def _missing() -> str | None:
    missing = [name for name in BINARIES if shutil.which(name) is None]
    if not missing:
        return None
    return (
        f"{', '.join(missing)} not on PATH (Debian packages prometheus and "
        "prometheus-alertmanager; .ci/run installs them)"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    reason = _missing()
    # CI installs the binaries, so there a missing one is a broken setup: the fixture fails.
    if reason is None or os.environ.get("CI"):
        return
    for item in items:
        if item.get_closest_marker("e2e") is not None:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def procs(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Processes]:
    reason = _missing()
    if reason is not None:
        pytest.fail(reason)
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
