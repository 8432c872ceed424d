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

``--backend real`` runs each storm on the real control plane (``python -m nodefence_sim.scale
--backend real``: the same nodes and pods on a real kube-apiserver, controller-manager and
scheduler, one kwok holding every node), each followed by the simulator's with the same policy,
as its baseline. There the request log is the API server's audit log, of which only the
receiver's user counts (the benchmark's own reads carry their own User-Agent); the victims die
when the cluster is up, not 20 minutes before (real controllers stamp their own times), so the
benchmark waits until they have been NotReady for the rule's NotReady minimum before it starts
the receiver, as the simulator's victims are long past it when its receiver starts. The cluster
is minutes old, every node just turned Ready: the storm guard's cooldown is 0 in both runs (as
in ``bench.recovery_real``). Per run also the nodes that carry the out-of-service taint after
the storm (what the budget allows, whoever set it off: an alert or the receiver's own pass) and
the other answers' verdicts, each with its first guard that did not pass.

Run: ``python -m bench.storm [--sizes 500/2000,1000/5000] [--storm-small] [--backend real
[--modes defaults] [--no-simulator]]`` (``--storm-small``: 100 of 400, a quick check while
developing).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import aiohttp

from bench.common import (
    POLICY,
    TOKEN,
    UNLIMITED,
    ReceiverProcess,
    Row,
    firing,
    kube_list,
    median,
    percentile,
    sent_by_receiver,
    wait_for_node_index,
)
from bench.processes import eventually
from bench.scale import ScaleSimulator
from nodefence.policy import parse_policy
from nodefence_sim.scale import node_name

SIZES = ((500, 2000), (1000, 5000))
SMALL = ((100, 400),)
IN_FLIGHT = 50
PODS_PER_NODE = 2
ANSWER_SECONDS = 30.0
BUDGET = 1  # the policy's default max_fenced_nodes
DEAD_SECONDS = 1200.0  # long past the policy's waits: every victim may be fenced
MODES: tuple[tuple[str, dict[str, str]], ...] = (
    ("baseline: limit and cache off", UNLIMITED),
    ("defaults", {}),
)
BACKENDS = ("sim", "real")
# The real cluster is minutes old when its storm comes: every node turned Ready at its start,
# which the storm guard's cooldown would read as a storm that just ended.
FRESH_CLUSTER_POLICY: dict[str, Any] = {**POLICY, "cluster": {"storm_cooldown_seconds": 0}}
OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"


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
    backend: str = "sim"
    # Nodes carrying the out-of-service taint after the storm, and what refused the others.
    tainted: int = 0
    refused_by: dict[str, int] = field(default_factory=dict)
    # What the cluster said while it was built (the real backend: how long the load took).
    notes: list[str] = field(default_factory=list)

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


def blocking_guard(decision: dict[str, Any]) -> str:
    """The first guard that did not pass (``-`` where none is named)."""
    return next((r["guard"] for r in decision.get("reasons") or [] if not r["passed"]), "-")


async def _send(
    url: str, nodes: Sequence[str], refused_by: dict[str, int] | None = None
) -> tuple[dict[int, int], list[float], int]:
    statuses: dict[int, int] = {}
    answers: list[float] = []
    fences = 0
    refused = {} if refused_by is None else refused_by
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
                    for d in body["decisions"]:
                        if d["verdict"] != "fence":
                            why = f"{d['verdict']} ({blocking_guard(d)})"
                            refused[why] = refused.get(why, 0) + 1

        await asyncio.gather(*(one(n) for n in nodes))
    return statuses, answers, fences


@contextlib.contextmanager
def _ready_receiver(
    sim: ScaleSimulator, env: dict[str, str], policy: dict[str, Any]
) -> Iterator[ReceiverProcess]:
    with ReceiverProcess(sim.kubeconfig, policy=policy, env=env) as receiver:
        wait_for_node_index(receiver, sim)
        yield receiver


def _instant(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def not_ready_since(nodes: Sequence[dict[str, Any]], names: Sequence[str]) -> float:
    """When the last of ``names`` turned NotReady (its Ready condition's transition, stamped by
    the node-lifecycle controller), as a Unix time."""
    wanted = set(names)
    stamps = []
    for node in nodes:
        if node["metadata"]["name"] not in wanted:
            continue
        ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
        if ready["status"] == "True":
            raise ValueError(f"{node['metadata']['name']} is still Ready")
        stamps.append(_instant(ready["lastTransitionTime"]))
    if len(stamps) != len(wanted):
        raise ValueError(f"{len(wanted) - len(stamps)} of the nodes are not in the cluster")
    return max(stamps)


def policy_waits(policy: dict[str, Any]) -> float:
    """How long after NotReady the rule lets a node be fenced: its NotReady minimum or its
    Lease window, whichever is longer (the Lease went silent before NotReady)."""
    rule = parse_policy(policy).rules[0]
    return float(max(rule.min_not_ready_seconds, rule.lease_staleness_seconds))


def wait_out_the_waits(sim: ScaleSimulator, victims: Sequence[str], policy: dict[str, Any]) -> None:
    """On the real backend: until every victim has been NotReady for the rule's waits, read
    from the Nodes themselves (the API server runs on this machine's clock)."""
    since = not_ready_since(kube_list(sim.kubeconfig, "/api/v1/nodes"), victims)
    waits = policy_waits(policy)
    eventually(
        lambda: time.time() >= since + waits + 1,
        within=waits + 60,
        interval=1.0,
        what=f"the victims NotReady for {waits:.0f} s",
    )


def out_of_service(nodes: Sequence[dict[str, Any]]) -> int:
    return sum(
        1
        for n in nodes
        if any(t.get("key") == OUT_OF_SERVICE for t in n.get("spec", {}).get("taints") or [])
    )


def measure(
    dead: int,
    nodes: int,
    mode: str,
    env: dict[str, str],
    *,
    backend: str = "sim",
    policy: dict[str, Any] = POLICY,
) -> StormResult:
    pods = PODS_PER_NODE * max(0, nodes - 3)
    victims = [node_name(i) for i in range(nodes - dead, nodes)]
    result = StormResult(mode, dead, nodes, backend=backend)
    # The victims are the last nodes, dead before the simulator serves (one settle for all); on
    # the real backend dead once the cluster is up, NotReady when it serves.
    since = DEAD_SECONDS if backend == "sim" else 0.0
    with ScaleSimulator(nodes, pods, down=dead, down_since=since, backend=backend) as sim:
        result.notes = sim.notes
        if backend == "real":
            wait_out_the_waits(sim, victims, policy)
        with _ready_receiver(sim, env, policy) as receiver:
            cursor = sim.cursor()
            began = time.perf_counter()
            result.statuses, result.answer_ms, result.fences = asyncio.run(
                _send(receiver.url + "/alerts", victims, result.refused_by)
            )
            result.seconds = time.perf_counter() - began
            sent = [r for r in sim.requests_since(cursor) if sent_by_receiver(r)]
            result.requests = len(sent)
            result.peak_second = peak_in_any_second([float(r["at"]) for r in sent])  # type: ignore[arg-type]
            result.peak_rss_kib = receiver.status_kib("VmHWM")
            result.tainted = out_of_service(kube_list(sim.kubeconfig, "/api/v1/nodes"))
    print(
        f"  {dead} of {nodes} dead, {backend}, {mode}: {result.per_alert:.2f} requests/alert, "
        f"peak {result.peak_second}/s, p50 {median(result.answer_ms) / 1000:.2f} s, p99 "
        f"{percentile(result.answer_ms, 0.99) / 1000:.2f} s, total {result.seconds:.1f} s, "
        f"{result.fences} fenced by an answer, {result.tainted} tainted, refused by "
        f"{result.refused_by}, statuses {result.statuses}, peak RSS "
        f"{result.peak_rss_kib / 1024:.0f} MB; {'; '.join(result.notes)}",
        flush=True,
    )
    return result


def run(
    sizes: Sequence[tuple[int, int]] = SIZES,
    backend: str = "sim",
    modes: Sequence[tuple[str, dict[str, str]]] = MODES,
    simulator: bool = True,
) -> list[StormResult]:
    """Each storm in each mode; with ``backend="real"`` on the real control plane, each run
    followed by the simulator's with the same policy (unless ``simulator`` is False)."""
    if backend == "sim":
        return [measure(dead, nodes, mode, env) for dead, nodes in sizes for mode, env in modes]
    results = []
    for dead, nodes in sizes:
        for mode, env in modes:
            results.append(
                measure(dead, nodes, mode, env, backend="real", policy=FRESH_CLUSTER_POLICY)
            )
            if simulator:
                results.append(
                    measure(dead, nodes, mode, env, backend="sim", policy=FRESH_CLUSTER_POLICY)
                )
    return results


def _met(ok: bool) -> str:
    return "yes" if ok else "NO"


def rows(results: Sequence[StormResult]) -> list[Row]:
    """The simulator's defaults against its baseline (limit and cache off); where the storms
    also ran on the real control plane, :func:`real_rows` instead."""
    if any(r.backend == "real" for r in results):
        return real_rows(results)
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


def _refusals(result: StormResult) -> str:
    return ", ".join(f"{n} {why}" for why, n in sorted(result.refused_by.items()))


def _base(text: str, sim: StormResult | None) -> str:
    return f"{text} (simulator)" if sim is not None else ""


def _target(text: str, ok: bool, applies: bool) -> tuple[str, str]:
    """A target and whether it was met, for the defaults only (the baseline has none)."""
    return (text, _met(ok)) if applies else ("", "")


def real_rows(results: Sequence[StormResult]) -> list[Row]:
    """One group of rows per storm on the real control plane, the simulator's storm of the same
    size, mode and policy in the same run as its baseline."""
    table: list[Row] = []
    for real in (r for r in results if r.backend == "real"):
        sim = next(
            (
                r
                for r in results
                if r.backend == "sim"
                and (r.dead, r.nodes, r.mode) == (real.dead, real.nodes, real.mode)
            ),
            None,
        )
        size = f"real control plane, storm, {real.dead} of {real.nodes} nodes dead ({real.mode})"
        limited = real.mode == MODES[1][0]

        table.append(
            Row(
                f"{size}: API requests per alert",
                f"{real.per_alert:.2f}",
                _base(f"{sim.per_alert:.2f}", sim) if sim else "",
                f"{real.per_alert / sim.per_alert:.2f}x the simulator"
                if sim and sim.per_alert
                else "",
                *_target("≤ 1.5", real.per_alert <= 1.5, limited),
                f"{real.requests} requests of the receiver's user for {real.dead} webhooks, "
                f"{IN_FLIGHT} in flight, from the kube-apiserver's audit log",
            )
        )
        table.append(
            Row(
                f"{size}: most API requests in any one second",
                f"{real.peak_second}/s",
                _base(f"{sim.peak_second}/s", sim) if sim else "",
                "",
                *_target("≤ 100", real.peak_second <= 100, limited),
                "sliding one-second window over the audit log's request times",
            )
        )
        table.append(
            Row(
                f"{size}: answers",
                f"p50 {median(real.answer_ms) / 1000:.2f} s, p99 "
                f"{percentile(real.answer_ms, 0.99) / 1000:.2f} s, max "
                f"{max(real.answer_ms) / 1000:.2f} s, total {real.seconds:.1f} s",
                _base(
                    f"p50 {median(sim.answer_ms) / 1000:.2f} s, p99 "
                    f"{percentile(sim.answer_ms, 0.99) / 1000:.2f} s, total {sim.seconds:.1f} s",
                    sim,
                )
                if sim
                else "",
                "",
                f"every alert 200 within {ANSWER_SECONDS:.0f} s",
                _met(real.all_answered),
                f"statuses {real.statuses}" + (f"; simulator {sim.statuses}" if sim else ""),
            )
        )
        table.append(
            Row(
                f"{size}: fences, refusals and peak RSS",
                f"{real.tainted} fenced ({real.fences} by an answer), "
                f"{real.peak_rss_kib / 1024:.1f} MB",
                _base(f"{sim.tainted} fenced, {sim.peak_rss_kib / 1024:.1f} MB", sim)
                if sim
                else "",
                "",
                f"{BUDGET} fenced (the budget)",
                _met(real.tainted == BUDGET),
                f"refused: {_refusals(real)}"
                + (f"; simulator: {_refusals(sim)}" if sim else "")
                + f"; nodes tainted out-of-service after the storm; VmHWM of `nodefence serve`; "
                f"{'; '.join(real.notes)}",
            )
        )
    return table


def sizes_of(text: str) -> tuple[tuple[int, int], ...]:
    pairs = []
    for part in text.split(","):
        dead, nodes = part.split("/")
        pairs.append((int(dead), int(nodes)))
    return tuple(pairs)


def modes_of(text: str) -> tuple[tuple[str, dict[str, str]], ...]:
    """``baseline``, ``defaults`` or both (comma-separated), in the order of ``MODES``."""
    names = {"baseline": MODES[0], "defaults": MODES[1]}
    asked = {part.strip() for part in text.split(",")}
    unknown = asked - names.keys()
    if unknown:
        raise SystemExit(f"unknown mode(s) {sorted(unknown)}: baseline, defaults")
    return tuple(mode for key, mode in names.items() if key in asked)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.storm", description=__doc__)
    parser.add_argument("--sizes", default="500/2000,1000/5000", help="DEAD/NODES,...")
    parser.add_argument("--storm-small", action="store_true", help="100 of 400 only")
    parser.add_argument("--backend", choices=BACKENDS, default="sim")
    parser.add_argument(
        "--modes",
        default="baseline,defaults",
        help="baseline (limit and cache off), defaults, or both",
    )
    parser.add_argument(
        "--no-simulator",
        action="store_true",
        help="with --backend real: no simulator run beside each real one",
    )
    args = parser.parse_args(argv)
    modes = modes_of(args.modes)
    sizes = SMALL if args.storm_small else sizes_of(args.sizes)
    results = run(sizes, args.backend, modes, simulator=not args.no_simulator)
    from bench.__main__ import markdown

    print(markdown(rows(results)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
