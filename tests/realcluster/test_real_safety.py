"""The safety invariants on real Kubernetes semantics: S2's Lease judged by the real API
server's stamps, S6's delete precondition as the real kube-apiserver enforces it, S11 with
nodefence's own clock ten minutes off under libfaketime against the real ``Date`` header, and S3
with S7 as two replicas race on the real resourceVersion conflicts of the fence record and the
Node.

Each test takes a node of the shared cluster down, acts, checks the real objects (and the
machine's power state through its Redfish BMC), and then restores the node, so the next test
finds the cluster healthy. Every wait polls the real objects with a deadline.
"""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

import pytest
from bench.processes import Processes, eventually
from kubernetes import client

from nodefence.actions.executor import Executor, Outcome
from nodefence.engine.model import PurgePodAction
from nodefence.kube.client import Deadline, KubeClient, load_api_client

from .conftest import RealBackend
from .safety_support import (
    blocked,
    lease_age,
    nodefence_events,
    renew_lease,
    restore,
    server_now,
    start_replica,
    wait_not_ready,
)
from .test_seed_story import POLICY, STEP_WITHIN, oos_taints, post_alert, power_state

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(600)]

RECORD = "nodefence-fences"


def rule(**overrides: Any) -> dict[str, Any]:
    """The seed story's policy with some of its one rule's windows changed."""
    policy = json.loads(json.dumps(POLICY))
    policy["rules"][0].update(overrides)
    return policy


def untouched(backend: RealBackend, node: str) -> None:
    """Nothing of nodefence's on the node: no taint, no mirror annotation, the machine on."""
    current = backend.core.read_node(node)
    assert not oos_taints(current)
    assert not [k for k in current.metadata.annotations or {} if k.startswith("nodefence.io/")]
    assert power_state(backend, node) == "On"


def record_entries(backend: RealBackend) -> dict[str, dict[str, Any]]:
    try:
        held = backend.core.read_namespaced_config_map(RECORD, "nodefence")
    except client.ApiException as exc:
        if exc.status == 404:
            return {}
        raise
    return {
        key.removeprefix("fence."): json.loads(value)
        for key, value in (held.data or {}).items()
        if key.startswith("fence.")
    }


# --- S2 ------------------------------------------------------------------------------------


@pytest.mark.invariant("S2")
def test_s2_a_lease_renewed_within_the_window_blocks_the_fence(
    procs: Processes, real_backend: RealBackend
) -> None:
    """The node-lifecycle controller has marked the node NotReady (its status updates stopped),
    but its Lease is renewed, as a kubelet whose lease controller still runs renews it: the
    node is alive, and nothing is fenced, powered off or written."""
    node = "control02"
    eventually(lambda: real_backend.ready(node) == "True", within=STEP_WITHIN, what="Ready")
    nodefence = start_replica(procs, real_backend, rule(lease_staleness_seconds=60), "s2")
    assert real_backend.control(node, "down")["kubelet"] == "down"
    try:
        wait_not_ready(real_backend, node)
        renew_lease(real_backend, node)
        assert lease_age(real_backend, node) < 60

        decision = post_alert(nodefence, node, "firing")

        assert decision["verdict"] in ("noop", "skip"), decision
        assert "lease" in blocked(decision), decision
        untouched(real_backend, node)
        assert node not in record_entries(real_backend)
        managers = {m.manager for m in real_backend.core.read_node(node).metadata.managed_fields}
        assert "nodefence" not in managers, managers
    finally:
        restore(real_backend, node)


# --- S6 ------------------------------------------------------------------------------------


def stuck_pod(core: client.CoreV1Api, namespace: str, name: str, node: str) -> client.V1Pod:
    """A pod bound to the silent node and then deleted: with no kubelet to confirm, the real
    API server leaves it Terminating, as the seed's StatefulSet pod is."""
    core.create_namespaced_pod(
        namespace,
        client.V1Pod(
            metadata=client.V1ObjectMeta(name=name, labels={"app": "s6"}),
            spec=client.V1PodSpec(
                node_name=node,
                containers=[client.V1Container(name="db", image="registry.invalid/db:1")],
            ),
        ),
    )
    core.delete_namespaced_pod(name, namespace)
    pod = core.read_namespaced_pod(name, namespace)
    assert pod.metadata.deletion_timestamp is not None
    return pod


def purge(backend: RealBackend, pod: client.V1Pod, uid: str) -> Any:
    async def run() -> Any:
        kube = KubeClient(await load_api_client(str(backend.kubeconfig)))
        try:
            action = PurgePodAction(
                pod.metadata.namespace, pod.metadata.name, uid, pod.spec.node_name
            )
            return await Executor(kube).purge_pod(action, Deadline(30))
        finally:
            await kube.close()

    return asyncio.run(run())


