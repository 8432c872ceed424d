"""S5 on real controllers: a fenced node whose machine is back, Ready again with a new boot ID,
keeps its out-of-service taint while the healthy delay has not run, however the resolved alert
says it has recovered; the taint is nodefence's to remove only once the node has been Ready that
long (on the API server's clock)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from bench.processes import Processes, eventually

from .conftest import RealBackend
from .safety_support import power_on, release, restore, wait_not_ready
from .test_seed_story import POLICY, STEP_WITHIN, oos_taints, post_alert, power_state, serve

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(900)]

NODE = "compute02"
# Far longer than the test: the node cannot have been Ready that long.
HEALTHY_DELAY_SECONDS = 3600


def gate_policy() -> dict[str, Any]:
    policy = copy.deepcopy(POLICY)
    rule = policy["rules"][0]
    rule["healthy_delay_seconds"] = HEALTHY_DELAY_SECONDS
    # Off, not reboot: the machine stays off until the test powers it on, as a person would.
    rule["fencing"] = {**rule["fencing"], "action": "off"}
    return policy


@pytest.mark.invariant("S5")
def test_s5_a_node_back_too_recently_keeps_its_taint_on_a_resolved_alert(
    procs: Processes, real_backend: RealBackend
) -> None:
    nodefence = serve(procs, real_backend, gate_policy())
    try:
        eventually(lambda: real_backend.ready(NODE) == "True", within=STEP_WITHIN, what="Ready")
        assert real_backend.control(NODE, "down")["kubelet"] == "down"
        wait_not_ready(real_backend, NODE)
        fenced = post_alert(nodefence, NODE, "firing")
        assert fenced["verdict"] == "fence", fenced
        assert oos_taints(real_backend.core.read_node(NODE))
        assert power_state(real_backend, NODE) == "Off"
        boot_before = real_backend.core.read_node(NODE).status.node_info.boot_id

        power_on(real_backend, NODE)
        eventually(
            lambda: real_backend.ready(NODE) == "True", within=STEP_WITHIN, what="back Ready"
        )
        assert real_backend.core.read_node(NODE).status.node_info.boot_id != boot_before

        held = post_alert(nodefence, NODE, "resolved")
        assert held["verdict"] != "unfence", held
        blocking = [r for r in held["reasons"] if not r["passed"]]
        # The healthy delay is what holds it (the decision's summary follows it).
        assert blocking[0]["guard"] == "healthy-delay", held
        assert held["verdict"] == "deferred", held
        assert oos_taints(real_backend.core.read_node(NODE)), "the taint went too early"
    finally:
        # The healthy delay outlasts the test: nodefence lets go of its fence by hand.
        release(real_backend, NODE)
        restore(real_backend, NODE, nodefence)
