"""Throughput and latency of ``/alerts`` when there is nothing to do.

Alertmanager repeats notifications (``repeat_interval``) and a flapping cluster sends many, so
the cheap paths bound how much load nodefence puts on the API server and how it behaves under a
storm. Two paths: an alert nodefence does not handle (``skip``, no API request at all) and a
``KubeNodeNotReady`` for a node that is Ready (refused by S1 on the node as the watch-fed index
saw it, without a request; the receiver is probed on ``/readyz`` first, as a kubelet would,
which starts the index). The baseline is ``/healthz`` under the same load: the cost of aiohttp
and the middlewares alone. The S1 path runs once more with the API limit and the cached
refusals off (every alert read live), the before of the same run.
"""

from __future__ import annotations

import json
import subprocess
import sys

from bench.common import (
    LATENCY_SECONDS,
    UNLIMITED,
    ReceiverProcess,
    Row,
    cluster,
    firing,
    median,
    percentile,
    wait_for_node_index,
)

CONCURRENCY = 32
# The S1 refusal is served from the watch-fed node index without a request.
TARGET_S1_PER_SECOND = 1000


def _load(
    url: str, payload: dict[str, object] | None, count: int, seconds: float
) -> dict[str, object]:
    command = [
        sys.executable,
        "-m",
        "bench.loadgen",
        url,
        "bench-token",
        "-" if payload is None else json.dumps(payload),
        str(count),
        str(CONCURRENCY),
        str(seconds),
    ]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    result: dict[str, object] = json.loads(output)
    return result


def run(count: int = 3000, seconds: float = 20.0) -> list[Row]:
    """The defaults, then the S1 case once more with the API limit and cached refusals off."""
    rows = _run(count, seconds, {}, "")
    rows += _run(count, seconds, UNLIMITED, " with the limit and cache off", skip=False)
    return rows


def _run(
    count: int, seconds: float, env: dict[str, str], label: str, *, skip: bool = True
) -> list[Row]:
    rows: list[Row] = []
    with cluster(0) as sim, ReceiverProcess(sim.kubeconfig, env=env) as receiver:
        wait_for_node_index(receiver, sim)
        sim.set_latency(LATENCY_SECONDS)
        _load(receiver.url + "/healthz", None, 200, 10)  # warm-up
        base = _load(receiver.url + "/healthz", None, count, seconds)
        base_rate = len(base["latencies_ms"]) / float(base["seconds"])  # type: ignore[arg-type]
        cases = [
            ("no-op /alerts: unhandled alertname (skip)", firing("control01", "Watchdog"), 500),
            ("no-op /alerts: Ready node (S1 refusal)", firing("control01"), TARGET_S1_PER_SECOND),
        ][0 if skip else 1 :]
        for name, payload, target in cases:
            _load(receiver.url + "/alerts", payload, 200, 10)  # warm-up
            cpu_before = receiver.cpu_seconds()
            result = _load(receiver.url + "/alerts", payload, count, seconds)
            latencies = list(result["latencies_ms"])  # type: ignore[call-overload]
            rate = len(latencies) / float(result["seconds"])  # type: ignore[arg-type]
            # The receiver's own CPU per request: what it costs, whatever else shares the
            # machine (the load generator and other work take the rest of the cores).
            cpu_us = (receiver.cpu_seconds() - cpu_before) / max(1, len(latencies)) * 1e6
            rows.append(
                Row(
                    name + label,
                    f"{rate:.0f} req/s",
                    f"{base_rate:.0f} req/s (GET /healthz)",
                    f"{rate / base_rate:.2f}x",
                    f"≥ {target} req/s" if not label else "",
                    ("yes" if rate >= target else "NO") if not label else "",
                    f"p50 {median(latencies):.1f} ms, p99 {percentile(latencies, 0.99):.1f} ms; "
                    f"{len(latencies)} requests at concurrency {CONCURRENCY}; "
                    f"statuses {result['statuses']}; receiver CPU {cpu_us:.0f} us/request "
                    f"(one core: {1e6 / max(cpu_us, 1.0):.0f} req/s)",
                )
            )
            print(
                f"  {name}{label}: {rate:.0f} req/s, receiver CPU {cpu_us:.0f} us/request",
                flush=True,
            )
    return rows
