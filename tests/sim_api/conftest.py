"""An empty simulated cluster (one namespace, two nodes, no controllers) served over HTTP, so
the tests see only the API server's behaviour and every change comes from the test itself."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio import client, config

from nodefence_sim.resources import NAMESPACES, NODES
from nodefence_sim.simulation import Simulation
from nodefence_sim.testing import SimulatorHandle, running_simulator


def _node(name: str, ready: str, role: str) -> dict[str, object]:
    return {
        "metadata": {"name": name, "labels": {f"node-role.kubernetes.io/{role}": ""}},
        "spec": {},
        "status": {
            "conditions": [{"type": "Ready", "status": ready, "reason": "KubeletReady"}],
            "addresses": [{"type": "InternalIP", "address": f"10.0.0.{len(name)}"}],
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": f"boot-{name}",
                "containerRuntimeVersion": "containerd://1.6.8",
                "kernelVersion": "5.15.0",
                "kubeProxyVersion": "v1.24.8",
                "kubeletVersion": "v1.24.8",
                "machineID": f"machine-{name}",
                "operatingSystem": "linux",
                "osImage": "Ubuntu 22.04",
                "systemUUID": f"uuid-{name}",
            },
        },
    }


@pytest.fixture
async def sim_api() -> AsyncIterator[SimulatorHandle]:
    sim = Simulation()
    sim.store.create(NAMESPACES, None, {"metadata": {"name": "default"}})
    sim.store.create(NODES, None, _node("worker1", "True", "worker"))
    sim.store.create(NODES, None, _node("control02", "False", "control-plane"))
    async with running_simulator(sim) as handle:
        yield handle


@pytest.fixture
async def api_client(sim_api: SimulatorHandle) -> AsyncIterator[client.ApiClient]:
    configuration = client.Configuration()
    await config.load_kube_config(str(sim_api.kubeconfig), client_configuration=configuration)
    async with client.ApiClient(configuration) as api:
        yield api
