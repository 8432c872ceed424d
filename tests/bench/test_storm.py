"""The storm and scale benchmarks' real-control-plane arithmetic: which requests count as the
receiver's, when the victims' waits are over, what counts as a fence and what refused the rest,
and the rows that set the real figures beside the simulator's. A slip here would report another
client's requests, or a storm measured before the policy let anything be fenced."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from bench.common import BENCH_AGENT, sent_by_receiver
from bench.scale import SizeResult
from bench.scale import rows as scale_rows
from bench.storm import (
    FRESH_CLUSTER_POLICY,
    MODES,
    StormResult,
    blocking_guard,
    modes_of,
    not_ready_since,
    out_of_service,
    peak_in_any_second,
    policy_waits,
    rows,
)

from nodefence.policy import parse_policy


def test_only_the_receivers_requests_count_on_the_real_log() -> None:
    simulator = {"method": "GET", "path": "/api/v1/nodes/a"}
    assert sent_by_receiver(simulator)
    assert sent_by_receiver({**simulator, "user": "admin", "userAgent": "OpenAPI-Generator"})
    assert not sent_by_receiver({**simulator, "user": "admin", "userAgent": BENCH_AGENT})
    assert not sent_by_receiver({**simulator, "user": "nodefence-sim:harness"})


def test_peak_in_any_second_is_a_sliding_window() -> None:
    assert peak_in_any_second([0.0, 0.5, 0.99, 1.0, 1.2, 1.98, 5.0]) == 4
    assert peak_in_any_second([]) == 0


def _node(name: str, ready: str, since: str, taints: list[dict[str, str]] | None = None) -> Any:
    return {
        "metadata": {"name": name},
        "spec": {"taints": taints or []},
        "status": {
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "lastTransitionTime": since},
                {"type": "Ready", "status": ready, "lastTransitionTime": since},
            ]
        },
    }


def test_the_waits_count_from_the_last_victim_to_turn_not_ready() -> None:
    nodes = [
        _node("a", "Unknown", "2026-12-06T12:00:00Z"),
        _node("b", "Unknown", "2026-12-06T12:00:30Z"),
        _node("c", "True", "2026-12-06T11:00:00Z"),
    ]
    last = datetime(2026, 12, 6, 12, 0, 30, tzinfo=UTC).timestamp()
    assert not_ready_since(nodes, ["a", "b"]) == last
    with pytest.raises(ValueError, match="c is still Ready"):
        not_ready_since(nodes, ["a", "c"])
    with pytest.raises(ValueError, match="1 of the nodes are not in the cluster"):
        not_ready_since(nodes, ["a", "gone"])


def test_the_real_storm_waits_for_the_not_ready_minimum_of_a_fresh_cluster_policy() -> None:
    policy = parse_policy(FRESH_CLUSTER_POLICY)
    assert policy.cluster.storm_cooldown_seconds == 0
    rule = policy.rules[0]
    assert policy_waits(FRESH_CLUSTER_POLICY) == max(
        rule.min_not_ready_seconds, rule.lease_staleness_seconds
    )
    assert policy_waits(FRESH_CLUSTER_POLICY) >= 300


def test_a_fence_is_a_node_with_the_out_of_service_taint() -> None:
    taint = {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown"}
    unreachable = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}
    nodes = [
        _node("a", "Unknown", "2026-12-06T12:00:00Z", [unreachable, taint]),
        _node("b", "Unknown", "2026-12-06T12:00:00Z", [unreachable]),
    ]
    assert out_of_service(nodes) == 1


def test_a_refusal_is_named_by_its_first_guard_that_did_not_pass() -> None:
    decision = {
        "reasons": [
            {"guard": "readiness", "passed": True},
            {"guard": "budget", "passed": False},
            {"guard": "storm", "passed": False},
        ]
    }
    assert blocking_guard(decision) == "budget"
    assert blocking_guard({"reasons": []}) == "-"


def test_modes_are_named_and_kept_in_order() -> None:
    assert modes_of("defaults, baseline") == MODES
    assert modes_of("defaults") == (MODES[1],)
    with pytest.raises(SystemExit, match="fast"):
        modes_of("fast")


def _storm(backend: str, requests: int, peak: int, tainted: int = 1) -> StormResult:
    result = StormResult(MODES[1][0], 500, 2000, backend=backend)
    result.statuses = {200: 500}
    result.answer_ms = [100.0] * 500
    result.requests, result.peak_second, result.tainted = requests, peak, tainted
    result.refused_by = {"skip (budget)": 499}
    return result


def test_real_storm_rows_hold_the_targets_beside_the_simulator() -> None:
    real, sim = _storm("real", 600, 70), _storm("sim", 525, 55)
    per_alert, peak, answers, fences = rows([real, sim])
    assert (per_alert.value, per_alert.baseline, per_alert.met) == (
        "1.20",
        "1.05 (simulator)",
        "yes",
    )
    assert (peak.value, peak.target, peak.met) == ("70/s", "≤ 100", "yes")
    assert answers.met == "yes"
    assert fences.met == "yes"
    assert "refused: 499 skip (budget)" in fences.note


def test_real_storm_rows_say_no_when_a_target_is_missed() -> None:
    per_alert, peak, _, fences = rows([_storm("real", 900, 140, tainted=2)])
    assert (per_alert.met, peak.met, fences.met) == ("NO", "NO", "NO")
    assert per_alert.baseline == ""


def test_scale_rows_set_the_real_refusal_beside_the_simulators() -> None:
    def size(backend: str, ms: float, requests: int) -> SizeResult:
        result = SizeResult(2000, 19970, 1.0, 0.0, {}, backend=backend)
        result.refusal_ms = [ms] * 3
        result.refusal_requests = [requests] * 3
        result.refusal_bytes = [40960] * 3
        result.repeat_ms = [ms] * 3
        result.repeat_requests = [4] * 3
        result.repeat_bytes = [1024] * 3
        result.peak_rss_kib = 90 * 1024
        return result

    table = scale_rows([size("real", 12.0, 4), size("sim", 6.0, 4)])
    real = table[0]
    assert real.name == "real control plane, S1 refusal, 2000 nodes"
    assert "4 API req/alert" in real.value
    assert real.ratio == "2.00x the simulator's p50"
    assert all("real control plane" not in row.name for row in table[1:])