@pytest.mark.invariant("S6")
def test_s6_a_pod_recreated_under_the_same_name_survives_the_purge(
    real_backend: RealBackend,
) -> None:
    """nodefence read the stuck pod; before its delete went out, the pod was deleted and
    re-created under the same name (a StatefulSet does exactly that). The delete carries the
    UID nodefence read, the real API server refuses it (409), and the new pod stays; the same
    delete with the new pod's UID goes through."""
    core, node, namespace = real_backend.core, "control03", "nodefence-s6"
    eventually(lambda: real_backend.ready(node) == "True", within=STEP_WITHIN, what="Ready")
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    assert real_backend.control(node, "down")["kubelet"] == "down"
    try:
        wait_not_ready(real_backend, node)
        read = stuck_pod(core, namespace, "db-0", node)
        core.delete_namespaced_pod(
            "db-0", namespace, body=client.V1DeleteOptions(grace_period_seconds=0)
        )
        eventually(
            lambda: not core.list_namespaced_pod(namespace).items,
            within=STEP_WITHIN,
            what="the read pod gone",
        )
        recreated = stuck_pod(core, namespace, "db-0", node)
        assert recreated.metadata.uid != read.metadata.uid

        stale = purge(real_backend, recreated, read.metadata.uid)

        assert stale.outcome is Outcome.SKIPPED, stale
        survivor = core.read_namespaced_pod("db-0", namespace)
        assert survivor.metadata.uid == recreated.metadata.uid
        assert survivor.metadata.deletion_timestamp is not None

        current = purge(real_backend, recreated, recreated.metadata.uid)

        assert current.outcome is Outcome.DONE, current

        def gone() -> bool:
            try:
                core.read_namespaced_pod("db-0", namespace)
            except client.ApiException as exc:
                return exc.status == 404
            return False

        eventually(gone, within=STEP_WITHIN, what="the re-created pod purged")
    finally:
        core.delete_namespace(namespace)
        restore(real_backend, node)


# --- S11 -----------------------------------------------------------------------------------


@pytest.mark.invariant("S11")
def test_s11_nodefence_ten_minutes_fast_does_not_make_a_fresh_death_fenceable(
    procs: Processes, real_backend: RealBackend
) -> None:
    """The kubelet went silent moments ago. On a nodefence clock ten minutes fast the node
    would look NotReady for ten minutes and its Lease ten minutes stale, past five-minute
    windows; on the API server's clock both are seconds old. One replica is held by the
    NotReady window, one whose rule has none by the Lease window; nothing is fenced."""
    node = "compute02"
    eventually(lambda: real_backend.ready(node) == "True", within=STEP_WITHIN, what="Ready")
    windows = rule(min_not_ready_seconds=300, lease_staleness_seconds=300)
    lease_only = rule(min_not_ready_seconds=0, lease_staleness_seconds=300)
    fast = start_replica(procs, real_backend, windows, "fast", clock_offset="+600s")
    fast_lease = start_replica(procs, real_backend, lease_only, "fast-lease", clock_offset="+600s")
    assert real_backend.control(node, "down")["kubelet"] == "down"
    try:
        wait_not_ready(real_backend, node)

        by_window = post_alert(fast, node, "firing")
        by_lease = post_alert(fast_lease, node, "firing")

        assert by_window["verdict"] in ("noop", "skip"), by_window
        assert "not-ready-duration" in blocked(by_window), by_window
        assert by_lease["verdict"] in ("noop", "skip"), by_lease
        assert "lease" in blocked(by_lease), by_lease
        untouched(real_backend, node)
        assert node not in record_entries(real_backend)
    finally:
        restore(real_backend, node)


