"""The cache says Ready but the node is dead: the alert is refused now (S1, from the cache, the
safe direction), and once the index hears again, the first reconcile pass (the real
Alertmanager still holding the alert active) fences it on live reads.

How long that takes is bounded by the index's own recovery: its hung watch fails after
``node_index.IDLE_SECONDS`` (20 s) of silence, it retries after at most ``BACKOFF_SECONDS[1]``
(10 s, jittered up to 15 s) and replays what it missed; the next pass after that fences. The
test allows 120 s for it, several times the bound, so a slow machine does not fail it.
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.seeded_cluster import firing, inference, oos_taints, start_receiver

from nodefence.engine.cached import CACHED
from nodefence_sim.simulation import Simulation
from nodefence_sim.testing import running_simulator
from pipeline.cache_support import following, freeze, writes_since

from .conftest import Starter, alert, poll

pytestmark = pytest.mark.invariant("S1")

NODE = "compute01"
CATCH_UP_SECONDS = 120


async def test_refused_on_a_cached_ready_then_fenced_by_the_first_pass_after_catch_up(
    start_alertmanager: Starter,
) -> None:
    am = start_alertmanager()
    await am.post_alerts(alert("KubeNodeNotReady", node=NODE))
    async with (
        running_simulator(Simulation.from_scenario("seed")) as cluster,
        start_receiver(
            cluster, policy=inference(), alertmanager_url=am.url, follow=True
        ) as receiver,
    ):
        index = await following(receiver)
        frozen = await freeze(cluster, index)
        cluster.sim.node_down(NODE, since_seconds=1200)
        since = cluster.faults.cursor
        [refused] = await receiver.alert(firing(NODE))
        assert refused["verdict"] == "noop", refused
        assert [r["guard"] for r in refused["reasons"] if not r["passed"]] == ["ready"], refused
        assert any(r["guard"] == CACHED for r in refused["reasons"]), refused
        assert writes_since(cluster, since) == []
        assert not oos_taints(cluster, NODE)

        cluster.faults.rules.remove(frozen)  # the API server answers the index's watches again

        async def fenced_by_reconcile() -> dict[str, Any] | None:
            status, body = await receiver.post("/reconcile", {})
            assert status == 200, body
            mine = [d for d in body["decisions"] if d["node"] == NODE]
            return mine[0] if mine and mine[0]["verdict"] == "fence" else None

        decision = await poll(
            fenced_by_reconcile, within=CATCH_UP_SECONDS, what="the fence after catch-up"
        )
        assert oos_taints(cluster, NODE)
        assert not any(r["guard"] == CACHED for r in decision["reasons"]), decision
