"""The seed cluster served over HTTP with every controller running, for real clients."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from nodefence_sim.testing import SimulatorHandle, running_simulator


@pytest.fixture
async def seed() -> AsyncIterator[SimulatorHandle]:
    async with running_simulator(scenario="seed") as handle:
        yield handle
