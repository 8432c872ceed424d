from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from nodefence_sim.simulation import Simulation
from nodefence_sim.testing import SimulatorHandle, running_simulator

from .support import NodeWriteWatch


@pytest.fixture
async def cluster() -> AsyncIterator[SimulatorHandle]:
    """The seed cluster (Kubernetes 1.24.8, no volume-detach gate), watched on every node write
    for a broken fence budget or a taint and mirror annotations that disagree."""
    async with running_simulator(Simulation.from_scenario("seed")) as handle:
        watch = NodeWriteWatch(limit=1).attach(handle)
        yield handle
        assert watch.violations == []
