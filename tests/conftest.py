"""What every suite shares: the seed cluster, the run's summary of skipped suites, and logging
left as found.

The run's summary says which suites were skipped and for want of what, and what tests reported.

Several suites drive real tools (kubectl, promtool, amtool, Alertmanager, faketime,
sushy-emulator). On a machine without one of them those tests skip, and a passing run would
hide that the safety they check was never exercised there; so the end of every run lists each
reason with the test files it skipped, and how to get the tool (``.ci/run`` installs them all).

The real control plane (``tests/real_backend.py``) is registered here, at the top, so that one
session-wide ``real_backend`` serves every tier that runs against it; so are the tiers
(``tests/tiers.py``), the markers ``make test-unit`` and ``make test`` select by.

``make test`` runs the suite on parallel workers (pytest-xdist), each a process of its own: the
summary is written by the process that collects their reports, the ports the tests pick for
their servers are claimed in one directory of the run (``bench.processes.free_port``), and
Hypothesis judges no property by how long an example took on a machine busy with the others.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

import pytest
from bench.processes import PORT_CLAIMS
from hypothesis import HealthCheck, settings

from nodefence.observability.logging import reset_logging

if TYPE_CHECKING:
    from nodefence_sim.testing import SimulatorHandle

pytest_plugins = ["tests.real_backend", "tests.tiers"]

INSTALL_HINT = "as root, bash .ci/run installs every tool these suites need"

# What a property checks is the answer, never the time an example took: a deadline or a slow
# generation would fail a correct test on a machine busy with other workers.
settings.register_profile(
    "suite", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
# make test-unit (--hypothesis-profile=unit): every property on a third of its examples, for an
# answer in under a minute; make test runs them all. A count a test sets itself scales with the
# profile's (engine_strategies.examples).
settings.register_profile("unit", settings.get_profile("suite"), max_examples=33)
settings.load_profile("suite")


@pytest.fixture(scope="session", autouse=True)
def port_claims(
    pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """One directory of claimed ports for the whole run: a parallel worker's temporary directory
    is a folder of the run's, so every worker of a run claims in the same place."""
    base = tmp_path_factory.getbasetemp()
    run = base.parent if hasattr(pytestconfig, "workerinput") else base
    claims = run / "port-claims"
    claims.mkdir(exist_ok=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(PORT_CLAIMS, str(claims))
        yield


@pytest.fixture
async def cluster() -> AsyncIterator[SimulatorHandle]:
    """The seed cluster in the simulator, on loopback in the test's process: Kubernetes 1.24.8
    without the NodeOutOfServiceVolumeDetach gate, so nothing but nodefence deletes the stuck
    pods. ``tests/seeded_cluster.py`` has the receiver and the reads that go with it. A folder
    or file whose tests need another cluster defines its own ``cluster``."""
    # Imported when a test asks for the cluster: the unit tier's workers start without it.
    from nodefence_sim.simulation import Simulation
    from nodefence_sim.testing import running_simulator

    async with running_simulator(Simulation.from_scenario("seed")) as handle:
        yield handle


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
    # What a passing test measured for the reader (record_property("report", ...)): the image's
    # size, for one.
    reported = [
        str(value)
        for report in terminalreporter.stats.get("passed", [])
        for name, value in report.user_properties
        if name == "report"
    ]
    if reported:
        terminalreporter.section("reported")
        for line in reported:
            terminalreporter.write_line(line)
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
