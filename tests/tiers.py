"""The suite's tiers, one marker per test, set from the folder the test lives in.

``make test-unit`` runs the ``unit`` tier alone, in seconds; ``make test`` runs every tier but
``realcluster`` on parallel workers, then ``realcluster`` on the session's one real control plane.
A test belongs to exactly one tier:

- ``unit``: in-process tests of the pure engine, the shell around it and the HTTP receiver;
- ``integration``: nodefence's adapters and commands against the simulated cluster, BMCs, fence
  agents, Alertmanager and Slack peers, run as the real processes and libraries they are;
- ``system``: the whole chain with the real Prometheus, Alertmanager, promtool, Helm and the
  image's install steps, the image itself (``make image``), and the shipped manifests and rules;
- ``simulator``: the simulated cluster itself (``service/nodefence_sim``);
- ``realcluster``: everything that needs the real control plane (``tests/real_backend.py``): the
  tests marked ``realcluster`` (the ``real`` backend of the simulator's conformance tests among
  them) and any test that asks for ``real_backend``, wherever it lives.

Across the tiers, a test marked ``serial`` depends on how long a request takes (a deadline it
sets): ``make test`` runs it not on the parallel workers but after them, alone, before the
``realcluster`` tier, whose tests every run puts last. The markers are registered in
``pyproject.toml``. A folder that is not listed here stops the collection, so that no test runs
in no tier.
"""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

FOLDERS = {
    "engine": "unit",
    "shell": "unit",
    "http": "unit",
    "alertmanager": "integration",
    # lint-imports on copies of the product, a few seconds each.
    "architecture": "integration",
    "bench": "integration",
    "cli": "integration",
    "fencing": "integration",
    "fuzz": "integration",
    "kube": "integration",
    "pipeline": "integration",
    "reliability": "integration",
    "slack_approval": "integration",
    # Its tests of what the real backend decides before any process starts need no control
    # plane; the others carry the realcluster marker.
    "realcluster": "integration",
    "alertrules": "system",
    "deploy": "system",
    "e2e": "system",
    # The product image built by make image, run in the project's own Docker daemon.
    "image": "system",
    "sim_api": "simulator",
    "sim_cluster": "simulator",
    "sim_conformance": "simulator",
    "sim_workloads": "simulator",
}


def folder_of(path: Path) -> str | None:
    """The folder under ``tests/`` a test file lives in; None outside a folder of ``tests/``."""
    try:
        parts = path.resolve().relative_to(TESTS).parts
    except ValueError:
        return None
    return parts[0] if len(parts) > 1 else None


def tier_of(item: pytest.Item) -> str | None:
    if item.get_closest_marker("realcluster") is not None:
        return "realcluster"
    if "real_backend" in getattr(item, "fixturenames", ()):
        return "realcluster"
    folder = folder_of(item.path)
    if folder is None:
        return None
    if folder not in FOLDERS:
        raise pytest.UsageError(
            f"tests/{folder} has no tier: add it to FOLDERS in {Path(__file__).name}"
        )
    return FOLDERS[folder]


# First, so that the real control plane's own hook (skip without its binary) sees the marker.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        tier = tier_of(item)
        if tier is not None and item.get_closest_marker(tier) is None:
            item.add_marker(tier)
    # The real control plane's tests last (in their order): it starts with the first of them
    # and keeps a core busy until the session ends, so no other test runs beside it.
    items.sort(key=lambda item: item.get_closest_marker("realcluster") is not None)
