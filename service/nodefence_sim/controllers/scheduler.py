"""The default scheduler, reduced to the filters that matter when a node dies.

A pod replaced after a node failure must not land on the dead node (NotReady, or tainted by the
node lifecycle controller or by an out-of-service fence), so the filters are the real ones:
readiness, ``spec.unschedulable``, NoSchedule/NoExecute taints against tolerations, nodeSelector
and required node affinity. Scoring is a plain spread (fewest pods first, ties by node name) so
that placements are deterministic and tests can predict them.

A pod may carry the annotation ``sim.nodefence.io/initial-node`` (set by the workload controllers
on a replica's first placement): the scheduler binds it to that node if the node passes the
filters, and spreads it like any other pod otherwise.

Like the real one it records its decisions as ``events.k8s.io`` Events: ``Scheduled`` on a bind,
``FailedScheduling`` with the filters' verdict when no node fits (once per verdict: the pass that
finds the same verdict again writes nothing).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from nodefence_sim.controllers.events import NORMAL, WARNING, EventRecorder
from nodefence_sim.controllers.tolerations import tolerates
from nodefence_sim.errors import ApiError
from nodefence_sim.managed import SCHEDULER
from nodefence_sim.resources import NODES, PODS
from nodefence_sim.simulation import Controller, Simulation
from nodefence_sim.store import Obj, rfc3339
from nodefence_sim.wakeup import Wakeup

INITIAL_NODE_ANNOTATION = "sim.nodefence.io/initial-node"
SCHEDULING_EFFECTS = ("NoSchedule", "NoExecute")
TERMINAL_PHASES = ("Succeeded", "Failed")


def node_condition(node: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for condition in node.get("status", {}).get("conditions") or []:
        if condition.get("type") == kind:
            return condition  # type: ignore[no-any-return]
    return None


def node_is_ready(node: Mapping[str, Any]) -> bool:
    condition = node_condition(node, "Ready")
    return condition is not None and condition.get("status") == "True"


def untolerated_taints(
    tolerations: Iterable[Mapping[str, Any]] | None,
    taints: Iterable[Mapping[str, Any]] | None,
    effects: Iterable[str] = SCHEDULING_EFFECTS,
) -> list[Mapping[str, Any]]:
    wanted = set(effects)
    tols = list(tolerations or [])
    return [
        taint
        for taint in taints or []
        if taint.get("effect") in wanted and not any(tolerates(t, taint) for t in tols)
    ]


def _expression_matches(expression: Mapping[str, Any], value: str | None) -> bool:
    operator = expression.get("operator")
    values = [str(v) for v in expression.get("values") or []]
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and values:
        try:
            actual, bound = int(value), int(values[0])
        except ValueError:
            return False
        return actual > bound if operator == "Gt" else actual < bound
    return False


def _term_matches(term: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    labels = node["metadata"].get("labels") or {}
    fields = {"metadata.name": node["metadata"]["name"]}
    expressions = term.get("matchExpressions") or []
    field_expressions = term.get("matchFields") or []
    if not expressions and not field_expressions:
        return False
    return all(_expression_matches(e, labels.get(e.get("key"))) for e in expressions) and all(
        _expression_matches(e, fields.get(e.get("key"))) for e in field_expressions
    )


def node_selected(pod_spec: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """nodeSelector and required node affinity (terms are ORed, expressions ANDed)."""
    labels = node["metadata"].get("labels") or {}
    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = (
        (pod_spec.get("affinity") or {})
        .get("nodeAffinity", {})
        .get("requiredDuringSchedulingIgnoredDuringExecution")
    )
    if required:
        terms = required.get("nodeSelectorTerms") or []
        return any(_term_matches(term, node) for term in terms)
    return True


def is_terminating(obj: Mapping[str, Any]) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


def occupies_node(pod: Mapping[str, Any]) -> bool:
    return pod.get("status", {}).get("phase") not in TERMINAL_PHASES


def _reject_reason(pod_spec: Mapping[str, Any], node: Mapping[str, Any]) -> str | None:
    """Why the node cannot take the pod, in the scheduler's words (None: it can)."""
    if node.get("spec", {}).get("unschedulable"):
        return "node(s) were unschedulable"
    untolerated = untolerated_taints(
        pod_spec.get("tolerations"), node.get("spec", {}).get("taints")
    )
    if untolerated:
        taint = untolerated[0]
        value = f"={taint['value']}" if taint.get("value") else ""
        return f"node(s) had untolerated taint {{{taint.get('key')}{value}}}"
    if not node_is_ready(node):
        return "node(s) were not ready"
    if not node_selected(pod_spec, node):
        return "node(s) didn't match Pod's node affinity/selector"
    return None


def unschedulable_message(reasons: Mapping[str, int], total: int) -> str:
    parts = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items()))
    suffix = f" {parts}." if parts else ""
    return (
        f"0/{total} nodes are available:{suffix} preemption: 0/{total} nodes are available: "
        f"{total} Preemption is not helpful for scheduling."
    )


