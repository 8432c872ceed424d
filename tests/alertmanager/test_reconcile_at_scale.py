"""The reconcile pass with hundreds of active node alerts (an outage), against the real
Alertmanager holding them and a simulated cluster of nodes of realistic size: every alert is
judged, by the same rules as a webhook (refusals from the cache, actions on live reads), within
the budget, at a fraction of the requests a live read per alert costs; and a pass never
overlaps the next."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from aiohttp import web
from tests.seeded_cluster import inference, oos_taints, start_receiver

from nodefence.engine.cached import CACHED
from nodefence_sim.scale import node_name, simulation
from nodefence_sim.testing import running_simulator
from pipeline.cache_support import following

from .conftest import Served, Starter, alert

NODES = 300
DEAD = 100  # a third: within the default storm threshold (half), so the budget decides
# A stub Alertmanager holds a pass's query this long at most, giving another pass every chance
# to arrive meanwhile if it could.
HOLD_SECONDS = 5.0


async def test_a_pass_judges_hundreds_of_active_alerts_within_the_budget_from_the_cache(
    start_alertmanager: Starter,
) -> None:
    am = start_alertmanager()
    dead = [node_name(i) for i in range(NODES - DEAD, NODES)]
    await am.post_alerts(*(alert("KubeNodeNotReady", node=name) for name in dead))
    async with running_simulator(simulation(NODES, NODES)) as cluster:
        for name in dead:
            cluster.sim.node_down(name, since_seconds=1200)
        async with start_receiver(
            cluster, policy=inference(), alertmanager_url=am.url, deadline_seconds=60, follow=True
        ) as receiver:
            await following(receiver)
            since = cluster.faults.cursor
            status, body = await receiver.post("/reconcile", {})
            assert status == 200, body
            sent = cluster.faults.requests(since)
    judged = {d["node"]: d for d in body["decisions"]}
    assert set(judged) == set(dead)
    fenced = [n for n, d in judged.items() if d["verdict"] == "fence"]
    assert len(fenced) == 1, fenced
    assert oos_taints(cluster, fenced[0])
    refused = [d for d in judged.values() if d["verdict"] == "noop"]
    assert len(refused) == DEAD - 1
    for decision in refused:
        blocked = {r["guard"] for r in decision["reasons"] if not r["passed"]}
        assert blocked == {"fence-budget"}, decision
    from_cache = [d for d in refused if any(r["guard"] == CACHED for r in d["reasons"])]
    assert len(from_cache) >= DEAD // 2, len(from_cache)
    # A live read of each alert would be four requests (node, Lease, pods, record) and an
    # Event; the pass reads only where it fences.
    node_reads = [r for r in sent if r.method == "GET" and r.path.startswith("/api/v1/nodes/")]
    assert len(node_reads) < DEAD // 2, len(node_reads)
    assert len(sent) < 2 * DEAD, len(sent)


def holding_alertmanager(nodes: list[str], spans: list[tuple[float, float]]) -> web.Application:
    """Answers the active-alert query with ``nodes``' alerts, each answer held until another
    query arrives or ``HOLD_SECONDS`` pass; records when each query was being answered."""
    arrived = asyncio.Event()
    loop_time: Callable[[], float] = asyncio.get_running_loop().time

    async def alerts(_request: web.Request) -> web.Response:
        began = loop_time()
        arrived.set()
        arrived.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(arrived.wait(), HOLD_SECONDS)
        spans.append((began, loop_time()))
        body: list[dict[str, Any]] = [
            {
                "labels": {"alertname": "KubeNodeNotReady", "node": name},
                "annotations": {},
                "startsAt": "2026-01-01T00:00:00Z",
                "endsAt": "2099-01-01T00:00:00Z",
                "fingerprint": f"{index:016x}",
                "status": {"state": "active", "silencedBy": [], "inhibitedBy": []},
                "receivers": [{"name": "nodefence"}],
                "updatedAt": "2026-01-01T00:00:00Z",
                "generatorURL": "",
            }
            for index, name in enumerate(nodes)
        ]
        return web.json_response(body)

    app = web.Application()
    app.router.add_get("/api/v2/alerts", alerts)
    return app


async def test_a_pass_asked_for_while_one_runs_starts_when_it_has_ended(
    serve: Callable[[web.Application], Any],
) -> None:
    spans: list[tuple[float, float]] = []
    async with running_simulator(simulation(10, 10)) as cluster:
        dead = node_name(9)
        cluster.sim.node_down(dead, since_seconds=1200)
        served: Served = await serve(holding_alertmanager([dead], spans))
        async with start_receiver(
            cluster, policy=inference(), alertmanager_url=served.url, deadline_seconds=60
        ) as receiver:
            first, second = await asyncio.gather(
                receiver.post("/reconcile", {}), receiver.post("/reconcile", {})
            )
    assert first[0] == second[0] == 200, (first, second)
    assert len(spans) == 2, spans
    (_began_a, ended_a), (began_b, _ended_b) = sorted(spans)
    assert began_b >= ended_a, spans
    verdicts = sorted(d["verdict"] for _, body in (first, second) for d in body["decisions"])
    assert verdicts.count("fence") == 1, verdicts
