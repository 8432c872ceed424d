"""Fencing a dead node with N Terminating pods: nodefence versus the runbook run by hand.

Both work against the same simulated cluster in its own process, with the same fixed latency on
every API request, so the figures compare the number and the shape of API round trips, not
machines. The runbook is the seed's, scripted: ``kubectl taint``, then one ``kubectl delete
--grace-period=0 --force`` per pod, then one ``kubectl patch`` dropping the finalizers of each pod
that has some. Past ``sample`` pods, only that many are done by kubectl and the rest is
extrapolated from their average, which the table says.

The receiver is ``nodefence serve`` in its own process; its peak resident set (``VmHWM``) is read
after the largest fence, and the repeated-alert cost is measured on the node it just fenced.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass

from bench.common import (
    DEAD_NODE,
    LATENCY_SECONDS,
    NAMESPACE,
    POLICY,
    UNLIMITED,
    Cluster,
    ReceiverProcess,
    Row,
    cluster,
    firing,
    median,
    percentile,
)
from bench.processes import eventually
from nodefence.kube.facts import CONTROL_CONFIGMAP

OOS = "node.kubernetes.io/out-of-service"
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}


@dataclass(frozen=True)
class FenceResult:
    pods: int
    nodefence_seconds: float
    answer_seconds: float
    kubectl_seconds: float
    kubectl_sampled: int
    peak_rss_kib: int
    idle_rss_kib: int
    api_requests: int
    repeat_requests: list[int]
    repeat_latencies: list[float]
    # The same fence with the API rate limit and the cached refusals off (``UNLIMITED``).
    unlimited_seconds: float | None = None


def _kubectl(kubeconfig: str, *args: str) -> None:
    subprocess.run(
        ["kubectl", "--kubeconfig", kubeconfig, *args],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def runbook_seconds(pods: int, sample: int) -> tuple[float, int]:
    """The runbook by kubectl on at most ``sample`` pods; the time extrapolated to all of them."""
    with cluster(pods) as sim:
        sim.kill_dead_node(pods)
        sim.set_latency(LATENCY_SECONDS)
        kubeconfig = str(sim.kubeconfig)
        stuck = sorted(p["metadata"]["name"] for p in sim.pods_on_dead_node())
        with_finalizers = {
            p["metadata"]["name"]
            for p in sim.pods_on_dead_node()
            if p["metadata"].get("finalizers")
        }
        done = stuck[: min(sample, len(stuck))]
        started = time.perf_counter()
        _kubectl(kubeconfig, "taint", "node", DEAD_NODE, f"{OOS}=nodeshutdown:NoExecute")
        tainted = time.perf_counter()
        for name in done:
            # --wait=false: a pod kept by a finalizer would otherwise block the script for good.
            _kubectl(
                kubeconfig,
                "delete",
                "pod",
                "-n",
                NAMESPACE,
                name,
                "--grace-period=0",
                "--force",
                "--wait=false",
            )
        for name in done:
            if name in with_finalizers:
                _kubectl(
                    kubeconfig,
                    "patch",
                    "pod",
                    "-n",
                    NAMESPACE,
                    name,
                    "-p",
                    json.dumps({"metadata": {"finalizers": None}}),
                )
        finished = time.perf_counter()
        left = {p["metadata"]["name"] for p in sim.pods_on_dead_node()}
        assert not left & set(done), f"kubectl left {sorted(left & set(done))[:5]}"
        per_pod = (finished - tainted) / len(done) if done else 0.0
        return (tainted - started) + per_pod * len(stuck), len(done)


def _writes(sim: Cluster, cursor: int) -> int:
    return sum(1 for r in sim.requests_since(cursor) if r["verb"] in WRITE_VERBS)


def nodefence_fence(
    pods: int, repeats: int, env: dict[str, str] | None = None
) -> tuple[float, float, int, int, int, list[int], list[float]]:
    with cluster(pods) as sim:
        sim.kill_dead_node(pods)
        sim.set_latency(LATENCY_SECONDS)
        with ReceiverProcess(sim.kubeconfig, policy=POLICY, env=env) as receiver:
            idle_rss = receiver.status_kib("VmRSS")
            payload = firing(DEAD_NODE)
            cursor = sim.cursor()
            started = time.perf_counter()
            status, body = receiver.alert(payload)
            answered = time.perf_counter()
            assert status == 200, body
            verdicts = [d["verdict"] for d in body["decisions"]]
            assert verdicts == ["fence"], body
            eventually(lambda: not sim.pods_on_dead_node(), within=600, interval=0.02, what="purge")
            finished = time.perf_counter()
            api_requests = len(sim.requests_since(cursor))
            peak = receiver.status_kib("VmHWM")
            counts: list[int] = []
            latencies: list[float] = []
            for _ in range(repeats):
                before = sim.cursor()
                began = time.perf_counter()
                status, body = receiver.alert(payload)
                latencies.append(time.perf_counter() - began)
                assert status == 200, body
                counts.append(
                    sum(
                        1
                        for r in sim.requests_since(before)
                        if not r["path"].endswith(PAUSE_SWITCH) and r["verb"] != "watch"
                    )
                )
            return (
                finished - started,
                answered - started,
                peak,
                idle_rss,
                api_requests,
                counts,
                latencies,
            )


def run(
    sizes: tuple[int, ...] = (10, 100, 1000), sample: int = 50, repeats: int = 200
) -> list[FenceResult]:
    results = []
    for pods in sizes:
        seconds, answer, peak, idle, calls, counts, latencies = nodefence_fence(
            pods, repeats if pods == max(sizes) else 0
        )
        unlimited = nodefence_fence(pods, 0, UNLIMITED)[0]
        kubectl, sampled = runbook_seconds(pods, sample)
        results.append(
            FenceResult(
                pods,
                seconds,
                answer,
                kubectl,
                sampled,
                peak,
                idle,
                calls,
                counts,
                latencies,
                unlimited,
            )
        )
        print(
            f"  fence {pods:>5} pods: nodefence {seconds:.2f}s ({unlimited:.2f}s with the API "
            f"limit off), kubectl {kubectl:.2f}s"
            + (f" (extrapolated from {sampled})" if sampled < pods else ""),
            flush=True,
        )
    return results


# A serving receiver re-reads the pause switch every few seconds in the background, whatever
# the alerts do; those reads are not part of answering an alert.
PAUSE_SWITCH = f"/configmaps/{CONTROL_CONFIGMAP}"


def rows(results: list[FenceResult]) -> list[Row]:
    table = []
    for r in results:
        ratio = r.kubectl_seconds / r.nodefence_seconds
        note = f"answer after {r.answer_seconds:.2f}s; {r.api_requests} API requests"
        if r.unlimited_seconds is not None:
            note += (
                f"; {r.unlimited_seconds:.2f} s with the API limit and cache off "
                f"({r.nodefence_seconds / r.unlimited_seconds:.2f}x)"
            )
        if r.kubectl_sampled < r.pods:
            note += f"; kubectl timed on {r.kubectl_sampled} pods, extrapolated"
        target = "≥ 20x" if r.pods == 1000 else ""
        table.append(
            Row(
                f"fence, {r.pods} Terminating pods",
                f"{r.nodefence_seconds:.2f} s",
                f"{r.kubectl_seconds:.2f} s (kubectl)",
                f"{ratio:.1f}x",
                target,
                ("yes" if ratio >= 20 else "NO") if target else "",
                note,
            )
        )
    largest = max(results, key=lambda r: r.pods)
    if largest.repeat_latencies:
        most = max(largest.repeat_requests)
        table.append(
            Row(
                f"repeated alert, fenced node (x{len(largest.repeat_latencies)})",
                f"{median(largest.repeat_requests):.0f} API req (max {most})",
                "",
                "",
                "≤ 2 API req",
                "yes" if most <= 2 else "NO",
                f"p50 {median(largest.repeat_latencies) * 1000:.1f} ms, "
                f"p99 {percentile(largest.repeat_latencies, 0.99) * 1000:.1f} ms; "
                "not counted: the background watches (nodes, the pause switch), whatever the "
                "alerts",
            )
        )
    peak_mb = largest.peak_rss_kib / 1024
    table.append(
        Row(
            f"peak RSS of the receiver, {largest.pods}-pod fence",
            f"{peak_mb:.1f} MB",
            f"{largest.idle_rss_kib / 1024:.1f} MB (idle)",
            f"{peak_mb / (largest.idle_rss_kib / 1024):.2f}x idle",
            "≤ 100 MB",
            "yes" if peak_mb <= 100 else "NO",
            "VmHWM of `nodefence serve`",
        )
    )
    return table
