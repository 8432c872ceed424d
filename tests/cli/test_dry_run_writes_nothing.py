"""S8: a dry run makes zero writes to the cluster, Events included.

With ``NODEFENCE_DRY_RUN=true`` and Alertmanager unreachable, ``nodefence reconcile`` and
``serve``'s own reconcile pass ask Alertmanager, find it down and say so in their log, and the
API server receives no write at all: no ``AlertmanagerUnreachable`` Event either (the
simulator's request log, ``GET /sim/v1/requests``, holds every request it was sent).
"""

from __future__ import annotations

import sys
from typing import Any

import pytest
from bench.processes import eventually, free_port

from .operator_support import INFERENCE_POLICY, TOKEN, Cluster

pytestmark = pytest.mark.invariant("S8")

READS = frozenset({"GET", "HEAD"})


def dry_run_env(cluster: Cluster) -> dict[str, str]:
    return {
        "NODEFENCE_DRY_RUN": "true",
        "NODEFENCE_POLICY_FILE": str(cluster.policy(INFERENCE_POLICY)),
        # Nothing listens there: every question to Alertmanager fails.
        "NODEFENCE_ALERTMANAGER_URL": f"http://127.0.0.1:{free_port()}",
    }


def writes(requests: list[dict[str, Any]]) -> list[str]:
    return [f"{r['method']} {r['path']}" for r in requests if r["method"] not in READS]


def test_reconcile_command_in_dry_run_writes_no_event(cluster: Cluster) -> None:
    since = cluster.cursor()
    result = cluster.nodefence("reconcile", env=dry_run_env(cluster))
    assert result.returncode == 0, result.stderr
    assert "alertmanager_unavailable" in result.stderr, result.stderr
    assert writes(cluster.requests(since)) == []
    assert "event_not_written" in result.stderr, result.stderr


def test_serves_reconcile_pass_in_dry_run_writes_no_event(cluster: Cluster) -> None:
    port = free_port()
    env = cluster.env(
        **dry_run_env(cluster),
        PORT=str(port),
        NODEFENCE_HOST="127.0.0.1",
        NODEFENCE_ALERT_TOKEN=TOKEN,
        NODEFENCE_IDENTITY="nodefence-dry-run",
        NODEFENCE_RECONCILE_INTERVAL="1",
        NODEFENCE_FENCING_PROBE_INTERVAL="0",
    )
    since = cluster.cursor()
    serve = cluster.procs.start("serve", [sys.executable, "-m", "nodefence", "serve"], env=env)
    cluster.procs.wait_ready(serve, f"http://127.0.0.1:{port}/readyz")
    # A pass that asked Alertmanager and ended: the Event would have been written within it.
    eventually(
        lambda: (
            "alertmanager_unavailable" in serve.output()
            and '"event": "reconcile_pass"' in serve.output()
        ),
        within=60,
        what="a reconcile pass that found Alertmanager down",
    )
    serve.stop()
    assert writes(cluster.requests(since)) == []
    assert "event_not_written" in serve.output()
