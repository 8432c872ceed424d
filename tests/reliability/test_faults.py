"""A misbehaving API server (slow, failing, throttling, conflicting, resetting, hanging, down):
the fence still ends in the one correct state, or answers 503 without leaving a broken one."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass
from typing import Any

import pytest
from tests.seeded_cluster import eventually, oos_taints, start_receiver, terminating_on

from nodefence_sim.faults import FaultRule
from nodefence_sim.resources import NODES, PODS
from nodefence_sim.store import WatchEvent
from nodefence_sim.testing import SimulatorHandle

from .support import (
    NODE_PATH,
    assert_fenced,
    attempts,
    firing,
    kill_node,
    names_on,
    orphans,
    pod_uids_off,
    redelivered,
    retried_problem,
    successful,
    until,
)

NODE = "control02"
PATCH_NODE = NODE_PATH.format(NODE)


@dataclass
class Before:
    """What the cluster looked like before the alert, for the S6 comparison afterwards."""

    others: dict[str, tuple[str, str]]
    on_node: set[tuple[str, str]]
    cursor: int

    def check(self, cluster: SimulatorHandle) -> None:
        assert_fenced(
            cluster,
            NODE,
            others_before=self.others,
            on_node_before=self.on_node,
            since=self.cursor,
        )


@pytest.fixture
async def dead(cluster: SimulatorHandle) -> Before:
    await kill_node(cluster, NODE)
    return Before(pod_uids_off(cluster, NODE), names_on(cluster, NODE), cluster.faults.cursor)


async def test_latency_on_every_request_still_fences_and_purges(
    cluster: SimulatorHandle, dead: Before
) -> None:
    cluster.faults.latency = 0.05
    async with start_receiver(cluster) as receiver:
        [decision] = await receiver.alert(firing(NODE))
    assert decision["verdict"] == "fence", decision
    dead.check(cluster)


@pytest.mark.parametrize(
    ("verb", "path", "status"),
    [
        ("update", "/api/v1/nodes/*", 500),
        ("list", "/api/v1/*", 503),
        ("delete", "/api/v1/namespaces/*/pods/*", 502),
    ],
)
async def test_server_errors_are_retried_until_one_fence(
    cluster: SimulatorHandle, dead: Before, verb: str, path: str, status: int
) -> None:
    rule = cluster.faults.fail(3, status=status, verbs=(verb,), path=path)
    async with start_receiver(cluster) as receiver:
        [decision] = await receiver.alert(firing(NODE))
    assert decision["verdict"] == "fence", decision
    assert rule.hits == 3
    failed = [r for r in cluster.faults.requests(dead.cursor) if r.status == status]
    assert len(failed) == 3, failed
    dead.check(cluster)


async def test_throttling_honours_retry_after(cluster: SimulatorHandle, dead: Before) -> None:
    cluster.faults.fail(2, status=429, verbs=("update",), path="/api/v1/nodes/*", retry_after=1)
    async with start_receiver(cluster) as receiver:
        [decision] = await receiver.alert(firing(NODE))
    assert decision["verdict"] == "fence", decision
    patches = [
        r for r in cluster.faults.requests(dead.cursor) if (r.method, r.path) == ("PUT", PATCH_NODE)
    ]
    assert [r.status for r in patches] == [429, 429, 200]
    gaps = [later.at - earlier.at for earlier, later in itertools.pairwise(patches)]
    assert all(gap >= 0.75 for gap in gaps), gaps
    dead.check(cluster)


async def test_conflict_storm_rereads_and_redecides(cluster: SimulatorHandle, dead: Before) -> None:
    cluster.faults.conflicts(4, verbs=("update",), path="/api/v1/nodes/*")
    async with start_receiver(cluster) as receiver:
        [decision] = await receiver.alert(firing(NODE))
    assert decision["verdict"] == "fence", decision
    log = cluster.faults.requests(dead.cursor)
    patches = [i for i, r in enumerate(log) if (r.method, r.path) == ("PUT", PATCH_NODE)]
    assert [log[i].status for i in patches] == [409, 409, 409, 409, 200]
    for earlier, later in itertools.pairwise(patches):
        between = [r.path for r in log[earlier + 1 : later]]
        assert PATCH_NODE in between, "each retry must re-read the node and re-decide"
    dead.check(cluster)


async def test_endless_conflicts_answer_503_and_redelivery_fences(
    cluster: SimulatorHandle, dead: Before
) -> None:
    cluster.faults.conflicts(None, verbs=("update",), path="/api/v1/nodes/*")
    async with start_receiver(cluster) as receiver:
        status, body = await receiver.post("/alerts", firing(NODE))
        assert status == 503, body
        assert oos_taints(cluster, NODE) == []
        assert terminating_on(cluster, NODE), "nothing may be purged without the fence"
        cluster.faults.clear()
        [decision], retried = await redelivered(receiver, firing(NODE))
    # A delivery cut short by the deadline may have fenced already: the next finishes the purge
    # or finds it done.
    finished = retried and decision["verdict"] in {"purge", "noop"}
    assert decision["verdict"] == "fence" or finished, decision
    dead.check(cluster)


async def _change_node_during_fence_write(cluster: SimulatorHandle, change: str) -> dict[str, Any]:
    """Hold the fence write in the server for a moment and change the node meanwhile, so the
    write lands on a resourceVersion other than the one it was decided on. The write is held
    for 40 times the poll's interval, so the change lands first on a busy machine too."""
    cursor = cluster.faults.cursor
    slow = cluster.faults.add(
        FaultRule("latency", frozenset({"update"}), "/api/v1/nodes/*", count=1, latency=2.0)
    )
    async with start_receiver(cluster) as receiver:
        pending = asyncio.create_task(receiver.alert(firing(NODE)))
        await eventually(lambda: slow.hits >= 1)
        if change == "recovers":
            cluster.sim.node_up(NODE, since_seconds=600)
        else:
            current = cluster.sim.store.get(NODES, None, NODE)
            current["metadata"]["labels"]["example.org/rack"] = "r7"
            cluster.sim.store.update(NODES, None, NODE, current)
        [decision] = await pending
    writes = [
        r.status
        for r in cluster.faults.requests(cursor)
        if r.verb == "update" and r.path.startswith("/api/v1/nodes/")
    ]
    assert writes[0] == 409, f"the held write must meet the changed node: {writes}"
    return decision


