"""A fence refused for a passing reason is retried by the reconcile pass, which asks the real
Alertmanager which node alerts are still active, instead of waiting for Alertmanager's repeat."""

from __future__ import annotations

from typing import Any

from tests.seeded_cluster import inference, oos_taints, start_receiver

from nodefence_sim.simulation import Simulation
from nodefence_sim.testing import running_simulator

from .conftest import Starter, alert, poll

NODE = "compute01"
# Scaled down so the test takes seconds: the node must be NotReady (and silent) for 30 s.
POLICY = inference(
    {"rules": [{"name": "default", "min_not_ready_seconds": 30, "lease_staleness_seconds": 30}]}
)


def firing(name: str) -> dict[str, Any]:
    return {
        "version": "4",
        "status": "firing",
        "receiver": "nodefence",
        "groupKey": f'{{}}:{{node="{name}"}}',
        "groupLabels": {"node": name},
        "commonLabels": {"alertname": "KubeNodeNotReady", "node": name},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager.invalid",
        "alerts": [
            {
                "status": "firing",
                "labels": {"alertname": "KubeNodeNotReady", "node": name},
                "annotations": {},
                "startsAt": "2026-01-01T00:00:00Z",
                "endsAt": "0001-01-01T00:00:00Z",
                "fingerprint": "0123456789abcdef",
            }
        ],
    }


async def test_a_too_early_refusal_is_fenced_by_the_next_reconcile_pass(
    start_alertmanager: Starter,
) -> None:
    am = start_alertmanager()
    await am.post_alerts(alert("KubeNodeNotReady", node=NODE))
    async with running_simulator(Simulation.from_scenario("seed")) as cluster:
        # The kubelet stopped 50 s ago; the node controller marked it NotReady 10 s ago.
        cluster.sim.node_down(NODE, since_seconds=50)
        async with start_receiver(cluster, policy=POLICY, alertmanager_url=am.url) as receiver:
            [early] = await receiver.alert(firing(NODE))
            assert early["verdict"] == "noop", early
            blocked = {r["guard"] for r in early["reasons"] if not r["passed"]}
            assert "not-ready-duration" in blocked, early
            assert not oos_taints(cluster, NODE)

            async def fenced_by_reconcile() -> dict[str, Any] | None:
                status, body = await receiver.post("/reconcile", {})
                assert status == 200, body
                mine = [d for d in body["decisions"] if d["node"] == NODE]
                return mine[0] if mine and mine[0]["verdict"] == "fence" else None

            # About 20 s of real time until the 30 s are up; generous for a busy machine.
            decision = await poll(fenced_by_reconcile, within=90, what="the reconcile fence")
            assert oos_taints(cluster, NODE)
    assert decision["alertname"] == "KubeNodeNotReady"
    assert all(r["passed"] for r in decision["reasons"] if r["guard"] != "volumes"), decision