class Scheduler:
    """Binds pending pods whose ``schedulerName`` is the default one (or unset)."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.events = EventRecorder(sim, "default-scheduler", new_api=True, manager=SCHEDULER)
        self.wakeup = Wakeup(sim.store, kinds=(NODES, PODS))

    def reconcile(self, now: datetime) -> None:
        if not self.wakeup.due(now):
            return
        store = self.sim.store
        pending = [
            pod
            for pod in store.items(PODS)
            if not pod.get("spec", {}).get("nodeName")
            and not is_terminating(pod)
            and occupies_node(pod)
            and (pod["spec"].get("schedulerName") or "default-scheduler") == "default-scheduler"
        ]
        if not pending:
            return
        nodes = sorted(store.items(NODES), key=lambda n: str(n["metadata"]["name"]))
        load: dict[str, int] = {str(n["metadata"]["name"]): 0 for n in nodes}
        for pod in store.items(PODS):
            node_name = pod.get("spec", {}).get("nodeName")
            if node_name in load and occupies_node(pod):
                load[node_name] += 1
        pending.sort(
            key=lambda p: (str(p["metadata"].get("creationTimestamp")), p["metadata"]["name"])
        )
        for pod in pending:
            chosen = self._choose(pod, nodes, load)
            if isinstance(chosen, str):
                self._bind(pod, chosen, now)
                load[chosen] += 1
            else:
                self._mark_unschedulable(pod, chosen, len(nodes), now)

    @staticmethod
    def _choose(pod: Obj, nodes: list[Obj], load: dict[str, int]) -> str | dict[str, int]:
        spec = pod["spec"]
        eligible: list[str] = []
        reasons: dict[str, int] = {}
        for node in nodes:
            reason = _reject_reason(spec, node)
            if reason is None:
                eligible.append(str(node["metadata"]["name"]))
            else:
                reasons[reason] = reasons.get(reason, 0) + 1
        if not eligible:
            return reasons
        pinned = (pod["metadata"].get("annotations") or {}).get(INITIAL_NODE_ANNOTATION)
        if pinned in eligible:
            return str(pinned)
        return min(eligible, key=lambda name: (load[name], name))

    def _bind(self, pod: Obj, node_name: str, now: datetime) -> None:
        new = copy.deepcopy(pod)
        new["spec"]["nodeName"] = node_name
        status = new.setdefault("status", {})
        status.setdefault("phase", "Pending")
        set_condition(status, "PodScheduled", value="True", reason=None, message=None, now=now)
        try:
            self.sim.store.update(
                PODS,
                pod["metadata"]["namespace"],
                pod["metadata"]["name"],
                new,
                subresource="all",
                manager=SCHEDULER,
            )
        except ApiError:
            return
        meta = pod["metadata"]
        self.events.record(
            pod,
            NORMAL,
            "Scheduled",
            f"Successfully assigned {meta['namespace']}/{meta['name']} to {node_name}",
            at=now,
            action="Binding",
        )

    def _mark_unschedulable(
        self, pod: Obj, reasons: dict[str, int], total: int, now: datetime
    ) -> None:
        new = copy.deepcopy(pod)
        status = new.setdefault("status", {})
        status["phase"] = "Pending"
        message = unschedulable_message(reasons, total)
        if not set_condition(
            status, "PodScheduled", value="False", reason="Unschedulable", message=message, now=now
        ):
            return
        try:
            self.sim.store.update(
                PODS,
                pod["metadata"]["namespace"],
                pod["metadata"]["name"],
                new,
                subresource="all",
                manager=SCHEDULER,
            )
        except ApiError:
            return
        self.events.record(pod, WARNING, "FailedScheduling", message, at=now, action="Scheduling")


def set_condition(
    status: dict[str, Any],
    kind: str,
    *,
    value: str,
    reason: str | None,
    message: str | None,
    now: datetime,
) -> bool:
    """Set a pod condition; the transition time moves only when the status changes. Returns
    whether anything changed, so an unchanged unschedulable pod causes no write."""
    conditions: list[dict[str, Any]] = status.setdefault("conditions", [])
    wanted: dict[str, Any] = {"type": kind, "status": value}
    if reason:
        wanted["reason"] = reason
    if message:
        wanted["message"] = message
    for index, condition in enumerate(conditions):
        if condition.get("type") != kind:
            continue
        same_status = condition.get("status") == value
        wanted["lastTransitionTime"] = (
            condition.get("lastTransitionTime") if same_status else rfc3339(now)
        )
        if condition == wanted:
            return False
        conditions[index] = wanted
        return True
    wanted["lastTransitionTime"] = rfc3339(now)
    conditions.append(wanted)
    return True


def controllers(sim: Simulation) -> list[Controller]:
    return [Scheduler(sim)]