async def test_node_changed_while_the_fence_write_is_in_flight_is_fenced_after_rereading(
    cluster: SimulatorHandle, dead: Before
) -> None:
    """An unrelated change (a label) makes the write's resourceVersion stale; the re-read
    decides again on the new version and fences once."""
    decision = await _change_node_during_fence_write(cluster, "labelled")
    assert decision["verdict"] == "fence", decision
    dead.check(cluster)


@pytest.mark.invariant("S1")
async def test_node_recovering_while_the_fence_write_is_in_flight_is_not_fenced(
    cluster: SimulatorHandle, dead: Before
) -> None:
    """The write is decided on facts that go stale before it lands: its resourceVersion test
    fails, the re-read sees a Ready node, and S1 refuses the fence."""
    decision = await _change_node_during_fence_write(cluster, "recovers")
    assert decision["verdict"] == "noop", decision
    assert any(r["guard"] == "ready" and not r["passed"] for r in decision["reasons"]), decision
    assert oos_taints(cluster, NODE) == []
    assert successful(cluster, "PUT", PATCH_NODE, dead.cursor) == 0
    deletes = [r for r in cluster.faults.requests(dead.cursor) if r.method == "DELETE"]
    assert deletes == []


async def test_connection_resets_are_retried(cluster: SimulatorHandle, dead: Before) -> None:
    cluster.faults.reset(2, verbs=("update",), path="/api/v1/nodes/*")
    cluster.faults.reset(3, verbs=("delete",))
    cluster.faults.reset(1, verbs=("list",))
    async with start_receiver(cluster) as receiver:
        [decision] = await receiver.alert(firing(NODE))
    assert decision["verdict"] == "fence", decision
    assert attempts(cluster, "PUT", PATCH_NODE, dead.cursor) == 3
    dead.check(cluster)


async def test_hanging_request_times_out_and_is_retried(
    cluster: SimulatorHandle, dead: Before
) -> None:
    # The server holds the write far longer than the client's 0.5 s call timeout, and far
    # longer than the whole fence takes even on a slow machine.
    cluster.faults.hang_seconds = 8.0
    cluster.faults.hang(1, verbs=("update",), path="/api/v1/nodes/*")

    def fence_writes() -> list[int]:
        # Requests are logged on arrival (status 0) and completed when answered.
        return [
            r.status
            for r in cluster.faults.requests(dead.cursor)
            if (r.method, r.path) == ("PUT", PATCH_NODE)
        ]

    async with start_receiver(cluster) as receiver:
        receiver.pipeline.kube.call_timeout = 0.5
        [decision] = await receiver.alert(firing(NODE))
        # The client gave up on the hung write and fenced with a retry while the server still
        # held the first one: it did not wait for the server to give up.
        assert fence_writes() == [0, 200], "the client must not wait for the server to give up"
    assert decision["verdict"] == "fence", decision
    dead.check(cluster)
    # The abandoned write ends in the server's own timeout and changes nothing.
    await eventually(lambda: sorted(fence_writes()) == [200, 504], within=60)
    dead.check(cluster)


