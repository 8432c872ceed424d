"""``make bench``: every benchmark, then one table against the targets; with ``--write`` the
table and the machine it ran on replace the top of ``bench/RESULTS.md`` (the analysis of missed
targets below it is kept)."""

from __future__ import annotations

import argparse
import datetime
import importlib
import os
import platform
import sys
from collections.abc import Sequence
from pathlib import Path

from bench import fence, noop, recovery, recovery_real, scale, storm
from bench.common import Row

RESULTS = Path(__file__).with_name("RESULTS.md")
ANALYSIS = "All figures come from"
SECTIONS = ("fence", "noop", "scale", "storm", "startup", "recovery")
COLUMNS = ("benchmark", "nodefence", "baseline", "ratio", "target", "met", "notes")


def _startup_rows() -> list[Row]:
    """Cold start by ``bench.startup``, against a minimal aiohttp server timed the same way."""
    try:
        startup = importlib.import_module("bench.startup")
    except ImportError:
        return [Row("cold start", "not measured", note="bench.startup is not present")]
    with startup.SimulatorProcess("seed") as sim:
        serve = startup.measure(
            "nodefence serve", lambda: startup.serve_once(sim.kubeconfig), runs=5
        )
        server = startup.measure("minimal aiohttp server", startup.minimal_server_once, runs=5)
    threshold = startup.THRESHOLD_SECONDS
    return [
        Row(
            "cold start to 200 /readyz (median of 5)",
            f"{serve.median:.2f} s",
            f"{server.median:.2f} s (minimal aiohttp server)",
            f"{serve.median / server.median:.1f}x slower",
            f"≤ {threshold:.1f} s",
            "yes" if serve.median <= threshold else "NO",
            "python -m bench.startup --imports for the breakdown",
        )
    ]


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine() -> str:
    return (
        f"{os.cpu_count()} CPUs ({_cpu_model()}), Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}, "
        f"{datetime.datetime.now(datetime.UTC).strftime('%Y-%m-%d %H:%M UTC')}"
    )


def markdown(rows: Sequence[Row]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in rows:
        cells = (row.name, row.value, row.baseline, row.ratio, row.target, row.met, row.note)
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--sizes", default="10,100,1000", help="pods on the dead node")
    parser.add_argument("--sample", type=int, default=50, help="pods timed with kubectl")
    parser.add_argument("--repeats", type=int, default=200, help="repeated alerts")
    parser.add_argument("--requests", type=int, default=3000, help="no-op load per path")
    parser.add_argument(
        "--scale-sizes",
        default="5,500,2000,5000",
        help="cluster sizes (nodes) for the per-alert cost",
    )
    parser.add_argument("--scale-alerts", type=int, default=30, help="alerts timed per size")
    parser.add_argument(
        "--storm-sizes",
        default="500/2000,1000/5000",
        help="storms as DEAD/NODES, comma-separated",
    )
    parser.add_argument(
        "--storm-small", action="store_true", help="one quick storm, 100 of 400 nodes dead"
    )
    parser.add_argument(
        "--recovery-factor",
        type=float,
        default=recovery.DEFAULT_FACTOR,
        help="time to recovery: every configured delay divided by this",
    )
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        choices=SECTIONS,
        help="leave a section out (repeatable); python -m bench.recovery runs that one alone",
    )
    parser.add_argument(
        "--real-recovery",
        action="store_true",
        help="also time to recovery, unscaled, on the real control plane beside the simulator "
        "(needs make controlplane; about half an hour)",
    )
    parser.add_argument("--write", action="store_true", help="also write bench/RESULTS.md")
    args = parser.parse_args(argv)
    skip = set(args.skip)
    rows: list[Row] = []
    if "fence" not in skip:
        print("fence versus the kubectl runbook", flush=True)
        sizes = tuple(int(n) for n in args.sizes.split(","))
        rows += fence.rows(fence.run(sizes, sample=args.sample, repeats=args.repeats))
    if "noop" not in skip:
        print("no-op load", flush=True)
        rows += noop.run(count=args.requests)
    if "scale" not in skip:
        print("per-alert cost against cluster size", flush=True)
        sizes_of_clusters = tuple(int(n) for n in args.scale_sizes.split(","))
        rows += scale.rows(scale.run(sizes_of_clusters, alerts=args.scale_alerts))
    if "storm" not in skip:
        print("storm: N of M nodes dead, one webhook each, 50 in flight", flush=True)
        storms = storm.SMALL if args.storm_small else storm.sizes_of(args.storm_sizes)
        rows += storm.rows(storm.run(storms))
    if "startup" not in skip:
        print("cold start", flush=True)
        rows += _startup_rows()
    if "recovery" not in skip:
        print("time to recovery, with real Prometheus and Alertmanager", flush=True)
        rows += recovery.run(args.recovery_factor)
    if args.real_recovery:
        print("time to recovery on the real control plane", flush=True)
        rows += recovery_real.rows(recovery_real.run())
    table = markdown(rows)
    print()
    print(table)
    print()
    print(machine())
    if args.write:
        previous = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else ""
        _, marker, analysis = previous.partition(ANALYSIS)
        RESULTS.write_text(
            f"# Benchmark results\n\n{machine()}\n\n{table}\n\n{marker}{analysis}",
            encoding="utf-8",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
