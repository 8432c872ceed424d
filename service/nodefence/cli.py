"""The ``nodefence`` command line: one subcommand per job, heavy imports deferred."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nodefence",
        description="Verified non-graceful node shutdown handling for Kubernetes.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("serve", help="run the Alertmanager webhook receiver")

    sim = sub.add_parser("simulate", help="run the simulated Kubernetes API server")
    sim.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free port)")
    sim.add_argument("--scenario", default="seed", help="'seed' or a scenario YAML file")
    sim.add_argument("--kubeconfig-out", help="write a kubeconfig for the simulator here")
    sim.add_argument("--k8s-version", help="simulated Kubernetes version (default 1.24.8)")

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "simulate":
        from nodefence.sim.server import run_from_cli

        return run_from_cli(args)
    print(f"nodefence: {args.command} is not available", file=sys.stderr)
    return 2
