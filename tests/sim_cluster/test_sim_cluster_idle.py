"""What lets a large simulated cluster idle cheaply without missing anything: which changes wake
the controllers, the kubelets' agenda, and the pods-by-node index behind ``spec.nodeName=``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from nodefence_sim.controllers.kubelet import LEASE_NAMESPACE
from nodefence_sim.resources import EVENTS, LEASES, NODES, PODS, ResourceType
from nodefence_sim.store import DeleteOptions, Obj, WatchEvent
from nodefence_sim.wakeup import Agenda, significant

from .support import FakeClock, add_node, add_pod, node, node_sim

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _modified(new: Obj, old: Obj, resource: ResourceType = NODES) -> WatchEvent:
    return WatchEvent("MODIFIED", resource, new, 2, old)


def test_renewals_heartbeats_and_events_are_not_significant(clock: FakeClock) -> None:
    sim = node_sim(clock)
    add_node(sim, "compute01")
    sim.settle()
    before = node(sim, "compute01")
    beat = {**before, "status": {**before["status"]}}
    beat["status"]["conditions"] = [
        {**c, "lastHeartbeatTime": "2030-01-01T00:00:00Z"} for c in before["status"]["conditions"]
    ]
    assert not significant(_modified(beat, before))
    tainted = {
        **before,
        "spec": {**before["spec"], "taints": [{"key": "k", "effect": "NoSchedule"}]},
    }
    assert significant(_modified(tainted, before))
    not_ready = {**before, "status": {**before["status"]}}
    not_ready["status"]["conditions"] = [
        {**c, "status": "False"} if c["type"] == "Ready" else c
        for c in before["status"]["conditions"]
    ]
    assert significant(_modified(not_ready, before))
    lease = sim.store.get(LEASES, LEASE_NAMESPACE, "compute01")
    assert not significant(_modified(lease, lease, LEASES))
    assert significant(WatchEvent("ADDED", LEASES, lease, 3))
    assert not significant(WatchEvent("ADDED", EVENTS, {"metadata": {"name": "e"}}, 4))


def test_agenda_visits_marked_and_due_names_once() -> None:
    agenda = Agenda()
    agenda.visited("b", T0 + timedelta(seconds=10))
    agenda.visited("a", T0 + timedelta(seconds=5))
    agenda.mark("c")
    assert agenda.due(T0) == ["c"]
    assert agenda.due(T0) == []
    assert agenda.due(T0 + timedelta(seconds=5)) == ["a"]
    # Rescheduled before it was due: only the new moment counts.
    agenda.visited("b", T0 + timedelta(seconds=20))
    assert agenda.due(T0 + timedelta(seconds=15)) == []
    agenda.mark("b")
    agenda.visited("b", T0 + timedelta(seconds=30))
    assert agenda.due(T0 + timedelta(seconds=25)) == []
    assert agenda.due(T0 + timedelta(seconds=30)) == ["b"]
    agenda.visited("d", T0)
    agenda.forget("d")
    assert agenda.due(T0 + timedelta(days=1)) == []


def test_a_settled_cluster_writes_nothing_until_a_timer_is_due(clock: FakeClock) -> None:
    sim = node_sim(clock)
    add_node(sim, "compute01")
    add_pod(sim, "web-1", "compute01")
    sim.settle()
    version = sim.store.resource_version
    sim.step()
    assert sim.store.resource_version == version
    clock.advance(sim.settings.lease_renew_seconds)
    sim.step()
    lease = sim.store.get(LEASES, LEASE_NAMESPACE, "compute01")
    assert sim.store.resource_version != version
    assert lease["metadata"]["resourceVersion"] == sim.store.resource_version


def test_pods_by_node_follow_binding_and_deletion(clock: FakeClock) -> None:
    sim = node_sim(clock)
    for name in ("compute01", "compute02"):
        add_node(sim, name)
    add_pod(sim, "a", "compute01")
    add_pod(sim, "b", "compute02")
    add_pod(sim, "c", "compute01")
    sim.settle()
    sim.store.delete(PODS, "openstack", "c", DeleteOptions(grace_period_seconds=0))

    def names(selector: str) -> list[str]:
        selected, _ = sim.store.select(PODS, None, None, selector)
        scanned = [
            p["metadata"]["name"]
            for p in sim.store.items(PODS)
            if sim.store.predicate(PODS, None, selector)(p)
        ]
        found = [p["metadata"]["name"] for p in selected]
        assert sorted(found) == sorted(scanned), selector
        return found

    assert names("spec.nodeName=compute01") == ["a"]
    assert names("spec.nodeName==compute02") == ["b"]
    assert names("spec.nodeName!=compute01") == ["b"]
    assert names("spec.nodeName=compute03") == []
    assert [p["metadata"]["name"] for p in sim.store.pods_on("compute01")] == ["a"]