@pytest.mark.invariant("S11")
def test_s11_nodefence_ten_minutes_slow_still_fences_and_records_the_servers_time(
    procs: Processes, real_backend: RealBackend
) -> None:
    """The other direction: on a clock ten minutes slow, a Lease renewed seconds ago looks
    renewed in the future. Judged on the API server's clock the node is dead past the window,
    it is fenced through its BMC, and the record says when by the API server's clock; the
    reboot, the new bootID and the unfence follow on the same clock."""
    node = "control01"
    eventually(lambda: real_backend.ready(node) == "True", within=STEP_WITHIN, what="Ready")
    boot_before = real_backend.core.read_node(node).status.node_info.boot_id
    slow = start_replica(procs, real_backend, POLICY, "slow", clock_offset="-600s")
    assert real_backend.control(node, "down")["kubelet"] == "down"
    try:
        wait_not_ready(real_backend, node)

        def fenced() -> dict[str, Any] | None:
            decision = post_alert(slow, node, "firing")
            return decision if decision["verdict"] == "fence" else None

        decision = eventually(fenced, within=STEP_WITHIN, interval=1.0, what="fence decision")
        assert "power-off" not in blocked(decision), decision
        assert oos_taints(real_backend.core.read_node(node))
        entry = record_entries(real_backend)[node]
        fenced_at = datetime.fromisoformat(entry["fencedAt"].replace("Z", "+00:00"))
        assert abs((server_now(real_backend) - fenced_at).total_seconds()) < 300, entry

        def rebooted() -> bool:
            current = real_backend.core.read_node(node)
            ready = real_backend.ready(node) == "True"
            return ready and current.status.node_info.boot_id != boot_before

        eventually(rebooted, within=STEP_WITHIN, what="powered on with a new bootID")

        def unfenced() -> bool:
            post_alert(slow, node, "resolved")
            return not oos_taints(real_backend.core.read_node(node))

        eventually(unfenced, within=STEP_WITHIN, interval=1.0, what="verified untaint")
    finally:
        restore(real_backend, node, slow)


# --- S3 and S7 -----------------------------------------------------------------------------


@pytest.mark.invariant("S3", "S7", "S12")
def test_s3_s7_two_replicas_racing_on_two_dead_nodes_fence_one_once(
    procs: Processes, real_backend: RealBackend
) -> None:
    """Two dead nodes, a budget of one fenced node, two replicas; each replica gets each node's
    alert twice, all at once. The fence record and the Node are written with real
    resourceVersion conflicts: one node is powered off, tainted and reported once; the other
    keeps its machine on and no taint."""
    nodes = ("compute01", "compute02")
    for node in nodes:
        eventually(lambda n=node: real_backend.ready(n) == "True", within=STEP_WITHIN, what="Ready")
    policy = rule()
    policy["rules"][0]["fencing"]["action"] = "off"
    policy["cluster"]["max_fenced_nodes"] = 1
    first = start_replica(procs, real_backend, policy, "replica-a")
    second = start_replica(procs, real_backend, policy, "replica-b", token=first.token)
    replicas = (first, second)
    # Earlier tests of the session may have fenced these nodes: only this race's Events count.
    earlier = {
        (node, reason): nodefence_events(real_backend, node, reason)
        for node in nodes
        for reason in ("NodeFenced", "NodeUnfenced")
    }
    for node in nodes:
        assert real_backend.control(node, "down")["kubelet"] == "down"
    try:
        for node in nodes:
            wait_not_ready(real_backend, node)
            eventually(
                lambda n=node: lease_age(real_backend, n) > 20,
                within=STEP_WITHIN,
                what=f"{node}'s Lease past the window",
            )
        deliveries = [(r, n) for r in replicas for n in nodes for _ in range(2)]
        with ThreadPoolExecutor(len(deliveries)) as pool:
            decisions = list(pool.map(lambda d: post_alert(d[0], d[1], "firing"), deliveries))

        tainted = [n for n in nodes if oos_taints(real_backend.core.read_node(n))]
        assert len(tainted) == 1, decisions
        (fenced,) = tainted
        (spared,) = (n for n in nodes if n != fenced)
        assert [t.effect for t in oos_taints(real_backend.core.read_node(fenced))] == ["NoExecute"]
        assert power_state(real_backend, fenced) == "Off"
        untouched(real_backend, spared)
        assert set(record_entries(real_backend)) == {fenced}
        assert (
            nodefence_events(real_backend, fenced, "NodeFenced") - earlier[(fenced, "NodeFenced")]
            == 1
        )
        assert (
            nodefence_events(real_backend, spared, "NodeFenced") == earlier[(spared, "NodeFenced")]
        )
        assert all(d["node"] != spared or d["verdict"] != "fence" for d in decisions), decisions
        refused = [d for d in decisions if d["node"] == spared]
        assert all("fence-budget" in blocked(d) for d in refused), refused

        restore(real_backend, fenced, first)

        assert not oos_taints(real_backend.core.read_node(fenced))
        assert (
            nodefence_events(real_backend, fenced, "NodeUnfenced")
            - earlier[(fenced, "NodeUnfenced")]
            == 1
        )
        assert fenced not in record_entries(real_backend)
    finally:
        for node in nodes:
            restore(real_backend, node, first)
