"""A storm: N of M nodes dead at once (a rack, switch or zone outage), Alertmanager sending one
webhook per dead node, 50 in flight.

The cluster is ``python -m nodefence_sim.scale`` (nodes of realistic size) in its own process,
built with the outage in it (``--down N --down-since 1200``: the last N kubelets dead 20
minutes ago, settled once, where a control-API call per dead node settled the whole cluster
each time), ``nodefence serve`` in another, probed on ``/readyz`` as a kubelet would (which
starts its node index); the webhooks come from this process. Each size runs twice, on fresh
clusters, in one process: the baseline with the API rate limit and the cached refusals off
(``NODEFENCE_API_QPS=0``, ``NODEFENCE_CACHED_REFUSALS=false``: every alert read live, as before
they existed), then the defaults. Per run:

- every answer's status and time (p50, p99, max), and the whole storm's time;
- the API requests the receiver sent during the storm, from the simulator's request log
  (``GET /sim/v1/requests``: everything, the index's watches and the pause switch included),
  per alert, and the most in any one second (a sliding window over the arrival times);
- fences (verdict ``fence``) against the budget, and the receiver's peak resident set.

Run: ``python -m bench.storm [--sizes 500/2000,1000/5000] [--storm-small]`` (``--storm-small``:
100 of 400, a quick check while developing).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import aiohttp

from bench.common import (
    POLICY,
    TOKEN,
    UNLIMITED,
    ReceiverProcess,
    Row,
    firing,
    median,
    percentile,
    wait_for_node_index,
)
from bench.scale import ScaleSimulator
from nodefence_sim.scale import node_name

SIZES = ((500, 2000), (1000, 5000))
SMALL = ((100, 400),)
IN_FLIGHT = 50
PODS_PER_NODE = 2
ANSWER_SECONDS = 30.0
BUDGET = 1  # the policy's default max_fenced_nodes
DEAD_SECONDS = 1200.0  # long past the policy's waits: every victim may be fenced
MODES = (("baseline: limit and cache off", UNLIMITED), ("defaults", {}))


@dataclass
class StormResult:
    mode: str
    dead: int
    nodes: int
    statuses: dict[int, int] = field(default_factory=dict)
    answer_ms: list[float] = field(default_factory=list)
    seconds: float = 0.0
    requests: int = 0
    peak_second: int = 0
    fences: int = 0
    peak_rss_kib: int = 0

    @property
    def per_alert(self) -> float:
        return self.requests / max(1, self.dead)

    @property
    def all_answered(self) -> bool:
        return (
            self.statuses.get(200, 0) == self.dead and max(self.answer_ms) <= 1000 * ANSWER_SECONDS
        )


def peak_in_any_second(times: Sequence[float]) -> int:
    """The most requests whose arrivals fit in one second (a sliding window)."""
    ordered = sorted(times)
    best = start = 0
    for end, moment in enumerate(ordered):
        while moment - ordered[start] >= 1.0:
            start += 1
        best = max(best, end - start + 1)
    return best


async def _send(url: str, nodes: Sequence[str]) -> tuple[dict[int, int], list[float], int]:
    statuses: dict[int, int] = {}
    answers: list[float] = []
    fences = 0
    gate = asyncio.Semaphore(IN_FLIGHT)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=IN_FLIGHT), timeout=timeout
    ) as session:

        async def one(node: str) -> None:
            nonlocal fences
            async with gate:
                began = time.perf_counter()
                async with session.post(url, json=firing(node), headers=headers) as reply:
                    body = await reply.json(content_type=None)
                    status = reply.status
                answers.append((time.perf_counter() - began) * 1000)
                statuses[status] = statuses.get(status, 0) + 1
                if status == 200:
                    fences += sum(1 for d in body["decisions"] if d["verdict"] == "fence")

        await asyncio.gather(*(one(n) for n in nodes))
    return statuses, answers, fences


@contextlib.contextmanager
def _ready_receiver(sim: ScaleSimulator, env: dict[str, str]) -> Iterator[ReceiverProcess]:
    with ReceiverProcess(sim.kubeconfig, policy=POLICY, env=env) as receiver:
        wait_for_node_index(receiver, sim)
        yield receiver


def measure(dead: int, nodes: int, mode: str, env: dict[str, str]) -> StormResult:
    pods = PODS_PER_NODE * max(0, nodes - 3)
    victims = [node_name(i) for i in range(nodes - dead, nodes)]
    result = StormResult(mode, dead, nodes)
    # The victims are the last nodes, dead before the simulator serves (one settle for all).
    with (
        ScaleSimulator(nodes, pods, down=dead, down_since=DEAD_SECONDS) as sim,
        _ready_receiver(sim, env) as receiver,
    ):
        cursor = sim.cursor()
        began = time.perf_counter()
        result.statuses, result.answer_ms, result.fences = asyncio.run(
            _send(receiver.url + "/alerts", victims)
        )
        result.seconds = time.perf_counter() - began
        sent = sim.requests_since(cursor)
        result.requests = len(sent)
        result.peak_second = peak_in_any_second([float(r["at"]) for r in sent])  # type: ignore[arg-type]
        result.peak_rss_kib = receiver.status_kib("VmHWM")
    print(
        f"  {dead} of {nodes} dead, {mode}: {result.per_alert:.2f} requests/alert, peak "
        f"{result.peak_second}/s, p50 {median(result.answer_ms) / 1000:.2f} s, p99 "
        f"{percentile(result.answer_ms, 0.99) / 1000:.2f} s, total {result.seconds:.1f} s, "
        f"{result.fences} fenced, statuses {result.statuses}, peak RSS "
        f"{result.peak_rss_kib / 1024:.0f} MB",
        flush=True,
    )
    return result


def run(sizes: Sequence[tuple[int, int]] = SIZES) -> list[StormResult]:
    return [measure(dead, nodes, mode, env) for dead, nodes in sizes for mode, env in MODES]


def _met(ok: bool) -> str:
    return "yes" if ok else "NO"


def rows(results: Sequence[StormResult]) -> list[Row]:
    table: list[Row] = []
    for after in results:
        if after.mode != MODES[1][0]:
            continue
        before = next(
            (
                r
                for r in results
                if (r.dead, r.nodes, r.mode) == (after.dead, after.nodes, MODES[0][0])
            ),
            None,
        )
        size = f"storm, {after.dead} of {after.nodes} nodes dead"

        def versus(value: float, of: float | None, unit: str, fmt: str = ".2f") -> tuple[str, str]:
            if of is None:
                return "", ""
            return (
                f"{of:{fmt}}{unit} (limit and cache off)",
                f"{of / value:.1f}x fewer" if value else "",
            )

        base, ratio = versus(after.per_alert, before.per_alert if before else None, "")
        table.append(
            Row(
                f"{size}: API requests per alert",
                f"{after.per_alert:.2f}",
                base,
                ratio,
                "≤ 1.5",
                _met(after.per_alert <= 1.5),
                f"{after.requests} requests for {after.dead} webhooks, "
                f"{IN_FLIGHT} in flight; everything the receiver sent during the storm",
            )
        )
        base, ratio = versus(after.peak_second, before.peak_second if before else None, "/s", "d")
        table.append(
            Row(
                f"{size}: most API requests in any one second",
                f"{after.peak_second}/s",
                base,
                ratio,
                "≤ 100",
                _met(after.peak_second <= 100),
                "sliding one-second window over the simulator's request log",
            )
        )
        p99 = percentile(after.answer_ms, 0.99) / 1000
        worst = max(after.answer_ms) / 1000
        base = ""
        if before is not None:
            base = (
                f"p50 {median(before.answer_ms) / 1000:.2f} s, p99 "
                f"{percentile(before.answer_ms, 0.99) / 1000:.2f} s, total {before.seconds:.1f} s"
            )
        table.append(
            Row(
                f"{size}: answers",
                f"p50 {median(after.answer_ms) / 1000:.2f} s, p99 {p99:.2f} s, max "
                f"{worst:.2f} s, total {after.seconds:.1f} s",
                base,
                f"{after.seconds / before.seconds:.2f}x the total time" if before else "",
                f"every alert 200 within {ANSWER_SECONDS:.0f} s",
                _met(after.all_answered),
                f"statuses {after.statuses}"
                + (f"; baseline statuses {before.statuses}" if before else ""),
            )
        )
        table.append(
            Row(
                f"{size}: fences and peak RSS",
                f"{after.fences} fenced, {after.peak_rss_kib / 1024:.1f} MB",
                (f"{before.fences} fenced, {before.peak_rss_kib / 1024:.1f} MB" if before else ""),
                "",
                f"≤ {BUDGET} fenced (the budget); ≤ 100 MB at 5,000 nodes",
                _met(
                    after.fences <= BUDGET
                    and (after.nodes < 5000 or after.peak_rss_kib / 1024 <= 100)
                ),
                "VmHWM of `nodefence serve` after the storm",
            )
        )
    return table


def sizes_of(text: str) -> tuple[tuple[int, int], ...]:
    pairs = []
    for part in text.split(","):
        dead, nodes = part.split("/")
        pairs.append((int(dead), int(nodes)))
    return tuple(pairs)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.storm", description=__doc__)
    parser.add_argument("--sizes", default="500/2000,1000/5000", help="DEAD/NODES,...")
    parser.add_argument("--storm-small", action="store_true", help="100 of 400 only")
    args = parser.parse_args(argv)
    results = run(SMALL if args.storm_small else sizes_of(args.sizes))
    from bench.__main__ import markdown

    print(markdown(rows(results)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
