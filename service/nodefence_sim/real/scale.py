"""``python -m nodefence_sim.scale --backend real``: the scale simulator's cluster (nodes of
realistic size, bare pods over the workers) on the real control plane, every node held by one
kwok (``loader.load_shared``), so that the benchmarks measure the same cluster against a real
kube-apiserver.

``--down N`` takes the last N nodes' kubelets down at once once the cluster is up (their labels
taken from the one kwok, several at a time) and waits until the node-lifecycle controller has
marked each of them NotReady before serving: the outage is in the cluster when the
``listening on`` line comes, as with the simulator's. The simulator backdates that death
(``--down-since``); real controllers stamp their own times, so here it happened just now and a
benchmark waits out the policy's windows itself.

It serves the real backend's control surface (the request log from the API server's audit log,
the nodes' kubelets, their BMCs), prints the same line once listening, and stops every process on
SIGINT or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import signal
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from nodefence_sim.errors import ApiError
from nodefence_sim.real.cluster import RealCluster
from nodefence_sim.real.components import HARNESS, ControlPlane, ControlPlaneError, find_binary
from nodefence_sim.real.loader import (
    PARALLEL_CREATES,
    READY_TIMEOUT,
    load_shared,
    not_ready,
    wait_for,
)
from nodefence_sim.real.rest import Rest
from nodefence_sim.real.server import DEFAULT_GRACE, _exit_on_signal, _serve
from nodefence_sim.scale import node_name, objects


def take_down(cluster: RealCluster, names: list[str]) -> None:
    """Kill the kubelets of ``names`` together, then wait until the node-lifecycle controller
    has marked every one of them NotReady (its grace period and one monitor period)."""
    with ThreadPoolExecutor(PARALLEL_CREATES) as pool:
        list(pool.map(cluster.node_down, names))
    wait_for(lambda: not_ready(cluster.rest, names), READY_TIMEOUT, "the dead nodes NotReady")


def run(args: argparse.Namespace) -> int:
    if args.down_since:
        print(
            "nodefence_sim.scale: --down-since must be 0 with --backend real: the real "
            "controllers stamp their own times, so a death cannot be backdated",
            file=sys.stderr,
        )
        return 2
    try:
        binary = find_binary()
    except ControlPlaneError as exc:
        print(f"nodefence_sim.scale: {exc}", file=sys.stderr)
        return 2
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _exit_on_signal)
    workdir = Path(tempfile.mkdtemp(prefix="nodefence-scale-real-"))
    plane = ControlPlane(
        binary, workdir, [], node_monitor_grace_period=args.node_monitor_grace_period
    )
    failed = False
    try:
        began = time.monotonic()
        plane.start()
        rest = Rest(plane.server, plane.ca_cert, plane.tokens[HARNESS])
        loaded = load_shared(rest, objects(args.nodes, args.pods), plane.start_shared_kwok)
        print(f"loaded {args.nodes} nodes and {args.pods} pods in {time.monotonic() - began:.0f}s")
        cluster = RealCluster(plane, rest, loaded, shared=True)
        victims = [node_name(i) for i in range(max(0, args.nodes - args.down), args.nodes)]
        if victims:
            began = time.monotonic()
            take_down(cluster, victims)
            print(
                f"{len(victims)} nodes NotReady {time.monotonic() - began:.0f}s after their death"
            )
        asyncio.run(_serve(cluster, args))
    except (ControlPlaneError, TimeoutError, ApiError) as exc:
        failed = True
        print(f"nodefence_sim.scale: the real cluster did not come up: {exc}", file=sys.stderr)
        print(f"nodefence_sim.scale: the components' logs are kept in {workdir}", file=sys.stderr)
        return 1
    finally:
        plane.stop()
        if not failed:
            with contextlib.suppress(OSError):
                shutil.rmtree(workdir)
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--node-monitor-grace-period",
        default=DEFAULT_GRACE,
        help=f"with --backend real: the node-lifecycle controller's grace ({DEFAULT_GRACE})",
    )
