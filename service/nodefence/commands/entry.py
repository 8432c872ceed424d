"""The operator's subcommands on the ``nodefence`` command line: their arguments and how each
runs. Imports are deferred as in ``nodefence.cli``, so registering them costs nothing."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

COMMANDS = ("explain", "release", "pause", "resume")
BY_DEFAULT = (
    "the user the API server authenticates, by a SelfSubjectReview; else user@host of this "
    "machine, with a note"
)


def register(sub: Any, flags: argparse.ArgumentParser) -> None:
    """Add the operator's subcommands to the ``nodefence`` parser's subparsers, each with the
    cluster flags (``flags``)."""
    explain = sub.add_parser(
        "explain",
        parents=[flags],
        help="the decision a firing KubeNodeNotReady alert for NODE would get now, with every "
        "guard's reason; makes no write and no power action",
    )
    explain.add_argument("node", help="the node's name")
    explain.add_argument("-o", "--output", choices=("text", "json"), default="text")
    explain.add_argument(
        "--alert",
        default="KubeNodeNotReady",
        help="the alert to explain (default KubeNodeNotReady; any name the policy handles)",
    )
    explain.add_argument(
        "--no-alert",
        action="store_true",
        help="the decision the fallback (cluster.fallback_after_seconds) would make with no "
        "alert: the rule it would choose, and any Alertmanager silence that holds the node",
    )
    explain.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an alert label to add or override (for rules that match on alert labels)",
    )

    release = sub.add_parser(
        "release",
        parents=[flags],
        help="let go of a fence nodefence applied: its taint, its nodefence.io/ annotations, "
        "its fence record entry; refuses a taint nodefence did not apply",
    )
    release.add_argument("node", help="the fenced node's name")
    release.add_argument("--reason", required=True, help="why (kept in the record and Event)")
    release.add_argument("--by", help=f"who releases it (default: {BY_DEFAULT})")
    release.add_argument(
        "--yes",
        action="store_true",
        help="release even though the node is still NotReady (read what that means first)",
    )
    release.add_argument("-o", "--output", choices=("text", "json"), default="text")

    pause = sub.add_parser(
        "pause",
        parents=[flags],
        help="pause nodefence cluster-wide: no fence, purge or unfence until resumed",
    )
    pause.add_argument("--reason", required=True, help="why (shown by status and in the Event)")
    pause.add_argument("--by", help=f"who pauses (default: {BY_DEFAULT})")
    pause.add_argument(
        "--force",
        action="store_true",
        help="replace a pause already in place (its who, when and why are then lost)",
    )
    pause.add_argument("-o", "--output", choices=("text", "json"), default="text")

    resume = sub.add_parser("resume", parents=[flags], help="lift the cluster-wide pause")
    resume.add_argument("--by", help=f"who resumes (default: {BY_DEFAULT})")
    resume.add_argument("-o", "--output", choices=("text", "json"), default="text")


def _labels(pairs: list[str]) -> dict[str, str]:
    from nodefence.commands.failures import CommandRefusedError

    labels: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise CommandRefusedError(f"--label {pair!r}: expected KEY=VALUE")
        labels[key.strip()] = value
    return labels


def _configured() -> tuple[Any, Any]:
    """Settings and policy as ``status`` reads them: no webhook credential needed, warnings and
    errors only, on stderr (stdout is the command's answer)."""
    from nodefence.commands.configured import policy_or_exit, settings_or_exit
    from nodefence.observability.logging import configure_logging

    settings = settings_or_exit(auth_disabled=True, log_level="warning")
    configure_logging(settings.log_format, settings.log_level, stream=sys.stderr)
    return settings, policy_or_exit(settings)


def _explain(args: argparse.Namespace) -> int:
    from nodefence.commands import explain
    from nodefence.commands.common import connected_fencer
    from nodefence.commands.failures import CommandRefusedError
    from nodefence.kube.client import Deadline

    settings, policy = _configured()
    if args.alert not in policy.alerts.names:
        raise CommandRefusedError(
            f"the policy does not handle alert {args.alert} (alerts.names: "
            f"{', '.join(policy.alerts.names)}); pass --alert with one of those"
        )
    extra = _labels(args.label)
    reading = policy.model_copy(update={"dry_run": True})

    async def main() -> explain.Explanation:
        async with connected_fencer(settings, reading) as fencer:
            if args.no_alert:
                deadline = Deadline(settings.request_deadline_seconds)
                event, due = await fencer.fallback_preview(args.node, deadline)
                preview = explain.Alert(event, f"no alert: the fallback's event; {due}")
                return await explain.explain(fencer, preview, configured_dry_run=policy.dry_run)
            alert, why = (
                (None, "labels given with --label")
                if extra
                else await explain.firing_alert(settings, policy, args.node, args.alert)
            )
            if alert is None:
                alert = explain.synthesized_alert(policy, args.node, args.alert, extra, why)
            return await explain.explain(fencer, alert, configured_dry_run=policy.dry_run)

    explained = asyncio.run(main())
    if args.output == "json":
        print(json.dumps(explained.report, indent=2))
    else:
        print(explain.as_text(explained))
    return 0


def _release(args: argparse.Namespace) -> int:
    from nodefence.commands import install, release
    from nodefence.commands.common import connected_fencer, who_runs
    from nodefence.kube.client import Deadline

    settings, policy = _configured()

    async def main() -> dict[str, Any]:
        async with connected_fencer(settings, policy) as fencer:
            deadline = Deadline(settings.request_deadline_seconds)
            await install.require(fencer.kube, settings.namespace, deadline)
            by, note = await who_runs(fencer.kube, args.by, deadline)
            report = await release.release(
                fencer.loop,
                policy,
                namespace=settings.namespace,
                identity=settings.identity,
                name=args.node,
                reason=args.reason,
                by=by,
                confirmed=args.yes,
                deadline=deadline,
            )
            return {**report, "byNote": note} if note else report

    report = asyncio.run(main())
    _note(report)
    print(json.dumps(report, indent=2) if args.output == "json" else release.as_text(report))
    return 0


def _note(report: dict[str, Any]) -> None:
    """A caveat on who the command recorded, on stderr: stdout stays the command's answer."""
    if report.get("byNote"):
        print(f"nodefence: note: {report['byNote']}", file=sys.stderr)


def _switch(args: argparse.Namespace) -> int:
    from nodefence.commands import install, pause
    from nodefence.commands.common import connected_fencer, who_runs
    from nodefence.kube.client import Deadline

    settings, policy = _configured()

    async def main() -> dict[str, Any]:
        async with connected_fencer(settings, policy) as fencer:
            deadline = Deadline(settings.request_deadline_seconds)
            await install.require(fencer.kube, settings.namespace, deadline)
            by, note = await who_runs(fencer.kube, args.by, deadline)
            if args.command == "pause":
                report = await pause.pause(
                    fencer.kube,
                    namespace=settings.namespace,
                    reason=args.reason,
                    by=by,
                    identity=settings.identity,
                    deadline=deadline,
                    force=args.force,
                )
            else:
                report = await pause.resume(
                    fencer.kube,
                    namespace=settings.namespace,
                    by=by,
                    identity=settings.identity,
                    deadline=deadline,
                )
            return {**report, "byNote": note} if note else report

    report = asyncio.run(main())
    _note(report)
    if args.output == "json":
        print(json.dumps(report, indent=2))
    elif args.command == "pause":
        print(pause.pause_text(report))
    else:
        print(pause.resume_text(report))
    return 0


def run(args: argparse.Namespace) -> int:
    if args.command == "explain":
        return _explain(args)
    if args.command == "release":
        return _release(args)
    if args.command in ("pause", "resume"):
        return _switch(args)
    raise ValueError(f"not an operator command: {args.command}")
