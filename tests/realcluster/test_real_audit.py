"""S8 on a real API server: a dry run fed a firing alert for a node that is really down decides
to fence and writes nothing. "Nothing" is what the kube-apiserver's own audit log says (served
as the simulator's request log), not what nodefence reports of itself, and the log is shown to
have recorded nodefence's reads, so an empty answer cannot pass for a silent one.
"""

from __future__ import annotations

from typing import Any

import pytest
from bench.processes import Processes, eventually, get_json

from nodefence_sim.faults import WRITE_VERBS

from .conftest import RealBackend
from .test_seed_story import NOT_READY_WITHIN, STEP_WITHIN, oos_taints, post_alert, serve

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(300)]

NODE = "compute02"
DRY_RUN: dict[str, Any] = {
    "dry_run": True,
    "cluster": {"storm_cooldown_seconds": 0},
    "rules": [
        {
            "name": "real",
            "min_not_ready_seconds": 0,
            # Tests of one session fence the same nodes minutes apart: no flap hold.
            "flap_window_seconds": 0,
            "lease_staleness_seconds": 15,
            "fencing": {"driver": "redfish", "action": "off", "timeout_seconds": 30},
        }
    ],
}


def requests_since(backend: RealBackend, cursor: int) -> dict[str, Any]:
    log: dict[str, Any] = get_json(f"{backend.url}/sim/v1/requests?since={cursor}")
    return log


@pytest.mark.invariant("S8")
def test_dry_run_fence_makes_zero_writes_on_the_real_api_server(
    procs: Processes, real_backend: RealBackend
) -> None:
    nodefence = serve(procs, real_backend, DRY_RUN)
    real_backend.control(NODE, "down")
    try:
        eventually(
            lambda: real_backend.ready(NODE) == "Unknown",
            within=NOT_READY_WITHIN,
            what=f"{NODE} NotReady",
        )
        cursor = requests_since(real_backend, 0)["cursor"]

        def would_fence() -> dict[str, Any] | None:
            decision = post_alert(nodefence, NODE, "firing")
            return decision if decision["verdict"] == "fence" else None

        decision = eventually(would_fence, within=STEP_WITHIN, interval=1.0, what="dry-run fence")
        log = requests_since(real_backend, cursor)

        assert decision["dry_run"] is True
        assert decision["node"] == NODE
        [power] = [r for r in decision["reasons"] if r["guard"] == "dry-run-power"]
        assert power["passed"] is True, power
        assert "no power action sent" in power["message"], power
        writes = [
            f"{r['method']} {r['path']} ({r['user']}, {r['userAgent']})"
            for r in log["requests"]
            if r["verb"] in WRITE_VERBS
        ]
        assert writes == [], writes
        # Between the cursor and the answer only nodefence spoke to the API server.
        read = {r["path"] for r in log["requests"] if r["method"] == "GET"}
        assert f"/api/v1/nodes/{NODE}" in read, sorted(read)
        assert log["cursor"] > cursor

        node = real_backend.core.read_node(NODE)
        assert not oos_taints(node)
        # The audit log above is the proof of no write; an earlier test's let-go fence may have
        # left its mirror annotations and managedFields entry on this node.
    finally:
        real_backend.control(NODE, "up")
        eventually(
            lambda: real_backend.ready(NODE) == "True", within=STEP_WITHIN, what=f"{NODE} Ready"
        )
