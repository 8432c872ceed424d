"""What every conformance test uses: real kubectl and the official Python client pointed at a
cluster, plain HTTP to its API with the same credentials, and a poll with a deadline.

A ``Cluster`` is either backend: the simulator (one fresh seed per test, served in-process) or
the real control plane (``nodefence simulate --backend real``, one per session, shared with the
realcluster tier). Tests written against a ``Cluster`` hold the simulator to what the real
kube-apiserver answers; on the shared real cluster each test works in its own namespace, which
is deleted afterwards, and leaves the seed's objects alone.
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import pytest
import yaml
from kubernetes import client, config

from nodefence_sim.simulation import Simulation

REPO = Path(__file__).resolve().parents[2]
# Generous: a poll returns as soon as its condition holds, and must hold on a busy machine.
DEADLINE = 30.0


def _real_version() -> str:
    """The Kubernetes release the real control plane is built from (``controlplane/go.mod``)."""
    go_mod = (REPO / "controlplane" / "go.mod").read_text()
    found = re.search(r"^\s*k8s\.io/kubernetes v(\d+\.\d+\.\d+)$", go_mod, re.MULTILINE)
    assert found, "controlplane/go.mod names no k8s.io/kubernetes release"
    return found.group(1)


# The ``cluster`` fixture's parameters: each backend, or the seed simulated at the real
# control plane's version (the seed itself says 1.24.8, the cluster of the runbook) for a test
# whose answer depends on the version.
REAL_VERSION = _real_version()
SIM_AS_REAL = f"sim@{REAL_VERSION}"
BACKENDS = ["sim", pytest.param("real", marks=pytest.mark.realcluster)]


class HasKubeconfig(Protocol):
    @property
    def kubeconfig(self) -> Path: ...


@dataclass(frozen=True)
class Cluster:
    """One backend as a conformance test sees it: ``url`` is its Kubernetes API, ``control`` its
    ``/sim/v1`` surface, ``namespace`` the test's own (created for it), ``sim`` the simulation
    when the backend is the simulator."""

    backend: str
    url: str
    control: str
    kubeconfig: Path
    namespace: str
    token: str | None = None
    ca_pem: str | None = None
    sim: Simulation | None = None

    def session(self) -> aiohttp.ClientSession:
        """An HTTP session that authenticates and trusts the API server as kubectl does."""
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        context: ssl.SSLContext | bool = True
        if self.ca_pem is not None:
            context = ssl.create_default_context(cadata=self.ca_pem)
        return aiohttp.ClientSession(headers=headers, connector=aiohttp.TCPConnector(ssl=context))


def real_cluster(kubeconfig: Path, control: str, namespace: str) -> Cluster:
    """The real backend's API server, token and CA, from the kubeconfig it wrote."""
    document = yaml.safe_load(kubeconfig.read_text())
    server = document["clusters"][0]["cluster"]
    if "certificate-authority-data" in server:
        ca_pem = base64.b64decode(server["certificate-authority-data"]).decode()
    else:
        ca_pem = Path(server["certificate-authority"]).read_text()
    return Cluster(
        backend="real",
        url=server["server"],
        control=control,
        kubeconfig=kubeconfig,
        namespace=namespace,
        token=document["users"][0]["user"]["token"],
        ca_pem=ca_pem,
    )


async def kubectl(handle: HasKubeconfig, *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        "kubectl",
        "--kubeconfig",
        str(handle.kubeconfig),
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "HOME": str(handle.kubeconfig.parent)},
        cwd=REPO,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


def api(handle: HasKubeconfig) -> client.ApiClient:
    configuration = client.Configuration()
    config.load_kube_config(str(handle.kubeconfig), client_configuration=configuration)
    return client.ApiClient(configuration)


async def until(check: Any, what: str) -> None:
    """Poll ``check()`` (a coroutine function) until true or the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE
    while not await check():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)
