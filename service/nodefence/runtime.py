"""Assembling nodefence from settings: the one place that knows how the parts fit.

Every part is built here and handed what it needs through its constructor; nothing is set on a
part after it is built.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from nodefence.actions.executor import Executor
from nodefence.actions.fence_record_writer import FenceRecordWriter
from nodefence.alertmanager.config import AlertmanagerConfig
from nodefence.alertmanager.reachability import Reachability
from nodefence.alertmanager.silence_store import SilenceStore
from nodefence.background.fencing_probe import FencingProbe, ProbeMetrics
from nodefence.background.reconcile import ReconcileLoop
from nodefence.background.refresh import BackgroundRefresh
from nodefence.background.runner import Runner, Worker
from nodefence.background.wakeups import Wakeups
from nodefence.errors import ConfigError
from nodefence.fencing.inventory import Inventory, InventoryError, load_inventory
from nodefence.http.decisions import DecisionLog
from nodefence.kube.cached_facts import NodeFactsCache
from nodefence.kube.client import KubeClient, load_api_client
from nodefence.kube.events import EventRecorder
from nodefence.kube.facts import FactsReader
from nodefence.kube.node_index import NodeIndex
from nodefence.kube.pause_watch import PauseWatch
from nodefence.kube.ratelimit import build_limiter
from nodefence.observability.metrics import Metrics
from nodefence.policy import Policy, PolicyError, claim_outlasts_power_steps, load_policy
from nodefence.settings import Settings
from nodefence.shell.approval_requester import ApprovalRequester
from nodefence.shell.commit import Commit
from nodefence.shell.dry_run_power import DryRunPower
from nodefence.shell.early_power import EarlyPower
from nodefence.shell.external_proof import ExternalProof
from nodefence.shell.fencer import Fencer, FencerOptions
from nodefence.shell.loop import Loop
from nodefence.shell.power_step import PowerStep
from nodefence.shell.report import FenceNotifier, Reporter
from nodefence.slack.routes import SlackIntegration, check_slack_settings, slack_parts


def utcnow() -> datetime:
    return datetime.now(UTC)


def effective_policy(settings: Settings) -> Policy:
    """The policy file, with the process-level dry-run switch able only to add caution."""
    policy = load_policy(settings.policy_file)
    short = claim_outlasts_power_steps(policy, settings.request_deadline_seconds)
    if short:
        raise PolicyError(f"invalid policy {settings.policy_file}: " + "; ".join(short))
    if settings.dry_run and not policy.dry_run:
        policy = policy.model_copy(update={"dry_run": True})
    return policy


def bmc_inventory(settings: Settings) -> Inventory | None:
    """The BMC inventory, validated at start: a broken one is a configuration error, not a
    surprise at 3 a.m. when the first power-off is due."""
    if settings.bmc_inventory is None:
        return None
    try:
        return load_inventory(settings.bmc_inventory)
    except InventoryError as exc:
        raise ConfigError(str(exc)) from None


def expect_power_actions(policy: Policy, metrics: Metrics) -> None:
    """The power series the policy's rules can produce, exported from 0."""
    for rule in policy.rules:
        fencing = rule.fencing
        if fencing is None or not fencing.powers:
            continue
        # Every rule reads (dry runs and ``verify`` only read); off and reboot power off; a
        # reboot powers on again.
        actions = {"status"}
        if fencing.action in {"off", "reboot"}:
            actions.add("off")
        if fencing.action == "reboot":
            actions.add("on")
        metrics.power_actions_expected(fencing.driver, sorted(actions))


def record_writer(kube: KubeClient, policy: Policy, options: FencerOptions) -> FenceRecordWriter:
    keep = max((r.flap_window_seconds for r in policy.rules), default=0)
    return FenceRecordWriter(kube, options.namespace, options.identity, keep_releases_seconds=keep)


