from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from nodefence_sim.testing import SimulatorHandle

from .support import NodeWriteWatch


@pytest.fixture
async def cluster(cluster: SimulatorHandle) -> AsyncIterator[SimulatorHandle]:
    """The seed cluster (``tests/conftest.py``), watched on every node write for a broken fence
    budget or a taint and mirror annotations that disagree."""
    watch = NodeWriteWatch(limit=1).attach(cluster)
    yield cluster
    assert watch.violations == []
