"""Per-alert cost against cluster size: 5, 500, 2,000 and 5,000 nodes of realistic size.

Each size is a simulated cluster built by ``nodefence_sim.scale`` (nodes of ~9 KB, ten bare
pods per worker) in its own process, and ``nodefence serve`` in another, probed on ``/readyz``
as a kubelet would (which starts its node index). Per size:

- the simulator itself: idle CPU (share of one core over a few seconds, nothing asked of it)
  and its answer times for a full paged Node list, the Table form of it, a pod list by field
  selector and a watch's first reply, so that it is known not to be the bottleneck;
- the S1 refusal (an alert for a Ready node) and a repeated alert on a fenced node: p50 and
  p99 latency, API requests per alert (the simulator's request log, without the index's
  watch and the background pause-switch read) and bytes read per alert: the replies to the
  alert's GET requests, fetched again by the benchmark right after the alert (the replies to
  its writes, an Event of about 1 KB, are not counted);
- the receiver's peak resident set (``VmHWM``) at the end.

The ratio is against the 5-node cluster in the same run.

``--backend real`` measures the S1 refusal on the real control plane too (``python -m
nodefence_sim.scale --backend real``: the same nodes and pods on a real kube-apiserver, one kwok
holding every node), each size followed by the simulator's as its baseline: latency, the
receiver's API requests per alert (the kube-apiserver's audit log, the receiver's user only) and
the bytes those reads return, and the receiver's peak resident set. The repeated alert on a
fenced node needs a node dead 20 minutes, which real controllers cannot backdate, so it is the
simulator's only.
Run: ``python -m bench.scale [--sizes 5,500,2000,5000] [--alerts 50] [--backend real
[--no-simulator]]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import (
    POLICY,
    ReceiverProcess,
    Row,
    firing,
    kube_get,
    median,
    percentile,
    request,
    sent_by_receiver,
    stop,
    wait_for_node_index,
)
from nodefence.kube.facts import CONTROL_CONFIGMAP
from nodefence_sim.scale import node_name
from nodefence_sim.server import LISTENING

SIZES = (5, 500, 2000, 5000)
PODS_PER_NODE = 10
# A real control plane loading 2,000 nodes and 20,000 pods on two busy cores takes longest.
BUILD_TIMEOUT = 1800.0
IDLE_SECONDS = 5.0
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
BACKGROUND = (f"/configmaps/{CONTROL_CONFIGMAP}",)


@dataclass
class SizeResult:
    nodes: int
    pods: int
    build_seconds: float
    sim_idle_cpu: float
    sim_ms: dict[str, float]
    refusal_ms: list[float] = field(default_factory=list)
    refusal_requests: list[int] = field(default_factory=list)
    refusal_bytes: list[int] = field(default_factory=list)
    repeat_ms: list[float] = field(default_factory=list)
    repeat_requests: list[int] = field(default_factory=list)
    repeat_bytes: list[int] = field(default_factory=list)
    peak_rss_kib: int = 0
    backend: str = "sim"
    notes: list[str] = field(default_factory=list)
    # The receiver's CPU time per S1 refusal over the series (its watches' events included):
    # what the receiver spends, apart from how busy the machine around it is.
    refusal_cpu_ms: float = 0.0


class ScaleSimulator:
    """``python -m nodefence_sim.scale`` in a subprocess; ``backend="real"``: the same cluster
    on the real control plane, one kwok for every node (``--backend real``), its request log
    the kube-apiserver's audit log. What it prints before it listens (how long the load took)
    is kept in ``notes``."""

    def __init__(
        self,
        nodes: int,
        pods: int,
        *,
        down: int = 0,
        down_since: float = 0.0,
        backend: str = "sim",
    ) -> None:
        self.nodes = nodes
        self.pods = pods
        self.down = down
        self.down_since = down_since
        self.backend = backend
        self._tmp = tempfile.TemporaryDirectory(prefix="nodefence-scale-")
        self.kubeconfig = Path(self._tmp.name) / "kubeconfig"
        self.url = ""
        self.notes: list[str] = []
        self.process: subprocess.Popen[str] | None = None

    def __enter__(self) -> ScaleSimulator:
        command = [sys.executable, "-m", "nodefence_sim.scale", "--nodes", str(self.nodes)]
        command += ["--pods", str(self.pods), "--kubeconfig-out", str(self.kubeconfig)]
        command += ["--down", str(self.down), "--down-since", str(self.down_since)]
        command += ["--backend", self.backend]
        # Its errors go to a file, so that a cluster that did not come up says why.
        errors = Path(self._tmp.name) / "stderr"
        with errors.open("w") as sink:
            self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=sink, text=True)
        lines: queue.Queue[str] = queue.Queue()
        stdout = self.process.stdout
        assert stdout is not None
        threading.Thread(target=lambda: [lines.put(line) for line in stdout], daemon=True).start()
        deadline = time.monotonic() + BUILD_TIMEOUT
        while True:
            try:
                line = lines.get(timeout=1.0)
            except queue.Empty:
                if self.process.poll() is None and time.monotonic() < deadline:
                    continue
                said = errors.read_text(errors="replace")[-3000:]
                self.__exit__()
                raise RuntimeError(
                    f"nodefence_sim.scale --backend {self.backend} not listening "
                    f"(exit {self.process.returncode}, {BUILD_TIMEOUT:.0f}s allowed); "
                    f"it said {self.notes}, then:\n{said}"
                ) from None
            if line.startswith(LISTENING):
                break
            self.notes.append(line.strip())
        self.url = line[len(LISTENING) :].strip()
        return self

    def __exit__(self, *_: object) -> None:
        if self.process is not None:
            stop(self.process)
        self._tmp.cleanup()

    def cpu_seconds(self) -> float:
        assert self.process is not None
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def cursor(self) -> int:
        return int(request(f"{self.url}/sim/v1/requests?since=999999999999")[1]["cursor"])

    def requests_since(self, cursor: int) -> list[dict[str, object]]:
        return list(request(f"{self.url}/sim/v1/requests?since={cursor}")[1]["requests"])


def _timed(url: str, accept: str = "application/json") -> float:
    began = time.perf_counter()
    req = urllib.request.Request(url, headers={"Accept": accept})  # noqa: S310 - loopback
    with urllib.request.urlopen(req, timeout=120) as response:  # noqa: S310
        response.read()
    return (time.perf_counter() - began) * 1000


def _watch_first_reply(url: str) -> float:
    began = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as response:  # noqa: S310 - loopback
        response.readline()
    return (time.perf_counter() - began) * 1000


def simulator_figures(sim: ScaleSimulator) -> tuple[float, dict[str, float]]:
    before, began = sim.cpu_seconds(), time.monotonic()
    time.sleep(IDLE_SECONDS)
    idle = (sim.cpu_seconds() - before) / (time.monotonic() - began)

    def full_list() -> float:
        total, token = 0.0, ""
        while True:
            began = time.perf_counter()
            _, body = request(f"{sim.url}/api/v1/nodes?limit=500&continue={token}")
            total += (time.perf_counter() - began) * 1000
            token = body["metadata"].get("continue") or ""
            if not token:
                return total

    worker = node_name(sim.nodes - 1)

    def watch_replay() -> float:
        """A Node written, then watched from just before that write: the replay's first
        event (the simulator's own renewals and heartbeats may not touch a Node for minutes)."""
        touch = {"metadata": {"labels": {"bench.nodefence.io/touched": str(time.time_ns())}}}
        req = urllib.request.Request(  # noqa: S310 - loopback
            f"{sim.url}/api/v1/nodes/{worker}",
            data=json.dumps(touch).encode(),
            method="PATCH",
            headers={"Content-Type": "application/merge-patch+json"},
        )
        with urllib.request.urlopen(req, timeout=120) as response:  # noqa: S310
            version = int(json.loads(response.read())["metadata"]["resourceVersion"])
        return _watch_first_reply(
            f"{sim.url}/api/v1/nodes?watch=true&resourceVersion={version - 1}&timeoutSeconds=5"
        )

    figures = {
        "node list (paged)": full_list(),
        "node Table": _timed(f"{sim.url}/api/v1/nodes?limit=500", TABLE),
        "pods by field selector": _timed(
            f"{sim.url}/api/v1/pods?fieldSelector=spec.nodeName%3D{worker}&limit=500"
        ),
        "watch, first event": watch_replay(),
    }
    return idle, figures


def _reply_bytes(sim: ScaleSimulator, records: list[dict[str, object]]) -> int:
    """The size of the replies to the alert's GET requests, fetched again from the cluster."""
    total = 0
    for r in records:
        if r["method"] == "GET":
            query = f"?{r['query']}" if r["query"] else ""
            total += len(kube_get(sim.kubeconfig, f"{r['path']}{query}")[1])
    return total


def _alerts(
    sim: ScaleSimulator,
    receiver: ReceiverProcess,
    node: str,
    count: int,
    expect: Callable[[list[str]], bool],
) -> tuple[list[float], list[int], list[int]]:
    latencies, requests, read = [], [], []
    payload = firing(node)
    for _ in range(count):
        cursor = sim.cursor()
        began = time.perf_counter()
        status, body = receiver.alert(payload)
        latencies.append((time.perf_counter() - began) * 1000)
        assert status == 200, body
        verdicts = [d["verdict"] for d in body["decisions"]]
        assert expect(verdicts), verdicts
        mine = [
            r
            for r in sim.requests_since(cursor)
            if r["verb"] != "watch"
            and not str(r["path"]).endswith(BACKGROUND)
            and sent_by_receiver(r)
        ]
        requests.append(len(mine))
        read.append(_reply_bytes(sim, mine))
    return latencies, requests, read


@contextlib.contextmanager
def receiver_for(sim: ScaleSimulator) -> Iterator[ReceiverProcess]:
    with ReceiverProcess(sim.kubeconfig, policy=POLICY) as receiver:
        wait_for_node_index(receiver, sim)
        yield receiver


def measure(nodes: int, alerts: int) -> SizeResult:
    pods = PODS_PER_NODE * max(0, nodes - 3)
    began = time.monotonic()
    with ScaleSimulator(nodes, pods) as sim:
        built = time.monotonic() - began
        idle, figures = simulator_figures(sim)
        result = SizeResult(nodes, pods, built, idle, figures)
        ready_node, dead_node = node_name(nodes - 1), node_name(nodes - 2)
        status, body = request(
            f"{sim.url}/sim/v1/nodes/{dead_node}/down", method="POST", body={"sinceSeconds": 1200}
        )
        assert status < 300, body
        with receiver_for(sim) as receiver:
            cpu = receiver.cpu_seconds()
            result.refusal_ms, result.refusal_requests, result.refusal_bytes = _alerts(
                sim, receiver, ready_node, alerts, lambda v: len(v) == 1 and v != ["fence"]
            )
            result.refusal_cpu_ms = (receiver.cpu_seconds() - cpu) * 1000 / alerts
            first = receiver.alert(firing(dead_node))
            assert first[0] == 200, first
            result.repeat_ms, result.repeat_requests, result.repeat_bytes = _alerts(
                sim, receiver, dead_node, alerts, lambda v: len(v) == 1
            )
            result.peak_rss_kib = receiver.status_kib("VmHWM")
    print(
        f"  {nodes:>5} nodes: S1 refusal p50 {median(result.refusal_ms):.1f} ms, "
        f"{median(result.refusal_bytes) / 1024:.0f} KiB read, sim idle {idle:.0%} of a core, "
        f"built in {built:.0f}s",
        flush=True,
    )
    return result


def measure_real(nodes: int, alerts: int) -> SizeResult:
    """The S1 refusal on the real control plane: the same cluster, the same alerts."""
    pods = PODS_PER_NODE * max(0, nodes - 3)
    began = time.monotonic()
    with ScaleSimulator(nodes, pods, backend="real") as sim:
        result = SizeResult(nodes, pods, time.monotonic() - began, 0.0, {}, backend="real")
        result.notes = sim.notes
        with receiver_for(sim) as receiver:
            cpu = receiver.cpu_seconds()
            result.refusal_ms, result.refusal_requests, result.refusal_bytes = _alerts(
                sim,
                receiver,
                node_name(nodes - 1),
                alerts,
                lambda v: len(v) == 1 and v != ["fence"],
            )
            result.refusal_cpu_ms = (receiver.cpu_seconds() - cpu) * 1000 / alerts
            result.peak_rss_kib = receiver.status_kib("VmHWM")
    print(
        f"  {nodes:>5} nodes, real control plane: S1 refusal p50 "
        f"{median(result.refusal_ms):.1f} ms, {median(result.refusal_requests):.0f} requests, "
        f"{median(result.refusal_bytes) / 1024:.0f} KiB read; {'; '.join(result.notes)}",
        flush=True,
    )
    return result


def run(
    sizes: Sequence[int] = SIZES, alerts: int = 50, backend: str = "sim", simulator: bool = True
) -> list[SizeResult]:
    """Each size on the simulator; with ``backend="real"`` each on the real control plane
    first, then (unless ``simulator`` is False) on the simulator beside it."""
    if backend == "sim":
        return [measure(n, alerts) for n in sizes]
    results = []
    for n in sizes:
        results.append(measure_real(n, alerts))
        if simulator:
            results.append(measure(n, alerts))
    return results


def real_rows(results: Sequence[SizeResult]) -> list[Row]:
    """The S1 refusal on the real control plane, the simulator's of the same size in the same
    run as its baseline."""
    table: list[Row] = []
    for r in (r for r in results if r.backend == "real"):
        sim = next((s for s in results if s.backend == "sim" and s.nodes == r.nodes), None)
        p50 = median(r.refusal_ms)
        table.append(
            Row(
                f"real control plane, S1 refusal, {r.nodes} nodes",
                f"p50 {p50:.1f} ms, p99 {percentile(r.refusal_ms, 0.99):.1f} ms; "
                f"{median(r.refusal_requests):.0f} API req/alert (max {max(r.refusal_requests)}), "
                f"{median(r.refusal_bytes) / 1024:.1f} KiB read/alert; receiver CPU "
                f"{r.refusal_cpu_ms:.1f} ms/alert; peak RSS {r.peak_rss_kib / 1024:.1f} MB",
                ""
                if sim is None
                else f"p50 {median(sim.refusal_ms):.1f} ms; "
                f"{median(sim.refusal_requests):.0f} API req/alert, "
                f"{median(sim.refusal_bytes) / 1024:.1f} KiB read/alert; receiver CPU "
                f"{sim.refusal_cpu_ms:.1f} ms/alert; peak RSS {sim.peak_rss_kib / 1024:.1f} MB "
                "(simulator)",
                "" if sim is None else f"{p50 / median(sim.refusal_ms):.2f}x the simulator's p50",
                "",
                "",
                f"{len(r.refusal_ms)} alerts for a Ready node; {r.pods} pods; the receiver's "
                f"requests from the kube-apiserver's audit log; {'; '.join(r.notes)}",
            )
        )
    return table


def rows(results: Sequence[SizeResult]) -> list[Row]:
    """The simulator's sizes against its smallest; where sizes also ran on the real control
    plane, :func:`real_rows` first."""
    real = real_rows(results)
    results = [r for r in results if r.backend == "sim"]
    if not results:
        return real
    return real + _sim_rows(results)


def _sim_rows(results: Sequence[SizeResult]) -> list[Row]:
    base = min(results, key=lambda r: r.nodes)
    base_p50 = median(base.refusal_ms)
    table: list[Row] = []
    for r in results:
        p50 = median(r.refusal_ms)
        ratio = p50 / base_p50
        target = "≤ 3x the 5-node p50" if r.nodes == 2000 else ""
        table.append(
            Row(
                f"S1 refusal, {r.nodes} nodes",
                f"p50 {p50:.1f} ms, p99 {percentile(r.refusal_ms, 0.99):.1f} ms",
                f"p50 {base_p50:.1f} ms ({base.nodes} nodes)",
                f"{ratio:.2f}x",
                target,
                ("yes" if ratio <= 3 else "NO") if target else "",
                f"{median(r.refusal_requests):.0f} API req/alert, "
                f"{median(r.refusal_bytes) / 1024:.1f} KiB read/alert; {r.pods} pods",
            )
        )
    for r in results:
        read = median(r.repeat_bytes)
        target = "< 1 MB read/alert" if r.nodes == 5000 else ""
        table.append(
            Row(
                f"repeated alert on a fenced node, {r.nodes} nodes",
                f"p50 {median(r.repeat_ms):.1f} ms, p99 {percentile(r.repeat_ms, 0.99):.1f} ms",
                f"p50 {median(base.repeat_ms):.1f} ms ({base.nodes} nodes)",
                f"{median(r.repeat_ms) / median(base.repeat_ms):.2f}x",
                target,
                ("yes" if read < 1_000_000 else "NO") if target else "",
                f"{median(r.repeat_requests):.0f} API req/alert (max {max(r.repeat_requests)}), "
                f"{read / 1024:.1f} KiB read/alert (max {max(r.repeat_bytes) / 1024:.1f})",
            )
        )
    for r in results:
        mb = r.peak_rss_kib / 1024
        target = "≤ 100 MB" if r.nodes == 5000 else ""
        table.append(
            Row(
                f"peak RSS of the receiver, {r.nodes} nodes",
                f"{mb:.1f} MB",
                f"{base.peak_rss_kib / 1024:.1f} MB ({base.nodes} nodes)",
                f"{r.peak_rss_kib / base.peak_rss_kib:.2f}x",
                target,
                ("yes" if mb <= 100 else "NO") if target else "",
                "VmHWM of `nodefence serve` after both alert series",
            )
        )
    for r in results:
        target = "< 30% of a core" if r.nodes == 5000 else ""
        answers = ", ".join(f"{name} {ms:.0f} ms" for name, ms in r.sim_ms.items())
        table.append(
            Row(
                f"simulator, {r.nodes} nodes / {r.pods} pods",
                f"idle {r.sim_idle_cpu:.0%} of a core",
                "",
                "",
                target,
                ("yes" if r.sim_idle_cpu < 0.30 else "NO") if target else "",
                f"{answers}; built in {r.build_seconds:.0f} s",
            )
        )
    return table


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__)
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--alerts", type=int, default=50)
    parser.add_argument("--backend", choices=("sim", "real"), default="sim")
    parser.add_argument(
        "--no-simulator",
        action="store_true",
        help="with --backend real: no simulator run beside each real one",
    )
    args = parser.parse_args(argv)
    sizes = tuple(int(n) for n in args.sizes.split(","))
    results = run(sizes, args.alerts, args.backend, simulator=not args.no_simulator)
    from bench.__main__ import markdown

    print(markdown(rows(results)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
