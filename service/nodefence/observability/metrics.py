"""The service's Prometheus metrics, in a registry of their own.

Each ``Metrics`` owns a fresh ``CollectorRegistry`` instead of the process-global default, so
several applications (tests, or the receiver next to the embedded simulator) can exist in one
process without duplicate-registration errors or counts leaking between them. The process and
platform collectors that prometheus_client puts on its default registry are put on this one too.

Names follow Prometheus' conventions: a gauge holding a moment ends in ``_timestamp_seconds``,
and one label name means one thing across metrics (``guard``: the guard that blocked a decision).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import Metric

from nodefence import __version__
from nodefence.engine.model import Decision, Verdict

CONTENT_TYPE = CONTENT_TYPE_LATEST
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30)
# An incident's recovery (``nodefence_recovery_seconds``): from the node's last sign of life to
# its pods Running elsewhere, about a minute at best (the node-lifecycle grace, the proof, the
# purge, scheduling, start) and many minutes at the default waits; beyond 15 minutes the
# buckets only say "too long".
_RECOVERY_BUCKETS = (30, 45, 60, 75, 90, 120, 150, 180, 240, 300, 360, 420, 480, 600, 720, 900)
# The states a power action or read can end in (``nodefence_power_actions_total{outcome}``).
POWER_OUTCOMES = ("off", "on", "unknown", "not-sent")
ACTING_VERDICTS = frozenset({Verdict.FENCE, Verdict.PURGE, Verdict.UNFENCE})
# The server errors a webhook route can answer (an unexpected failure; the Kubernetes API
# stayed unavailable), which ``NodefenceWebhookErrors`` watches on ``/alerts``.
SERVER_ERROR_CODES = ("500", "503")


class WithoutCreated:
    """A registry's metrics without the ``_created`` sample prometheus_client adds to every
    counter and histogram series: Prometheus would store each as a series of its own, doubling
    the counters' series, and no rule or panel reads them. prometheus_client's own switch
    (``disable_created_metrics``) is process-wide; this one is the registry's alone."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            created = family.name + "_created"
            family.samples = [s for s in family.samples if s.name != created]
            yield family


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._exported = WithoutCreated(self.registry)
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        registry = self.registry
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        self.build_info = Gauge(
            "nodefence_build_info",
            "Always 1; the version of nodefence this process runs, as a label.",
            ["version"],
            registry=registry,
        )
        self.build_info.labels(__version__).set(1)
        self.alerts_received = Counter(
            "nodefence_alerts_received_total",
            "Alerts received in webhooks, after deduplication within a payload.",
            ["alertname", "status"],
            registry=registry,
        )
        self.decisions = Counter(
            "nodefence_decisions_total",
            "Decisions made, by verdict and first blocking guard ('ok' when none blocked).",
            ["verdict", "guard"],
            registry=registry,
        )
        self.actions = Counter(
            "nodefence_actions_total",
            "Actions executed against the cluster, by action type and result.",
            ["action", "result"],
            registry=registry,
        )
        self.pods_purged = Counter(
            "nodefence_pods_purged_total",
            "Pods force-deleted from fenced nodes.",
            registry=registry,
        )
        self.http_requests = Counter(
            "nodefence_http_requests_total",
            "HTTP requests served, by route, method and status code.",
            ["path", "method", "code"],
            registry=registry,
        )
        self.http_duration = Histogram(
            "nodefence_http_request_duration_seconds",
            "Time to serve an HTTP request, by route.",
            ["path"],
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.kube_api_requests = Counter(
            "nodefence_kube_api_requests_total",
            "Requests to the Kubernetes API, by verb and status code.",
            ["verb", "code"],
            registry=registry,
        )
        self.kube_api_duration = Histogram(
            "nodefence_kube_api_request_duration_seconds",
            "Time each request sent to the Kubernetes API took, answered or failed, by verb "
            "(a watch: until it was opened).",
            ["verb"],
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.power_actions = Counter(
            "nodefence_power_actions_total",
            "BMC power actions and reads, by driver, action (off, on, status) and the state "
            "read back (off, on, unknown; 'not-sent' when the incident's action was already "
            "sent and the state was only read).",
            ["driver", "action", "outcome"],
            registry=registry,
        )
        self.fenced_nodes = Gauge(
            "nodefence_fenced_timestamp_seconds",
            "When each node nodefence holds fenced was fenced, unix seconds.",
            ["node"],
            registry=registry,
        )
        self.proofs_contradicted = Counter(
            "nodefence_proof_contradicted_total",
            "Fenced nodes found back with the boot ID they had when fenced: the power-off "
            "proof was false (the BMC or agent lied, or acted on another machine).",
            ["node"],
            registry=registry,
        )
        self.contradicted_nodes = Gauge(
            "nodefence_proof_contradicted_timestamp_seconds",
            "When the power-off proof of each node was found false, unix seconds, for the nodes "
            "whose taint nodefence holds until a person releases it.",
            ["node"],
            registry=registry,
        )
        self.fencing_escalations = Counter(
            "nodefence_fencing_escalations_total",
            "Fence decisions escalated to a person in Slack (fencing.on_failure: approval) "
            "because the power step gave no proof, by node, driver and reason (driver-error, "
            "timeout, not-off, identity-unread); one count per decision that asks or waits.",
            ["node", "driver", "reason"],
            registry=registry,
        )
        self.approval_pending = Gauge(
            "nodefence_approval_pending_seconds",
            "How long a fence has been waiting for a human approval.",
            ["node"],
            registry=registry,
        )
        self.refusals = Counter(
            "nodefence_refusals_total",
            "Guards that blocked an action, one count per blocking guard of each decision.",
            ["guard"],
            registry=registry,
        )
        self.webhook_rejections = Counter(
            "nodefence_webhook_rejected_total",
            "Requests to authenticated routes refused with 401, by route and reason (missing, "
            "bad-token, bad-basic, unsupported-scheme). Alertmanager does not retry a 401.",
            ["path", "reason"],
            registry=registry,
        )
        self.reconcile_passes = Counter(
            "nodefence_reconcile_passes_total",
            "Reconcile passes this receiver ran on its own, by outcome (ok, unavailable: the "
            "Kubernetes API stayed unavailable or the pass ran out of time, error).",
            ["outcome"],
            registry=registry,
        )
        self.wakeups = Counter(
            "nodefence_wakeups_total",
            "Decisions this receiver started on its own at the end of a refusal's wait or on a "
            "node's Ready change seen by its watch, by outcome (ok, nothing: no node to judge, "
            "unavailable, error).",
            ["outcome"],
            registry=registry,
        )
        self.wakeups_armed = Gauge(
            "nodefence_wakeups_armed",
            "Wake-ups this receiver holds armed, one per node at most.",
            registry=registry,
        )
        self.reconcile_last_success = Gauge(
            "nodefence_reconcile_last_success_timestamp_seconds",
            "When this receiver last finished a reconcile pass, unix seconds (before its first "
            "pass: when its reconcile loop started).",
            registry=registry,
        )
        self.reconcile_interval = Gauge(
            "nodefence_reconcile_interval_seconds",
            "Configured seconds between this receiver's reconcile passes (0: it runs none).",
            registry=registry,
        )
        self.paused = Gauge(
            "nodefence_paused",
            "1 while nodefence is paused cluster-wide (ConfigMap nodefence-control), else 0.",
            registry=registry,
        )
        self.paused_since = Gauge(
            "nodefence_paused_timestamp_seconds",
            "When the current pause began, unix seconds on the API server's clock (0: not paused).",
            registry=registry,
        )
        self.volumes_unreleased = Gauge(
            "nodefence_volumes_unreleased",
            "VolumeAttachments still attached to a node nodefence fenced: their volumes cannot "
            "be mounted elsewhere (Multi-Attach) until they are released.",
            ["node"],
            registry=registry,
        )
        self.unknown_node_alerts = Counter(
            "nodefence_alerts_for_unknown_nodes_total",
            "Alerts that named a node the cluster does not have, by alert status: refused "
            "without an Event (there is no Node to put one on).",
            ["status"],
            registry=registry,
        )
        self.fences_without_record = Gauge(
            "nodefence_fences_without_record",
            "Nodes carrying an out-of-service taint and nodefence's mirror annotations but no "
            "entry in the fence record (the record was deleted or lost entries), as the last "
            "reconcile pass found them; each is adopted back only where the API server shows "
            "nodefence wrote the taint.",
            ["node"],
            registry=registry,
        )
        self.alertmanager_up = Gauge(
            "nodefence_alertmanager_up",
            "1 when this receiver's last request to Alertmanager's API (the reconcile pass's) "
            "was answered, 0 when it failed; absent when no Alertmanager API is configured. "
            "While it is 0, the fallback judges NotReady nodes without knowing of silences.",
            registry=registry,
        )
        self.alertmanager_last_success = Gauge(
            "nodefence_alertmanager_last_success_timestamp_seconds",
            "When this receiver last had an answer from Alertmanager's API, unix seconds.",
            registry=registry,
        )
        self.alertmanager_duration = Histogram(
            "nodefence_alertmanager_request_duration_seconds",
            "Time each request to Alertmanager's API took, answered or failed.",
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.tls_reload_failures = Counter(
            "nodefence_tls_reload_failures_total",
            "Changed NODEFENCE_TLS_CERT_FILE and NODEFENCE_TLS_KEY_FILE that were not taken, "
            "by reason (unloadable, expired, not-yet-valid): the certificate last loaded is "
            "still served.",
            ["reason"],
            registry=registry,
        )
        self.recovery = Histogram(
            "nodefence_recovery_seconds",
            "Per incident, seconds from a fenced node's last sign of life (its Lease's renewal, "
            "on the API server's clock) to every StatefulSet and Deployment pod it held Running "
            "elsewhere (and staying so); observed once per incident by the replica that "
            "recorded it.",
            buckets=_RECOVERY_BUCKETS,
            registry=registry,
        )
        self.dry_run_decisions = Counter(
            "nodefence_dry_run_decisions_total",
            "Decisions made in dry-run, by the verdict they would have had and the first guard "
            "that blocked ('ok' when none did).",
            ["verdict", "guard"],
            registry=registry,
        )

    def _child(self, metric: MetricWrapperBase, *values: str) -> Any:
        """``metric.labels(*values)``, remembered: on the refusal path, which Alertmanager may
        call hundreds of times a second, the label lookup cost more than the count. Only for
        metrics whose series are never removed."""
        key = (id(metric), values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return child

    def alert_received(self, alertname: str, status: str) -> None:
        self._child(self.alerts_received, alertname, status).inc()

    def decision_made(self, decision: Decision) -> None:
        # A decision that acted refused nothing: a reason that did not pass beside an action
        # (volumes the cluster will not release after a fence) is a warning about the result,
        # counted by nodefence_volumes_unreleased, not a refusal.
        acted = decision.verdict in ACTING_VERDICTS
        blocking = [] if acted else [r.guard for r in decision.reasons if not r.passed]
        first = blocking[0] if blocking else "ok"
        self._child(self.decisions, decision.verdict.value, first).inc()
        for guard in blocking:
            self._child(self.refusals, guard).inc()
        if decision.dry_run:
            self._child(self.dry_run_decisions, decision.verdict.value, first).inc()

    def webhook_rejected(self, path: str, reason: str) -> None:
        self.webhook_rejections.labels(path=path, reason=reason).inc()

    def reconcile_pass(self, outcome: str, finished_at_unix: float | None = None) -> None:
        self.reconcile_passes.labels(outcome=outcome).inc()
        if finished_at_unix is not None:
            self.reconcile_last_success.set(finished_at_unix)

    def wakeup(self, outcome: str) -> None:
        self.wakeups.labels(outcome=outcome).inc()

    def pause_is(self, since_unix: float | None) -> None:
        """The pause switch as last read: ``since_unix`` when paused, None when not."""
        self.paused.set(0 if since_unix is None else 1)
        self.paused_since.set(since_unix or 0)

    def volumes_unreleased_are(self, by_node: dict[str, int]) -> None:
        """Replace the gauge: VolumeAttachments still attached, per fenced node."""
        self.volumes_unreleased.clear()
        for node, attached in by_node.items():
            self.volumes_unreleased.labels(node=node).set(attached)

    def recovery_measured(self, seconds: float) -> None:
        self.recovery.observe(seconds)

    def action_executed(self, action: str, result: str) -> None:
        self._child(self.actions, action, result).inc()

    def pod_purged(self, count: int = 1) -> None:
        self.pods_purged.inc(count)

    def http_request(self, path: str, method: str, code: int, seconds: float) -> None:
        self._child(self.http_requests, path, method, str(code)).inc()
        self._child(self.http_duration, path).observe(seconds)

    def http_errors_expected(self, path: str, method: str) -> None:
        """Export the server-error series of a route from 0, so that the first one after a
        start is an increase an alert sees (``NodefenceWebhookErrors``)."""
        for code in SERVER_ERROR_CODES:
            self._child(self.http_requests, path, method, code)

    def kube_api_request(self, verb: str, code: int | str, seconds: float | None) -> None:
        """One request to the Kubernetes API; ``seconds`` is None for one never sent."""
        self._child(self.kube_api_requests, verb, str(code)).inc()
        if seconds is not None:
            self._child(self.kube_api_duration, verb).observe(seconds)

    def alertmanager_request(self, seconds: float) -> None:
        self.alertmanager_duration.observe(seconds)

    def node_fenced(self, node: str, fenced_at_unix: float) -> None:
        self.fenced_nodes.labels(node=node).set(fenced_at_unix)

    def node_unfenced(self, node: str) -> None:
        # A node that was never seen fenced by this replica has no series to remove.
        try:
            self.fenced_nodes.remove(node)
        except KeyError:
            return

    def proof_contradicted(self, node: str, found_at_unix: float) -> None:
        self.proofs_contradicted.labels(node=node).inc()
        self.contradicted_nodes.labels(node=node).set(found_at_unix)

    def contradicted_nodes_are(self, found_at_unix: dict[str, float]) -> None:
        """Replace the gauge with what the fence record holds, dropping nodes since released."""
        self.contradicted_nodes.clear()
        for node, moment in found_at_unix.items():
            self.contradicted_nodes.labels(node=node).set(moment)

    def unknown_node_alert(self, status: str) -> None:
        self.unknown_node_alerts.labels(status=status).inc()

    def fences_without_record_are(self, nodes: tuple[str, ...]) -> None:
        """Replace the gauge with the nodes the last reconcile pass found without an entry."""
        self.fences_without_record.clear()
        for node in nodes:
            self.fences_without_record.labels(node=node).set(1)

    def fenced_nodes_are(self, fenced_at_unix: dict[str, float]) -> None:
        """Replace the gauge with what the fence record says, dropping nodes since unfenced."""
        self.fenced_nodes.clear()
        for node, moment in fenced_at_unix.items():
            self.fenced_nodes.labels(node=node).set(moment)

    def fencing_escalated(self, node: str, driver: str, reason: str) -> None:
        self.fencing_escalations.labels(node=node, driver=driver, reason=reason).inc()

    def approval_waiting(self, node: str, seconds: float) -> None:
        self.approval_pending.labels(node=node).set(seconds)

    def approval_settled(self, node: str) -> None:
        try:
            self.approval_pending.remove(node)
        except KeyError:
            return

    def exposition(self) -> bytes:
        return generate_latest(self._exported)

    def tls_reload_failures_expected(self, reasons: Iterable[str]) -> None:
        """Export every reason from 0 where TLS is served, so the first refused renewal is an
        increase an alert sees."""
        for reason in reasons:
            self.tls_reload_failures.labels(reason)

    def tls_reload_failed(self, reason: str) -> None:
        self.tls_reload_failures.labels(reason).inc()

    def power_actions_expected(self, driver: str, actions: Iterable[str]) -> None:
        """Export every series a configured driver and action can produce from 0, so the first
        failure after a start is an increase an alert sees (``NodefencePowerActionFailed``)."""
        for action in actions:
            for outcome in POWER_OUTCOMES:
                self.power_actions.labels(driver, action, outcome)

    def power_action(self, driver: str, action: str, outcome: str) -> None:
        self.power_actions.labels(driver, action, outcome).inc()
