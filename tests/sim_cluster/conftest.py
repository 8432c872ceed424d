"""A small simulated cluster driven by a fake clock: only the node-side controllers run, so
every pod a test makes stays exactly as the test made it unless those controllers act."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from nodefence_sim.control import add_control_routes
from nodefence_sim.simulation import Simulation

from .support import FakeClock, add_node, node_sim, node_with_pods


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def sim(clock: FakeClock) -> Simulation:
    simulation = node_sim(clock)
    add_node(simulation, "control02")
    simulation.settle()
    return simulation


@pytest.fixture
def cluster(clock: FakeClock) -> Simulation:
    """control02 running mariadb-server-1 and a DaemonSet pod, settled: what ``client``
    serves unless the test module makes its own."""
    return node_with_pods(clock)


Client = TestClient[web.Request, web.Application]


@pytest.fixture
async def client(cluster: Simulation) -> AsyncIterator[Client]:
    """The control API (``/sim/v1``) over ``cluster``."""
    app = web.Application()
    add_control_routes(app, cluster)
    async with TestClient(TestServer(app)) as test_client:
        yield test_client
