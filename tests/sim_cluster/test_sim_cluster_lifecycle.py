"""Taint eviction timed from when the taint manager saw the taint, readiness taints dated by the
node lifecycle controller's write, and the Events both record."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from nodefence_sim.resources import EVENTS, NODES
from nodefence_sim.simulation import Simulation
from nodefence_sim.store import Obj, rfc3339

from .support import FakeClock, add_node, add_pod, node, node_sim, pod

UNREACHABLE = "node.kubernetes.io/unreachable"


def events(sim: Simulation, reason: str) -> list[Obj]:
    return [e for e in sim.store.items(EVENTS) if e["reason"] == reason]


def set_taints(sim: Simulation, name: str, taints: list[dict[str, Any]]) -> None:
    current = sim.store.get(NODES, None, name)
    current["spec"]["taints"] = taints
    sim.store.update(NODES, None, name, current)
    sim.settle()


def terminating(sim: Simulation, name: str) -> bool:
    found = pod(sim, name)
    assert found is not None, f"{name} is gone"
    return bool(found["metadata"].get("deletionTimestamp"))


def test_a_taint_written_with_an_old_time_added_still_gives_the_full_toleration(
    sim: Simulation, clock: FakeClock
) -> None:
    add_pod(
        sim,
        "api-1",
        "control02",
        tolerations=[
            {
                "key": "example.com/maintenance",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 60,
            }
        ],
    )
    sim.settle()
    hour_ago = rfc3339(clock() - timedelta(hours=1))
    taint = {"key": "example.com/maintenance", "effect": "NoExecute", "timeAdded": hour_ago}
    set_taints(sim, "control02", [taint])
    assert not terminating(sim, "api-1")
    clock.advance(59)
    sim.settle()
    assert not terminating(sim, "api-1")
    clock.advance(2)
    sim.settle()
    assert terminating(sim, "api-1")
    (evicted,) = events(sim, "TaintManagerEviction")
    assert evicted["message"] == "Marking for deletion Pod openstack/api-1"
    assert evicted["source"] == {"component": "taint-controller"}
    assert evicted["involvedObject"]["name"] == "api-1"


def test_a_re_added_unreachable_taint_is_dated_now_and_restarts_the_clock(
    clock: FakeClock,
) -> None:
    sim = node_sim(clock)
    add_node(sim, "control02")
    add_pod(sim, "api-1", "control02")
    sim.settle()
    sim.node_down("control02", since_seconds=200)
    # Unreachable since 160 s; someone removes the taints at 250 s and the controller puts them
    # back, dated now: the 300 s run from there, not from the node's death.
    clock.advance(90)
    sim.settle()
    assert not terminating(sim, "api-1")
    set_taints(sim, "control02", [])
    added = {t["effect"]: t["timeAdded"] for t in node(sim, "control02")["spec"]["taints"]}
    assert added == {"NoSchedule": rfc3339(clock()), "NoExecute": rfc3339(clock())}
    clock.advance(299)
    sim.settle()
    assert not terminating(sim, "api-1")
    clock.advance(2)
    sim.settle()
    assert terminating(sim, "api-1")


def test_a_backdated_death_evicts_as_if_the_taint_manager_had_watched(
    clock: FakeClock,
) -> None:
    sim = node_sim(clock)
    add_node(sim, "control02")
    add_pod(sim, "api-1", "control02")
    sim.settle()
    sim.node_down("control02", since_seconds=1200)
    assert terminating(sim, "api-1")


def test_node_not_ready_events_once_per_transition(clock: FakeClock) -> None:
    sim = node_sim(clock)
    add_node(sim, "control02")
    add_pod(sim, "api-1", "control02")
    sim.settle()
    sim.node_down("control02", since_seconds=600)
    dead = node(sim, "control02")
    (on_node,) = [e for e in events(sim, "NodeNotReady") if e["involvedObject"]["kind"] == "Node"]
    assert on_node["message"] == "Node control02 status is now: NodeNotReady"
    assert on_node["type"] == "Normal"
    assert on_node["source"] == {"component": "node-controller"}
    assert on_node["metadata"]["namespace"] == "default"
    assert on_node["involvedObject"]["uid"] == dead["metadata"]["uid"]
    # Dated when the controller would have noticed: 40 s after the death.
    assert on_node["firstTimestamp"] == rfc3339(clock() - timedelta(seconds=560))
    (on_pod,) = [e for e in events(sim, "NodeNotReady") if e["involvedObject"]["kind"] == "Pod"]
    assert (on_pod["type"], on_pod["message"]) == ("Warning", "Node is not ready")
    assert on_pod["involvedObject"]["name"] == "api-1"
    clock.advance(120)
    sim.settle()
    assert len(events(sim, "NodeNotReady")) == 2


def test_identical_events_are_counted_not_repeated(sim: Simulation, clock: FakeClock) -> None:
    from nodefence_sim.controllers.events import EventRecorder

    recorder = EventRecorder(sim, "example-controller")
    target = node(sim, "control02")
    recorder.record(target, "Warning", "Flapping", "it flaps")
    clock.advance(5)
    recorder.record(target, "Warning", "Flapping", "it flaps")
    recorder.record(target, "Warning", "Flapping", "it flaps differently")
    flapping = sorted(events(sim, "Flapping"), key=lambda e: str(e["message"]))
    assert [(e["message"], e["count"]) for e in flapping] == [
        ("it flaps", 2),
        ("it flaps differently", 1),
    ]
    assert flapping[0]["lastTimestamp"] == rfc3339(clock())
    assert flapping[0]["firstTimestamp"] == rfc3339(clock() - timedelta(seconds=5))
    # A flood about one object is cut off by the spam filter's bucket.
    for index in range(100):
        recorder.record(target, "Warning", "Flood", f"message {index}")
    assert len(events(sim, "Flood")) < 25
