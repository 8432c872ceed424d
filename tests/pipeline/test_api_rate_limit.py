"""The process's rate limit, end to end: a webhook whose requests cannot be served under the
limit before its deadline is answered 503 (which Alertmanager retries) and writes nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from tests.seeded_cluster import start_receiver

from nodefence_sim.demo.payloads import node_alert, webhook
from nodefence_sim.testing import SimulatorHandle


# Which 503 answers depends on the request being served within its 3 s deadline: not beside
# parallel workers on a busy machine.
@pytest.mark.serial
async def test_reads_for_refusals_wait_and_get_the_503_alertmanager_retries(
    cluster: SimulatorHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A receiver limited to one request every ten seconds, with a 3 s deadline: an alert that
    needs the API beyond its burst is answered 503 before its deadline, not held."""
    monkeypatch.setenv("NODEFENCE_API_QPS", "0.1")
    monkeypatch.setenv("NODEFENCE_API_BURST", "2")
    cluster.sim.node_down("compute01", since_seconds=1200)
    payload = webhook(
        [node_alert("compute01", starts_at=datetime.now(UTC) - timedelta(minutes=20))]
    )
    async with start_receiver(cluster, deadline_seconds=3) as receiver:
        assert receiver.pipeline.kube.limiter is not None
        since = cluster.faults.cursor
        status, body = await receiver.post("/alerts", payload)
        assert status == 503, body
        assert body["type"] == "urn:nodefence:problem:cluster-unavailable", body
        assert receiver.pipeline.kube.limiter.stats.refused >= 1
        async with receiver.session.get(receiver.url + "/metrics") as reply:
            metrics = await reply.text()
        assert 'code="rate-limited"' in metrics, metrics
        writes = [r for r in cluster.faults.requests(since) if r.method != "GET"]
        assert writes == []
