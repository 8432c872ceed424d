"""The real control plane as a pytest plugin: one ``nodefence simulate --backend real`` per test
session (the seed scenario on a real kube-apiserver, controller-manager and scheduler with kwok
nodes), shared by every tier that asks for ``real_backend`` (the realcluster tests and the
simulator's conformance tests run against it), so a session starts it at most once.

It is heavy (etcd, three control-plane components, five kwoks): ``make test`` runs the tests
that need it after the others, in one process; on a parallel worker the fixture fails instead of
starting one control plane a worker.

Without the control plane's binary (``make controlplane``; ``make test`` builds it and sets
``NODEFENCE_CONTROLPLANE``) the tests marked ``realcluster`` are skipped on a workstation; under
CI they fail instead, because a skipped tier there would hide that nothing met a real API server.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from bench.processes import Process, eventually, http, processes, tail
from kubernetes import client, config

LISTENING = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")
# Shorter than Kubernetes' 50s so that a silent node turns NotReady within the test's patience.
GRACE_SECONDS = 20
# A cold start on a busy 2-core machine: etcd, the API server, the controllers, five kwoks and
# the seed's 80-odd pods scheduled and Running.
START_WITHIN = 420.0


def _binary() -> str | None:
    configured = os.environ.get("NODEFENCE_CONTROLPLANE")
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    return shutil.which("nodefence-controlplane")


MISSING = (
    "the real control plane's binary is absent (make controlplane builds it; make test sets "
    "NODEFENCE_CONTROLPLANE)"
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if _binary() is not None or os.environ.get("CI"):
        return
    for item in items:
        if item.get_closest_marker("realcluster") is not None:
            item.add_marker(pytest.mark.skip(reason=MISSING))


@dataclass
class RealBackend:
    """The running backend: its control surface and BMCs (``url``), the kubeconfig and BMC
    inventory it wrote, and API clients built from that kubeconfig."""

    url: str
    kubeconfig: Path
    inventory: Path
    process: Process
    api: client.ApiClient

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    def control(self, node: str, action: str, body: dict[str, Any] | None = None) -> Any:
        status, raw = http("POST", f"{self.url}/sim/v1/nodes/{node}/{action}", body or {})
        assert status == 200, f"{action} {node} -> {status}: {raw!r}"
        return json.loads(raw)

    def ready(self, node: str) -> str | None:
        conditions = self.core.read_node(node).status.conditions or []
        return next((c.status for c in conditions if c.type == "Ready"), None)


# Each of pytest-xdist's workers is a session of its own, and would start a control plane.
PARALLEL = (
    "the real control plane runs once a session, on its own: run the realcluster tier without -n "
    "(make test runs it after the parallel tiers)"
)


@pytest.fixture(scope="session")
def real_backend(
    pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RealBackend]:
    if hasattr(pytestconfig, "workerinput"):
        pytest.fail(PARALLEL)
    if _binary() is None:
        pytest.fail(MISSING)
    with running_backend(tmp_path_factory.mktemp("realcluster")) as backend:
        yield backend


@contextlib.contextmanager
def running_backend(workdir: Path, *extra: str) -> Iterator[RealBackend]:
    """``nodefence simulate --backend real`` with the seed, the tests' grace period and
    ``extra`` arguments, until the block ends."""
    kubeconfig, inventory = workdir / "kubeconfig", workdir / "bmc-inventory.yaml"
    with processes(workdir) as group:
        process = group.start(
            "simulate-real",
            [
                sys.executable,
                "-m",
                "nodefence",
                "simulate",
                "--backend",
                "real",
                "--port",
                "0",
                "--scenario",
                "seed",
                "--node-monitor-grace-period",
                f"{GRACE_SECONDS}s",
                "--kubeconfig-out",
                str(kubeconfig),
                "--bmc-inventory-out",
                str(inventory),
                *extra,
            ],
        )

        def listening() -> str:
            if not process.alive():
                raise AssertionError(f"simulate --backend real exited:\n{tail(process.output())}")
            found = LISTENING.search(process.output())
            return found.group(1) if found and kubeconfig.exists() else ""

        url = eventually(listening, within=START_WITHIN, interval=1.0, what="real backend up")
        api = config.new_client_from_config(config_file=str(kubeconfig))
        try:
            yield RealBackend(url, kubeconfig, inventory, process, api)
        finally:
            api.close()
