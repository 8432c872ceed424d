"""Cold start of ``nodefence serve``: from process start to the first 200 from ``/readyz``.

A Knative install scales nodefence to zero, so the first webhook of an outage waits for a new
process to become ready. A number alone says little about a machine, so the same run times
baselines: a bare interpreter, an interpreter that imports aiohttp, and a minimal aiohttp server
to its first 200. The ratio to the minimal server is what belongs to nodefence itself.

Each subject runs once unmeasured first, so that every run finds compiled bytecode and the page
cache in the same state. ``nodefence serve`` runs against a simulated cluster in its own
process (``/readyz`` asks the cluster). When the median start is over the threshold, or with
``--imports``, ``python -X importtime`` tells which imports the time goes to.

Run: ``python -m bench.startup [--runs 10] [--imports]``.
"""

from __future__ import annotations

import argparse
import math
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.processes import free_port
from nodefence_sim.testing import SimulatorProcess

READY_TIMEOUT = 30.0
POLL_INTERVAL = 0.002
THRESHOLD_SECONDS = 1.0

MINIMAL_SERVER = """
import os
from aiohttp import web

async def ready(_request):
    return web.Response(text="ok")

app = web.Application()
app.router.add_get("/readyz", ready)
web.run_app(app, host="127.0.0.1", port=int(os.environ["PORT"]), print=None)
"""


@dataclass(frozen=True)
class Stats:
    name: str
    samples: list[float]

    @property
    def minimum(self) -> float:
        return min(self.samples)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def p90(self) -> float:
        ordered = sorted(self.samples)
        return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]


def answers_200(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:  # noqa: S310 - loopback
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def time_to_exit(argv: Sequence[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def time_to_ready(argv: Sequence[str], env: Mapping[str, str], port: int) -> float:
    """Seconds from just before the process is spawned to its first 200 on ``/readyz``."""
    url = f"http://127.0.0.1:{port}/readyz"
    start = time.perf_counter()
    process = subprocess.Popen(
        list(argv),
        env={**os.environ, **env},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while not answers_200(url):
            if process.poll() is not None:
                raise RuntimeError(f"{argv} exited with {process.returncode} before ready")
            if time.perf_counter() - start > READY_TIMEOUT:
                raise RuntimeError(f"{argv} not ready within {READY_TIMEOUT}s")
            time.sleep(POLL_INTERVAL)
        return time.perf_counter() - start
    finally:
        stop(process)


def measure(name: str, once: Callable[[], float], runs: int) -> Stats:
    once()
    return Stats(name, [once() for _ in range(runs)])


def serve_env(kubeconfig: Path, port: int) -> dict[str, str]:
    return {
        "PORT": str(port),
        "NODEFENCE_HOST": "127.0.0.1",
        "NODEFENCE_ALERT_TOKEN": secrets.token_urlsafe(16),
        "NODEFENCE_NAMESPACE": "nodefence",
        "NODEFENCE_LOG_LEVEL": "warning",
        "KUBECONFIG": str(kubeconfig),
    }


def serve_once(kubeconfig: Path) -> float:
    port = free_port()
    argv = [sys.executable, "-m", "nodefence", "serve"]
    return time_to_ready(argv, serve_env(kubeconfig, port), port)


def minimal_server_once() -> float:
    port = free_port()
    return time_to_ready([sys.executable, "-c", MINIMAL_SERVER], {"PORT": str(port)}, port)


def import_times(kubeconfig: Path) -> list[tuple[str, int, int]]:
    """``-X importtime`` of one ``nodefence serve`` start: (module, self us, cumulative us).

    The report goes to a file, not a pipe: it is larger than a pipe's buffer, and a process
    blocked on a full pipe would never become ready."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/readyz"
    with tempfile.TemporaryFile("w+") as report:
        process = subprocess.Popen(
            [sys.executable, "-X", "importtime", "-m", "nodefence", "serve"],
            env={**os.environ, **serve_env(kubeconfig, port)},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=report,
        )
        try:
            deadline = time.monotonic() + READY_TIMEOUT
            while not answers_200(url):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("nodefence serve did not become ready under -X importtime")
                time.sleep(0.01)
        finally:
            stop(process)
        report.seek(0)
        lines = report.read().splitlines()
    rows = []
    for line in lines:
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        own, cumulative, module = line.removeprefix("import time:").split("|")
        rows.append((module.strip(), int(own), int(cumulative)))
    return rows


def print_table(results: Sequence[Stats], reference: Stats) -> None:
    header = f"{'subject':<44} {'min':>8} {'median':>8} {'p90':>8} {'x server':>9}"
    print(header)
    print("-" * len(header))
    for stats in results:
        ratio = stats.median / reference.median
        print(
            f"{stats.name:<44} {stats.minimum * 1000:>6.0f}ms {stats.median * 1000:>6.0f}ms "
            f"{stats.p90 * 1000:>6.0f}ms {ratio:>8.1f}x"
        )


def print_imports(rows: Sequence[tuple[str, int, int]], top: int = 12) -> None:
    by_package: dict[str, int] = defaultdict(int)
    for module, own, _cumulative in rows:
        by_package[module.split(".")[0]] += own
    total = sum(by_package.values())
    print(f"\nimport time of `nodefence serve` (-X importtime, total {total / 1000:.0f}ms)")
    print(f"{'package (sum of self time)':<44} {'ms':>8} {'share':>7}")
    for package, own in sorted(by_package.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{package:<44} {own / 1000:>8.0f} {own / total:>7.0%}")
    print(f"\n{'module (self time)':<44} {'ms':>8}")
    for module, own, _cumulative in sorted(rows, key=lambda r: -r[1])[:top]:
        print(f"{module:<44} {own / 1000:>8.0f}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__)
    parser.add_argument("--runs", type=int, default=10, help="measured runs per subject")
    parser.add_argument("--imports", action="store_true", help="always show the import breakdown")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")

    python = sys.executable
    with SimulatorProcess("seed") as sim:
        bare = measure(
            "python -c pass (to exit)", lambda: time_to_exit([python, "-c", "pass"]), args.runs
        )
        imports = measure(
            "python -c 'import aiohttp' (to exit)",
            lambda: time_to_exit([python, "-c", "import aiohttp"]),
            args.runs,
        )
        server = measure("minimal aiohttp server (to 200 /readyz)", minimal_server_once, args.runs)
        serve = measure(
            "nodefence serve (to 200 /readyz)", lambda: serve_once(sim.kubeconfig), args.runs
        )
        print(f"cold start, {args.runs} runs each after one unmeasured run ({python})\n")
        print_table([bare, imports, server, serve], server)
        slow = serve.median > THRESHOLD_SECONDS
        if slow:
            print(f"\nnodefence serve's median start is over {THRESHOLD_SECONDS:.1f}s")
        if slow or args.imports:
            print_imports(import_times(sim.kubeconfig))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
