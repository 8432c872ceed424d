from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from nodefence_sim.simulation import Simulation
from nodefence_sim.testing import SimulatorHandle, running_simulator


@pytest.fixture
async def cluster() -> AsyncIterator[SimulatorHandle]:
    """The seed cluster as it was before the runbook's fix: Kubernetes 1.24.8 without the
    NodeOutOfServiceVolumeDetach gate, so nothing but nodefence deletes the stuck pods."""
    async with running_simulator(Simulation.from_scenario("seed")) as handle:
        yield handle


@pytest.fixture
async def gated_cluster() -> AsyncIterator[SimulatorHandle]:
    """The seed cluster with the volume-detach gate on, as the seed's operator ran it."""
    sim = Simulation.from_scenario("seed")
    sim.settings.feature_gates["NodeOutOfServiceVolumeDetach"] = True
    async with running_simulator(sim) as handle:
        yield handle
