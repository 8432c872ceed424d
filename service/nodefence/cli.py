"""The ``nodefence`` command line: one subcommand per job, heavy imports deferred.

Deferred imports keep ``nodefence serve`` quick to start (Knative scales from zero) and keep the
simulator's code out of the receiver's process.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nodefence.commands.configured import policy_or_exit, settings_or_exit

# The commands that talk to a cluster: each takes kubectl's cluster flags.
CLUSTER_COMMANDS = (
    "serve",
    "plan",
    "reconcile",
    "check-config",
    "status",
    "check-fencing",
    "explain",
    "release",
    "pause",
    "resume",
)


def cluster_flags() -> argparse.ArgumentParser:
    """kubectl's flags for choosing a cluster and nodefence's namespace, on every command that
    talks to one."""
    flags = argparse.ArgumentParser(add_help=False)
    group = flags.add_argument_group("cluster access (as kubectl)")
    group.add_argument(
        "--kubeconfig",
        help="the kubeconfig file (default: KUBECONFIG, a list; else ~/.kube/config; else the "
        "in-cluster service account)",
    )
    group.add_argument("--context", help="the kubeconfig context (default: its current-context)")
    group.add_argument(
        "-n",
        "--namespace",
        help="nodefence's namespace (default: NODEFENCE_NAMESPACE, else the service account's, "
        "else nodefence)",
    )
    return flags


def settings_epilog() -> str:
    """The environment a command reads, generated from the settings model."""
    from nodefence.settings import environment_names

    return "settings read from the environment: " + ", ".join(environment_names())


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nodefence",
        description="Verified non-graceful node shutdown handling for Kubernetes.",
    )
    from nodefence import __version__

    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    flags = cluster_flags()
    sub.add_parser(
        "serve",
        help="run the Alertmanager webhook receiver on $PORT",
        parents=[flags],
        epilog=settings_epilog(),
    )

    sim = sub.add_parser("simulate", help="run the simulated Kubernetes API server")
    sim.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free port)")
    sim.add_argument("--scenario", default="seed", help="'seed' or a scenario YAML file")
    sim.add_argument("--kubeconfig-out", help="write a kubeconfig for the simulator here")
    sim.add_argument(
        "--bmc-inventory-out", help="write a BMC inventory for the simulator's Redfish BMCs here"
    )
    sim.add_argument("--k8s-version", help="simulated Kubernetes version (default 1.24.8)")
    sim.add_argument(
        "--backend",
        choices=("sim", "real"),
        default="sim",
        help="sim: the simulated API server; real: the scenario loaded into a real "
        "kube-apiserver, controller-manager and scheduler with kwok nodes (make controlplane "
        "builds them; NODEFENCE_CONTROLPLANE or nodefence-controlplane on PATH)",
    )
    sim.add_argument(
        "--node-monitor-grace-period",
        type=_go_duration,
        help="real backend: how long the node-lifecycle controller waits for a silent node "
        "before marking it NotReady (default 50s, Kubernetes' own)",
    )
    sim.add_argument(
        "--real-nodes",
        type=_real_node_count,
        default=0,
        help="real backend: add N nodes run by real kubelets (containerd, runc, CNI; root and "
        "Debian's containerd, runc, containernetworking-plugins and socat needed) beside the "
        "scenario's kwok nodes",
    )
    sim.add_argument(
        "--node-image",
        action="append",
        metavar="ARCHIVE",
        help="real nodes: a docker archive (docker save) to import into every real node's "
        "containerd, so pods run it without a registry (repeatable)",
    )

    demo = sub.add_parser("demo", help="play the seed story on the embedded simulated cluster")
    demo.add_argument(
        "--approval",
        action="store_true",
        help="the same story with a Slack approval round trip (against a local Slack stand-in)",
    )
    demo.add_argument(
        "--fencing",
        choices=("none", "redfish", "fence-agent"),
        default="none",
        help="how the machine is proven off: redfish powers it off through the simulated BMC "
        "and reads back Off (action reboot); fence-agent does the same through fence_redfish "
        "(Debian package fence-agents); none fences on inference alone, and says so",
    )

    plan = sub.add_parser(
        "plan",
        help="print the decisions for a webhook payload; makes no write to the cluster",
        parents=[flags],
    )
    plan.add_argument("--payload", required=True, type=Path, help="Alertmanager webhook JSON")

    sub.add_parser(
        "reconcile",
        help="one reconcile pass: finish purges, unfence recovered nodes",
        parents=[flags],
        epilog=settings_epilog(),
    )
    check = sub.add_parser(
        "check-config",
        help="print the effective settings and policy (secrets masked) and check that the "
        "cluster and Alertmanager they name answer; exit 1 if one cannot be reached",
        parents=[flags],
    )
    check.add_argument(
        "--offline",
        action="store_true",
        help="check only the files (settings, policy, BMC inventory); reach nothing",
    )
    status = sub.add_parser(
        "status",
        help="what nodefence holds now: fenced nodes, half-written fences, approvals",
        parents=[flags],
    )
    status.add_argument("-o", "--output", choices=("text", "json"), default="text")
    fencing = sub.add_parser(
        "check-fencing",
        help="read every inventory node's power state (read-only); exit 0 only if all answered",
        parents=[flags],
    )
    fencing.add_argument("node", nargs="*", help="only these nodes (default: every one)")
    fencing.add_argument("-o", "--output", choices=("text", "json"), default="text")
    fencing.add_argument(
        "--timeout",
        type=_positive_seconds,
        default=30.0,
        help="seconds each node's BMC or agent may take to answer (default 30)",
    )
    fencing.add_argument(
        "--concurrency",
        type=_positive_int,
        default=8,
        help="nodes read at once (default 8)",
    )
    from nodefence.commands import entry as operator_commands

    operator_commands.register(sub, flags)
    return parser


def _positive_seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    if not 0 < seconds <= 600:
        raise argparse.ArgumentTypeError(f"{value} is not between 0 and 600 seconds")
    return seconds


def _positive_int(value: str) -> int:
    if not value.isdigit() or not 1 <= int(value) <= 256:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number from 1 to 256")
    return int(value)


def _real_node_count(value: str) -> int:
    """Each real node is a kubelet and a containerd (about 150 MB and a few percent of a core),
    on one machine: a handful, not a fleet (kwok nodes give the cluster its size)."""
    if not value.isdigit() or not 0 <= int(value) <= 8:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number from 0 to 8")
    return int(value)


def _go_duration(value: str) -> str:
    """A duration as the Kubernetes components take it (``20s``, ``1m30s``); a bare number is
    seconds."""
    if re.fullmatch(r"\d+(\.\d+)?", value):
        return f"{value}s"
    if not re.fullmatch(r"(\d+(\.\d+)?(ms|s|m|h))+", value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a duration such as 20s or 1m30s")
    return value


def _simulate_conflicts(args: argparse.Namespace) -> str | None:
    """The ``simulate`` options that mean nothing with the chosen backend."""
    if args.backend == "real" and args.k8s_version:
        return (
            "--k8s-version is for the simulator; the real backend runs the release it was "
            "built from"
        )
    if args.node_image and not args.real_nodes:
        return "--node-image needs --real-nodes (only real nodes run images)"
    if args.backend == "sim" and args.real_nodes:
        return "--real-nodes needs --backend real (the simulator's kubelets are simulated)"
    if args.backend == "sim" and args.node_monitor_grace_period:
        return (
            "--node-monitor-grace-period needs --backend real (the simulator has no "
            "node-lifecycle controller flags)"
        )
    return None


def _print_decisions(decisions: Sequence[Any]) -> None:
    from nodefence.engine.render import decision_to_dict

    print(json.dumps({"decisions": [decision_to_dict(d) for d in decisions]}, indent=2))


def _driver_conflicts(policy: Any, inventory: Any) -> bool:
    """A rule and an inventory entry naming different drivers: said on stderr, never bridged."""
    from nodefence.fencing.registry import conflicts

    problems = conflicts(policy, inventory)
    for problem in problems:
        print(f"nodefence: invalid fencing configuration: {problem}", file=sys.stderr)
    return bool(problems)


def _machines_shared(inventory: Any) -> bool:
    """Inventory entries that resolve to one machine (S10): said on stderr, naming the nodes."""
    from nodefence.fencing.binding import inventory_problems

    problems = inventory_problems(inventory)
    for problem in problems:
        print(f"nodefence: invalid BMC inventory: {problem}", file=sys.stderr)
    return bool(problems)


def _fencing_or_exit(settings: Any, policy: Any) -> Any:
    """The inventory and the rules' drivers checked before serving, so a missing fence agent or
    a rule/entry mismatch stops the start instead of the first fence; the inventory so loaded
    is the one the receiver works with."""
    from nodefence.errors import ConfigError
    from nodefence.runtime import bmc_inventory

    try:
        inventory = bmc_inventory(settings)
    except ConfigError as exc:
        print(f"nodefence: invalid BMC inventory: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    if _driver_conflicts(policy, inventory):
        raise SystemExit(2)
    return inventory


def _serve() -> int:
    from nodefence.http.app import run
    from nodefence.observability.logging import configure_logging
    from nodefence.runtime import build_service

    settings = settings_or_exit()
    configure_logging(settings.log_format, settings.log_level)
    policy = policy_or_exit(settings)
    inventory = _fencing_or_exit(settings, policy)

    async def main() -> None:
        service = await build_service(settings, policy=policy, inventory=inventory)
        await run(
            settings,
            service.fencer,
            metrics=service.metrics,
            slack=service.slack,
            decisions=service.decisions,
            background=service.background,
        )

    asyncio.run(main())
    return 0


def _plan(payload_file: Path) -> int:
    from pydantic import ValidationError

    from nodefence.alerts.events import extract_events
    from nodefence.alerts.webhook import WebhookPayload
    from nodefence.commands.common import connected_fencer
    from nodefence.observability.logging import configure_logging

    # Planning only reads; it needs no webhook credentials.
    settings = settings_or_exit(auth_disabled=True, dry_run=True, log_level="warning")
    configure_logging(settings.log_format, settings.log_level, stream=sys.stderr)
    policy = policy_or_exit(settings)
    try:
        payload = WebhookPayload.model_validate_json(payload_file.read_bytes())
    except OSError as exc:
        raise SystemExit(f"nodefence: cannot read {payload_file}: {exc.strerror}") from None
    except ValidationError as exc:
        # One line naming each field, as the settings and policy errors do.
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}"
            for e in exc.errors(include_url=False, include_input=False)
        )
        raise SystemExit(
            f"nodefence: {payload_file} is not a webhook payload: {problems}"
        ) from None
    events = extract_events(
        payload, alert_names=policy.alerts.names, node_labels=policy.alerts.node_labels
    )

    async def main() -> int:
        async with connected_fencer(settings, policy) as fencer:
            _print_decisions(await fencer.handle_events(events))
        return 0

    return asyncio.run(main())


def _reconcile() -> int:
    from nodefence.commands.common import connected_fencer
    from nodefence.observability.logging import configure_logging

    settings = settings_or_exit(auth_disabled=True)
    configure_logging(settings.log_format, settings.log_level, stream=sys.stderr)
    policy = policy_or_exit(settings)

    async def main() -> int:
        async with connected_fencer(settings, policy) as fencer:
            _print_decisions(await fencer.reconcile())
        return 0

    return asyncio.run(main())


def _status(output: str) -> int:
    from nodefence.commands import install
    from nodefence.commands.common import connected_fencer
    from nodefence.commands.status import as_text, gather
    from nodefence.kube.client import Deadline
    from nodefence.observability.logging import configure_logging

    settings = settings_or_exit(auth_disabled=True, log_level="warning")
    configure_logging(settings.log_format, settings.log_level, stream=sys.stderr)
    # Dry-run: status judges the NotReady nodes it lists as explain does, writing nothing.
    policy = policy_or_exit(settings).model_copy(update={"dry_run": True})

    async def main() -> int:
        async with connected_fencer(settings, policy) as fencer:
            deadline = Deadline(settings.request_deadline_seconds)
            await install.require(fencer.kube, settings.namespace, deadline)
            status = await gather(fencer, deadline)
        print(json.dumps(status, indent=2) if output == "json" else as_text(status))
        return 0

    return asyncio.run(main())


def _fencing_summary(policy: Any, inventory: Any, namespace: str) -> dict[str, str]:
    """Per rule, in words: what proves a machine off before its taint (S10)."""
    from nodefence.engine.drivers import Proof
    from nodefence.fencing.drivers.annotation import POWER_PROOF_PREFIX

    summary: dict[str, str] = {}
    for rule in policy.rules:
        fencing = rule.fencing
        if fencing is None:
            summary[rule.name] = (
                "no fencing section: no proof, so this rule never fences on inference alone"
                + (" (a person's approval in Slack stands in)" if rule.approval == "slack" else "")
            )
        elif fencing.proof is Proof.NONE:
            summary[rule.name] = (
                "fencing.driver none: NO PROOF; fences on inference alone (the machine may "
                "still be running)"
            )
        elif fencing.powers:
            where = "BMC inventory loaded" if inventory is not None else "NO BMC INVENTORY SET"
            summary[rule.name] = (
                f"{fencing.driver}, action {fencing.action}, Off read back within "
                f"{fencing.timeout_seconds:g}s ({where})"
                + (
                    "; when that fails (no answer, a refused login, not Off in time) a person "
                    "is asked in Slack and their approval stands in for the proof"
                    if fencing.on_failure == "approval"
                    else "; no proof, no taint"
                )
            )
        elif fencing.proof is Proof.WRITTEN:
            summary[rule.name] = (
                f"annotation: external proof, {fencing.annotation}=off on the ConfigMap "
                f"{namespace}/{POWER_PROOF_PREFIX}<node>, written after the node's last Lease "
                "renewal (the Node's own annotations are not read)"
            )
        else:
            summary[rule.name] = f"{fencing.driver}: external proof from {fencing.url}"
    return summary


def _fallback_rules(policy: Any) -> str:
    """Which rules govern a node the fallback judges (no alert arrived): only those that name
    no alert, each for the nodes its selector matches, the first that matches winning."""
    from nodefence.engine.alerts import fallback_may_use

    after = policy.cluster.fallback_after_seconds
    if after <= 0:
        return "off (cluster.fallback_after_seconds 0)"
    usable = [r for r in policy.rules if fallback_may_use(r)]
    left = [r.name for r in policy.rules if not fallback_may_use(r)]
    chosen = (
        "; ".join(f"rule {r.name!r} ({r.match.node_selector or 'every node'})" for r in usable)
        or "NO RULE: a rule that names alerts never governs it, so the fallback never fences"
    )
    skipped = f"; never by {', '.join(repr(n) for n in left)} (they name alerts)" if left else ""
    return (
        f"after {after}s NotReady with no alert, a node is judged by the first of: "
        f"{chosen}{skipped}"
    )


def _check_config(offline: bool) -> int:
    from nodefence.alertmanager.config import UNCONFIGURED
    from nodefence.errors import ConfigError
    from nodefence.runtime import bmc_inventory

    settings = settings_or_exit()
    policy = policy_or_exit(settings)
    try:
        inventory = bmc_inventory(settings)
    except ConfigError as exc:
        print(f"nodefence: invalid BMC inventory: {exc}", file=sys.stderr)
        return 2
    conflicted = _driver_conflicts(policy, inventory)
    if _machines_shared(inventory) or conflicted:
        return 2
    from nodefence.slack.routes import check_slack_settings

    try:
        check_slack_settings(settings, policy)
    except ConfigError as exc:
        print(f"nodefence: check-config: {exc}", file=sys.stderr)
        return 2
    alertmanager = settings.alertmanager
    report = {
        "settings": settings.masked(),
        "policy": policy.model_dump(mode="json"),
        "fencing": _fencing_summary(policy, inventory, settings.namespace),
        "bmc_inventory": inventory.describe() if inventory is not None else None,
        "alertmanager": alertmanager.describe() if alertmanager is not None else UNCONFIGURED,
        "fallback": _fallback_rules(policy),
    }
    from nodefence.commands.reach import OFFLINE, reachability

    if offline:
        report["reachability"] = OFFLINE
        print(json.dumps(report, indent=2, default=str))
        print(f"nodefence: check-config: {OFFLINE['why']}", file=sys.stderr)
        return 0
    report["reachability"], problems = asyncio.run(reachability(settings, policy, inventory))
    print(json.dumps(report, indent=2, default=str))
    for warning in report["reachability"]["alertmanager"].get("warnings", []):
        print(f"nodefence: check-config: warning: {warning}", file=sys.stderr)
    for problem in problems:
        print(f"nodefence: check-config: {problem}", file=sys.stderr)
    return 1 if problems else 0


def _simulated_cluster(args: argparse.Namespace) -> int:
    """``simulate`` and ``demo`` run from the simulator's own distribution, ``nodefence-sim``,
    which production installs (the image, ``pip install nodefence``) leave out; without it they
    say in one line what to install instead of failing on an import."""
    if importlib.util.find_spec("nodefence_sim") is None:
        from nodefence import __version__

        print(
            f"nodefence {args.command}: the simulated cluster ships separately, in the "
            f"nodefence-sim distribution, which is not installed here; install it with "
            f"pip install nodefence-sim=={__version__} (a source checkout: make venv)",
            file=sys.stderr,
        )
        return 2
    if args.command == "simulate" and args.backend == "real":
        from nodefence_sim.real.server import run_from_cli as run_real

        return run_real(args)
    if args.command == "simulate":
        from nodefence_sim.server import run_from_cli

        return run_from_cli(args)
    if args.approval:
        from nodefence_sim.demo.approval_story import main as approval_demo

        return approval_demo(args)
    from nodefence_sim.demo.story import main as demo_main

    return demo_main(args)


def use_cluster_flags(args: argparse.Namespace) -> None:
    """The flags override the environment they stand for, as kubectl's do: every part of the
    command (the settings, the cluster loader, its error messages) then reads one source."""
    import os

    from nodefence.kube.access import CONTEXT_ENV, locate

    if args.kubeconfig:
        # kubectl's --kubeconfig names one file, which must exist: said as such.
        locate(args.kubeconfig)
        os.environ["KUBECONFIG"] = args.kubeconfig
    if args.context:
        os.environ[CONTEXT_ENV] = args.context
    if args.namespace:
        os.environ["NODEFENCE_NAMESPACE"] = args.namespace


def main(argv: Sequence[str] | None = None) -> int:
    """Every command's output, its failure line included, goes through the one writer that
    shows control characters instead of letting them drive the terminal
    (``commands.output``); the servers step out of it for their logs."""
    from nodefence.commands.failures import run_command
    from nodefence.commands.output import guarded

    with guarded():
        return run_command(lambda: _dispatch(argv))


def _dispatch(argv: Sequence[str] | None) -> int:
    from nodefence.commands import entry as operator_commands

    parser = _parser()
    args = parser.parse_args(argv)
    if args.command in CLUSTER_COMMANDS:
        use_cluster_flags(args)
    if args.command == "simulate" and (conflict := _simulate_conflicts(args)):
        parser.error(conflict)
    if args.command in operator_commands.COMMANDS:
        return operator_commands.run(args)
    if args.command == "demo":
        return _simulated_cluster(args)
    if args.command in ("simulate", "serve"):
        from nodefence.commands.output import unguarded

        # Servers: what they write is their log, not text for a terminal.
        with unguarded():
            return _simulated_cluster(args) if args.command == "simulate" else _serve()
    if args.command == "plan":
        return _plan(args.payload)
    if args.command == "status":
        return _status(args.output)
    if args.command == "check-fencing":
        from nodefence.commands.check_fencing import main as check_fencing

        return check_fencing(
            args.node, args.output, timeout=args.timeout, concurrency=args.concurrency
        )
    if args.command == "reconcile":
        return _reconcile()
    return _check_config(args.offline)
