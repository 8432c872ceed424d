"""A refusal repeated for the same node within the suppression window is one Event, whatever
other nodes are refused in between (an alert storm refuses hundreds)."""

from __future__ import annotations

from nodefence_sim.testing import SimulatorHandle

from .harness import firing, node_events, start_receiver


def ready_nodes(cluster: SimulatorHandle) -> list[str]:
    return [s["name"] for s in cluster.sim.node_states() if s["ready"] == "True"]


def refusals(cluster: SimulatorHandle, name: str) -> int:
    return sum(1 for e in node_events(cluster, name) if e["reason"] == "FenceRefused")


async def test_a_repeated_refusal_is_one_event_per_node(cluster: SimulatorHandle) -> None:
    first, second, *_ = ready_nodes(cluster)
    async with start_receiver(cluster) as receiver:
        for name in (first, second, first, second, first):
            [decision] = await receiver.alert(firing(name))
            assert decision["verdict"] == "noop", decision
    assert refusals(cluster, first) == 1
    assert refusals(cluster, second) == 1