def assemble_fencer(
    kube: KubeClient,
    policy: Policy,
    metrics: Metrics,
    options: FencerOptions,
    *,
    inventory: Inventory | None = None,
    alertmanager: AlertmanagerConfig | None = None,
    approvals: ApprovalRequester | None = None,
    notifier: FenceNotifier | None = None,
    clock: Callable[[], datetime] = utcnow,
    records: FenceRecordWriter | None = None,
    serving: bool = False,
) -> Fencer:
    """The shell's parts, each built once and given the parts it works with (``records``: the
    fence record's writer, when the approval requester shares it). A ``serving`` fencer's
    reader takes the node counts and the pause switch from informers, which
    ``background_for`` runs."""
    expect_power_actions(policy, metrics)
    namespace = options.namespace
    own = options.node_name
    reader = (
        serving_reader(kube, namespace, own)
        if serving
        else FactsReader(kube, namespace, own_node=own)
    )
    executor = Executor(kube, purge_concurrency=options.purge_concurrency)
    records = records or record_writer(kube, policy, options)
    # S8: a dry run writes no Event either (the Reporter's and the Alertmanager watch's).
    events = EventRecorder(kube, options.identity, dry_run=policy.dry_run)
    reporter = Reporter(metrics, events, clock, notifier)
    power_step = PowerStep(policy, inventory, records, reporter)
    commit = Commit(records, executor, power_step, approvals)
    early = EarlyPower(policy, inventory, metrics)
    dry_run = DryRunPower(policy, inventory, metrics)
    loop = Loop(reader, commit, records, reporter, inventory, early=early, dry_run=dry_run)
    return Fencer(
        kube=kube,
        policy=policy,
        metrics=metrics,
        options=options,
        clock=clock,
        reader=reader,
        records=records,
        loop=loop,
        reporter=reporter,
        proof=ExternalProof(reader, policy),
        alertmanager=alertmanager,
        reachability=(
            Reachability(metrics, events, options.namespace, clock)
            if alertmanager is not None
            else None
        ),
        silences=(
            SilenceStore(kube, namespace, dry_run=policy.dry_run)
            if alertmanager is not None
            else None
        ),
        approvals=approvals,
        inventory=inventory,
    )


def serving_reader(kube: KubeClient, namespace: str, own_node: str | None = None) -> FactsReader:
    """A serving receiver's facts reader: the node counts from a watch-fed index (an alert
    costs the same on 5 nodes and on 5,000) and the pause switch from a watch."""
    cache = NodeFactsCache()
    return FactsReader(
        kube,
        namespace,
        nodes=NodeIndex(kube, listener=cache),
        pause_watch=PauseWatch(kube, namespace),
        node_facts=cache,
        own_node=own_node,
    )


def background_for(settings: Settings, fencer: Fencer, decisions: DecisionLog) -> Runner:
    """Every background loop of a serving receiver, by name: the node index and the pause watch
    its reader was built with, the wake-ups that judge a node again when a refusal's wait ends
    or the index sees its Ready change (with the reconcile pass only), the refresh of the pause
    switch and the fence gauges, the
    reconcile pass (``NODEFENCE_RECONCILE_INTERVAL``; 0: none) and the read-only fencing probe
    (``NODEFENCE_FENCING_PROBE_INTERVAL``, over the inventory; 0 or none: none). The probe
    records its rounds through the fencer's client unless the receiver is in dry-run (S8:
    no write at all)."""
    reader = fencer.reader
    inventory = fencer.inventory
    followers: list[Worker] = [w for w in (reader.nodes, reader.pause_watch) if w is not None]
    dry_run = settings.dry_run or fencer.policy.dry_run
    interval = float(settings.fencing_probe_interval)
    workers: list[Worker] = []
    if settings.reconcile_interval > 0:
        # A receiver that runs no pass of its own (Knative's, which may have no pod at all;
        # the CronJob passes instead) starts no decision of its own either.
        wakeups = Wakeups(
            fencer.judge_node,
            fencer.metrics,
            fencer.kube.server_clock.now,
            deadline_seconds=settings.request_deadline_seconds,
            decisions=decisions,
        )
        fencer.waits = wakeups
        if reader.nodes is not None:
            reader.nodes.on_ready_change = wakeups.now
        workers.append(wakeups)
    return Runner(
        [
            *followers,
            *workers,
            BackgroundRefresh(reader, fencer.metrics),
            ReconcileLoop(
                fencer,
                fencer.metrics,
                interval=settings.reconcile_interval,
                deadline_seconds=settings.request_deadline_seconds,
                decisions=decisions,
                kube=fencer.kube,
                namespace=settings.namespace,
            ),
            FencingProbe(
                inventory if interval > 0 else None,
                ProbeMetrics(fencer.metrics.registry),
                interval=interval,
                kube=None if dry_run else fencer.kube,
                namespace=settings.namespace,
                identity=settings.identity,
                deadline_seconds=settings.request_deadline_seconds,
            ),
        ]
    )