# The request deadline of the tests that take the API down: the 503 comes from it while the API
# is down, and the whole fence of the node (taint and 18 purges, well under a second here) fits in
# it many times over on a machine twice as slow with another process busy on a core.
DOWN_DEADLINE = 5.0


async def test_api_down_past_the_deadline_answers_503_then_redelivery_fences(
    cluster: SimulatorHandle, dead: Before
) -> None:
    async with start_receiver(cluster, deadline_seconds=DOWN_DEADLINE) as receiver:
        cluster.faults.down(30)
        async with receiver.session.post(
            receiver.url + "/alerts",
            json=firing(NODE),
            headers={"Authorization": f"Bearer {receiver.token}"},
        ) as response:
            assert response.status == 503
            assert int(response.headers["Retry-After"]) > 0
        written = [
            r
            for r in cluster.faults.requests(dead.cursor)
            if r.method != "GET" and 200 <= r.status < 300
        ]
        assert written == []
        assert oos_taints(cluster, NODE) == []
        assert orphans(cluster.sim.store.items(NODES)) == []
        cluster.faults.clear()
        [decision], retried = await redelivered(receiver, firing(NODE))
    # A delivery cut short by the deadline may have fenced already: the next finishes the purge
    # or finds it done.
    finished = retried and decision["verdict"] in {"purge", "noop"}
    assert decision["verdict"] == "fence" or finished, decision
    dead.check(cluster)


def _go_down_after(cluster: SimulatorHandle, *, node_tainted: bool, pods_deleted: int) -> None:
    """Take the whole API down from inside the store, at an exact point of the fence: right
    after the taint is written, or after the n-th pod of the node is gone."""
    deleted = 0
    tripped = False

    def listener(event: WatchEvent) -> None:
        nonlocal deleted, tripped
        if tripped:
            return
        if event.resource.key == PODS.key and event.type == "DELETED":
            deleted += 1
        tainted = event.resource.key == NODES.key and bool(oos_taints(cluster, NODE))
        if (node_tainted and tainted) or (pods_deleted and deleted >= pods_deleted):
            tripped = True
            cluster.faults.down(60)

    cluster.sim.store.add_listener(listener)


async def test_api_down_right_after_the_taint_then_reconcile_finishes(
    cluster: SimulatorHandle, dead: Before
) -> None:
    _go_down_after(cluster, node_tainted=True, pods_deleted=0)
    async with start_receiver(cluster, deadline_seconds=DOWN_DEADLINE) as receiver:
        status, body = await receiver.post("/alerts", firing(NODE))
        assert status == 503, body
        assert len(oos_taints(cluster, NODE)) == 1
        assert orphans(cluster.sim.store.items(NODES)) == []
        assert terminating_on(cluster, NODE), "the purge cannot have happened"
        cluster.faults.clear()

        async def reconciled() -> bool:
            status, body = await receiver.post("/reconcile", {})
            # A pass that overran its deadline on a busy machine answers 503 and the next pass
            # carries on where it stopped; any other answer fails at once.
            assert status == 200 or retried_problem(status, body), (status, body)
            return status == 200 and not terminating_on(cluster, NODE)

        await until(reconciled, within=60, interval=0.2)
    dead.check(cluster)


async def test_api_down_midway_through_the_purge_then_redelivery_finishes(
    cluster: SimulatorHandle, dead: Before
) -> None:
    stuck = {p["metadata"]["uid"] for p in terminating_on(cluster, NODE)}
    assert len(stuck) > 3
    _go_down_after(cluster, node_tainted=False, pods_deleted=3)
    async with start_receiver(cluster, deadline_seconds=DOWN_DEADLINE) as receiver:
        status, body = await receiver.post("/alerts", firing(NODE))
        assert status == 503, body
        left = stuck & {p["metadata"]["uid"] for p in terminating_on(cluster, NODE)}
        assert 0 < len(left) <= len(stuck) - 3, "the purge must have stopped partway"
        assert len(oos_taints(cluster, NODE)) == 1
        cluster.faults.clear()
        [again], retried = await redelivered(receiver, firing(NODE))
        # A delivery cut short by the deadline may have purged the rest already.
        assert again["verdict"] == "purge" or (retried and again["verdict"] == "noop"), again
    await eventually(lambda: not terminating_on(cluster, NODE))
    dead.check(cluster)
