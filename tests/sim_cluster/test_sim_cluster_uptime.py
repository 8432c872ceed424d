"""A scenario's cluster has run for a while (``initial_uptime_seconds``): its nodes joined before
their first Ready, as a real API server shows them, so that first Ready is no recovery for
nodefence's storm cooldown, and coming back from an outage is one."""

from __future__ import annotations

from datetime import datetime

from nodefence.kube.convert import ready_condition, recovered_since
from nodefence_sim.resources import NODES
from nodefence_sim.simulation import Simulation

from .support import FakeClock


def _moment(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def test_a_scenarios_nodes_joined_before_their_first_ready_and_recover_after_it() -> None:
    clock = FakeClock()
    sim = Simulation.from_scenario("seed", clock=clock)
    nodes = sim.store.items(NODES)
    assert nodes
    for node in nodes:
        created = _moment(node["metadata"]["creationTimestamp"])
        ready = ready_condition(node)
        assert ready is not None
        assert ready.last_transition is not None
        assert created < ready.last_transition, node["metadata"]["name"]
        assert recovered_since(node, ready) is None, node["metadata"]["name"]

    sim.kubelets.down("compute01", 600)
    sim.settle()
    sim.kubelets.up("compute01")
    sim.settle()
    back = next(n for n in sim.store.items(NODES) if n["metadata"]["name"] == "compute01")
    assert recovered_since(back, ready_condition(back)) is not None
