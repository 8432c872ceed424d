"""A refusal repeated for the same node within the suppression window is one Event, whatever
other nodes are refused in between (an alert storm refuses hundreds)."""

from __future__ import annotations

from tests.seeded_cluster import firing, inference, node_events, start_receiver

from nodefence_sim.testing import SimulatorHandle


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


async def test_a_wait_repeated_over_passes_is_one_event_whose_count_grows(
    cluster: SimulatorHandle,
) -> None:
    """Ten reconcile passes over a deferred unfence leave one Normal Event with count 10: the
    repeats are written onto the first Event, never a new object each pass."""
    node = "compute02"
    cluster.sim.node_down(node, since_seconds=1200)
    policy = inference({"rules": [{"name": "default", "healthy_delay_seconds": 3600}]})
    async with start_receiver(cluster, policy=policy) as receiver:
        [fenced] = await receiver.alert(firing(node))
        assert fenced["verdict"] == "fence", fenced
        cluster.sim.node_up(node, since_seconds=60)
        # Every repeat written at once (the default waits a minute between writes).
        receiver.pipeline.reporter.events.suppression_seconds = 0
        for _ in range(10):
            status, body = await receiver.post("/reconcile", {})
            assert status == 200, body
            [deferred] = [d for d in body["decisions"] if d["node"] == node]
            assert deferred["verdict"] == "deferred", deferred
    waits = [e for e in node_events(cluster, node) if e["reason"] == "UnfenceDeferred"]
    assert len(waits) == 1, waits
    assert waits[0]["count"] == 10
    assert waits[0]["type"] == "Normal"
    assert waits[0]["lastTimestamp"] >= waits[0]["firstTimestamp"]


async def test_a_node_waiting_its_not_ready_duration_gets_no_warning(
    cluster: SimulatorHandle,
) -> None:
    node = "compute02"
    cluster.sim.node_down(node, since_seconds=60)
    async with start_receiver(cluster, policy=inference()) as receiver:
        [early] = await receiver.alert(firing(node))
    assert early["verdict"] == "noop", early
    [refused] = [e for e in node_events(cluster, node) if e["reason"] == "FenceRefused"]
    assert refused["type"] == "Normal", refused


async def test_a_full_budget_is_a_warning(cluster: SimulatorHandle) -> None:
    cluster.sim.node_down("compute01", since_seconds=1200)
    cluster.sim.node_down("compute02", since_seconds=1200)
    async with start_receiver(cluster, policy=inference()) as receiver:
        [first] = await receiver.alert(firing("compute01"))
        [second] = await receiver.alert(firing("compute02"))
    assert first["verdict"] == "fence", first
    assert second["verdict"] == "noop", second
    [refused] = [e for e in node_events(cluster, "compute02") if e["reason"] == "FenceRefused"]
    assert refused["type"] == "Warning", refused
    assert "budget" in refused["message"], refused
