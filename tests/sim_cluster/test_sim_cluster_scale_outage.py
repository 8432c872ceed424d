"""A large cluster built with an outage already in it (``nodefence_sim.scale --down``): the last
nodes dead as if taken down one by one through the control API, settled once."""

from __future__ import annotations

from datetime import timedelta

from nodefence_sim.resources import NODES
from nodefence_sim.scale import node_name, simulation
from nodefence_sim.store import parse_time

NODES_IN_CLUSTER = 8
DEAD = 3
DEAD_SECONDS = 1200.0


def test_the_last_nodes_are_dead_since_the_given_time_and_the_rest_ready() -> None:
    sim = simulation(NODES_IN_CLUSTER, 2 * NODES_IN_CLUSTER, down=DEAD, down_since=DEAD_SECONDS)
    grace = timedelta(seconds=sim.settings.node_monitor_grace_seconds)
    died = sim.store.now() - timedelta(seconds=DEAD_SECONDS)
    dead = {node_name(i) for i in range(NODES_IN_CLUSTER - DEAD, NODES_IN_CLUSTER)}
    for index in range(NODES_IN_CLUSTER):
        name = node_name(index)
        state = sim.node_state(name)
        if name not in dead:
            assert (state["kubelet"], state["ready"]) == ("up", "True"), state
            assert not state["taints"], state
            continue
        assert (state["kubelet"], state["ready"]) == ("down", "Unknown"), state
        # The node controller noticed the silence a grace period after the death; the build
        # takes a while, so the death is no later than the requested one.
        noticed = parse_time(state["readySince"])
        assert noticed is not None
        assert noticed <= died + grace
        assert noticed >= died + grace - timedelta(minutes=10)
        renewed = parse_time(state["leaseRenewTime"])
        assert renewed is not None
        assert renewed <= died
        assert {(t["key"], t["effect"]) for t in state["taints"]} == {
            ("node.kubernetes.io/unreachable", "NoSchedule"),
            ("node.kubernetes.io/unreachable", "NoExecute"),
        }
        # Its pods are marked not ready, as the controller marks them on a dead node.
        for found in sim.store.pods_on(name):
            ready = next(c for c in found["status"]["conditions"] if c["type"] == "Ready")
            assert ready["status"] == "False", found["metadata"]["name"]
    assert len(sim.store.items(NODES)) == NODES_IN_CLUSTER


def test_without_an_outage_every_node_is_ready() -> None:
    sim = simulation(4, 0)
    assert {sim.node_state(node_name(i))["ready"] for i in range(4)} == {"True"}
