"""The clusters the conformance tests run against.

``seed`` is the simulator alone, for tests that need its in-process store or its own endpoints.
``cluster`` is the same test on both backends: the simulator's seed and the session's real
control plane (marked ``realcluster``, so it skips without the binary and fails under CI), each
with a namespace of the test's own that is deleted afterwards. A test whose answer depends on
the Kubernetes version may also ask for ``SIM_AS_REAL``: the seed simulated at the real control
plane's version (the seed itself says 1.24.8, the cluster of the runbook).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from nodefence_sim.server import simulation_from_scenario
from nodefence_sim.testing import SimulatorHandle, running_simulator

from .support import BACKENDS, Cluster, kubectl, real_cluster


@pytest.fixture
async def seed() -> AsyncIterator[SimulatorHandle]:
    async with running_simulator(scenario="seed") as handle:
        yield handle


async def _own_namespace(cluster: Cluster) -> None:
    async with (
        cluster.session() as session,
        session.post(
            cluster.url + "/api/v1/namespaces",
            json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": cluster.namespace}},
        ) as response,
    ):
        assert response.status == 201, await response.text()


@pytest.fixture(params=BACKENDS)
async def cluster(request: pytest.FixtureRequest) -> AsyncIterator[Cluster]:
    namespace = f"conformance-{uuid.uuid4().hex[:8]}"
    if request.param.startswith("sim"):
        version = request.param.partition("@")[2] or None
        simulation = simulation_from_scenario("seed", version)
        async with running_simulator(simulation) as handle:
            sim = Cluster(
                "sim", handle.url, handle.url, handle.kubeconfig, namespace, sim=handle.sim
            )
            await _own_namespace(sim)
            yield sim
        return
    backend = request.getfixturevalue("real_backend")
    real = real_cluster(backend.kubeconfig, backend.url, namespace)
    await _own_namespace(real)
    try:
        yield real
    finally:
        # Not waited for: the namespace controller empties it while the next tests run.
        await kubectl(real, "delete", "namespace", namespace, "--wait=false", "--ignore-not-found")