def fencer_options(settings: Settings) -> FencerOptions:
    return FencerOptions(
        namespace=settings.namespace,
        identity=settings.identity,
        node_name=settings.node_name,
        deadline_seconds=settings.request_deadline_seconds,
        cached_refusals=settings.cached_refusals,
    )


async def _connect(settings: Settings, metrics: Metrics, kubeconfig: str | None) -> KubeClient:
    api = await load_api_client(kubeconfig)
    limiter = build_limiter(
        settings.api_qps, settings.api_burst, settings.api_fence_qps, settings.api_fence_burst
    )
    return KubeClient(api, on_request=metrics.kube_api_request, limiter=limiter)


async def build_fencer(
    settings: Settings,
    *,
    metrics: Metrics | None = None,
    policy: Policy | None = None,
    kubeconfig: str | None = None,
    serving: bool = False,
) -> Fencer:
    """The fencer alone, without Slack: for the one-shot commands (plan, reconcile, status)
    and, ``serving``, for a receiver that answers alerts only (its loops: ``background_for``)."""
    metrics = metrics or Metrics()
    policy = policy or effective_policy(settings)
    inventory = bmc_inventory(settings)
    kube = await _connect(settings, metrics, kubeconfig)
    return assemble_fencer(
        kube,
        policy,
        metrics,
        fencer_options(settings),
        inventory=inventory,
        alertmanager=settings.alertmanager,
        serving=serving,
    )


@dataclass(frozen=True)
class Service:
    """Everything ``serve`` runs: the fencer, the Slack integration around it, the decisions
    it remembers for ``GET /decisions`` and its background loops."""

    fencer: Fencer
    slack: SlackIntegration
    metrics: Metrics
    decisions: DecisionLog
    background: Runner

    async def close(self) -> None:
        await self.fencer.close()


async def build_service(
    settings: Settings,
    *,
    metrics: Metrics | None = None,
    policy: Policy | None = None,
    inventory: Inventory | None = None,
    kubeconfig: str | None = None,
) -> Service:
    """The receiver's parts: the fencer, built with Slack's approval requester and notifier
    when the settings configure them, the interactions that hear the approvers' answers, and
    the background loops. Settings the policy cannot work with stop it before anything
    connects. ``inventory``: the BMC inventory already loaded from the settings (``serve``
    validates it before it builds anything), else it is loaded here."""
    metrics = metrics or Metrics()
    policy = policy or effective_policy(settings)
    check_slack_settings(settings, policy)
    inventory = inventory if inventory is not None else bmc_inventory(settings)
    kube = await _connect(settings, metrics, kubeconfig)
    options = fencer_options(settings)
    records = record_writer(kube, policy, options)
    slack = slack_parts(settings, policy, kube, metrics, utcnow, records=records)
    fencer = assemble_fencer(
        kube,
        policy,
        metrics,
        options,
        inventory=inventory,
        alertmanager=settings.alertmanager,
        approvals=slack.approvals,
        notifier=slack.notifier,
        records=records,
        serving=True,
    )
    decisions = DecisionLog()
    return Service(
        fencer,
        slack.integration(settings, fencer),
        metrics,
        decisions,
        background_for(settings, fencer, decisions),
    )
