"""The namespace controller and the NamespaceLifecycle admission plugin.

Deleting a namespace only marks it (``deletionTimestamp``, phase ``Terminating``); the
``kubernetes`` finalizer in ``spec.finalizers`` keeps it until this controller has deleted
every object in it, each with its own rules: a pod on a live node goes through its grace period
and its kubelet, an object with finalizers waits for whoever owns them. While it waits, the
namespace's conditions say what is left, with the real deleter's reasons and messages
(``pkg/controller/namespace/deletion``); once nothing is left the controller removes its
finalizer, as the ``namespaces/{name}/finalize`` subresource does, and the namespace is gone.
With ``OrderedNamespaceDeletion`` (on from Kubernetes 1.33, always from 1.34) the pods go first:
while any pod is left nothing else is deleted, and that pass reports no totals, so every
condition is in its "all is well" variant until the pods are gone.
Meanwhile nothing new may be created in it (403), which is what stops a workload controller from
recreating the pods the deletion removes.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from nodefence_sim.errors import ApiError
from nodefence_sim.managed import CONTROLLER_MANAGER
from nodefence_sim.resources import NAMESPACES, PODS, RESOURCE_TYPES, REVIEWS, ResourceType
from nodefence_sim.simulation import ORDERED_NAMESPACE_DELETION
from nodefence_sim.store import DeleteOptions, Obj, rfc3339

if TYPE_CHECKING:
    from nodefence_sim.simulation import Controller, Simulation

FINALIZER = "kubernetes"
TERMINATING = "Terminating"

DISCOVERY_FAILURE = "NamespaceDeletionDiscoveryFailure"
GROUP_VERSION_PARSING_FAILURE = "NamespaceDeletionGroupVersionParsingFailure"
CONTENT_FAILURE = "NamespaceDeletionContentFailure"
CONTENT_REMAINING = "NamespaceContentRemaining"
FINALIZERS_REMAINING = "NamespaceFinalizersRemaining"
# The condition types the deleter maintains, in its order, with their "all is well" variants.
_OK: tuple[tuple[str, str, str], ...] = (
    (DISCOVERY_FAILURE, "ResourcesDiscovered", "All resources successfully discovered"),
    (
        GROUP_VERSION_PARSING_FAILURE,
        "ParsedGroupVersions",
        "All legacy kube types successfully parsed",
    ),
    (
        CONTENT_FAILURE,
        "ContentDeleted",
        "All content successfully deleted, may be waiting on finalization",
    ),
    (CONTENT_REMAINING, "ContentRemoved", "All content successfully removed"),
    (FINALIZERS_REMAINING, "ContentHasNoFinalizers", "All content-preserving finalizers finished"),
)
_NAMESPACED = tuple(rt for rt in RESOURCE_TYPES if rt.namespaced and rt.key not in REVIEWS)


def is_terminating(namespace: Mapping[str, Any] | None) -> bool:
    return namespace is not None and (namespace.get("status") or {}).get("phase") == TERMINATING


def lifecycle_admission(sim: Simulation) -> Callable[[ResourceType, Obj], None]:
    """NamespaceLifecycle on create: nothing new in a namespace being terminated."""

    def admit(rt: ResourceType, obj: Obj) -> None:
        if not rt.namespaced:
            return
        meta = obj["metadata"]
        namespace = str(meta.get("namespace") or "")
        if not is_terminating(sim.store.peek(NAMESPACES, None, namespace)):
            return
        qualified = f"{rt.plural}.{rt.group}" if rt.group else rt.plural
        raise ApiError(
            403,
            "Forbidden",
            f'{qualified} "{meta.get("name", "")}" is forbidden: unable to create new content '
            f"in namespace {namespace} because it is being terminated",
            kind=rt.plural,
            name=str(meta.get("name", "")),
            group=rt.group,
            causes=[
                {
                    "reason": "NamespaceTerminating",
                    "message": f"namespace {namespace} is being terminated",
                    "field": "metadata.namespace",
                }
            ],
        )

    return admit


class NamespaceController:
    """Empties and then finalizes every namespace being deleted; idle otherwise (a pass looks
    at the namespaces only)."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        sim.store.add_admission(lifecycle_admission(sim))

    def reconcile(self, now: datetime) -> None:
        for namespace in list(self.sim.store.items(NAMESPACES)):
            if namespace["metadata"].get("deletionTimestamp"):
                self._sync(namespace, now)

    def _sync(self, namespace: Obj, now: datetime) -> None:
        name = str(namespace["metadata"]["name"])
        if FINALIZER not in ((namespace.get("spec") or {}).get("finalizers") or []):
            return
        failing: list[Obj] = []
        remaining: dict[str, int] = {}
        if self.sim.settings.gate_enabled(ORDERED_NAMESPACE_DELETION):
            # The pods first; while any is left the pass ends without counting the content.
            remaining, _ = self._delete_content(name, (PODS,))
        if not remaining:
            remaining, by_finalizer = self._delete_content(name, _NAMESPACED)
            failing = _conditions(remaining, by_finalizer)
        new = copy.deepcopy(namespace)
        status = new.setdefault("status", {})
        status["phase"] = TERMINATING
        _set_conditions(status, failing, now)
        if not remaining:
            new["spec"]["finalizers"] = [f for f in new["spec"]["finalizers"] if f != FINALIZER]
        if new == namespace:
            return
        try:
            self.sim.store.update(
                NAMESPACES,
                None,
                name,
                new,
                subresource="all",
                check_rv=False,
                manager=CONTROLLER_MANAGER,
            )
        except ApiError:
            return

    def _delete_content(
        self, namespace: str, types: tuple[ResourceType, ...]
    ) -> tuple[dict[str, int], dict[str, int]]:
        """Delete what is left of ``types`` (each as a plain DELETE would) and count what is
        still there: objects by resource and the finalizers holding them."""
        store = self.sim.store
        remaining: dict[str, int] = {}
        by_finalizer: dict[str, int] = {}
        for rt in types:
            for obj in list(store.items(rt, namespace)):
                meta = obj["metadata"]
                current: Obj | None = obj
                if not meta.get("deletionTimestamp"):
                    try:
                        current, removed = store.delete(
                            rt, namespace, meta["name"], DeleteOptions(uid=meta["uid"])
                        )
                    except ApiError:
                        current, removed = store.peek(rt, namespace, meta["name"]), False
                    if removed:
                        continue
                if current is None:
                    continue
                gvr = f"{rt.plural}.{rt.group}"
                remaining[gvr] = remaining.get(gvr, 0) + 1
                for finalizer in current["metadata"].get("finalizers") or []:
                    by_finalizer[finalizer] = by_finalizer.get(finalizer, 0) + 1
        return remaining, by_finalizer


def _conditions(remaining: Mapping[str, int], by_finalizer: Mapping[str, int]) -> list[Obj]:
    """The failing conditions of this pass (``ProcessContentTotals``)."""
    failing: list[Obj] = []
    if remaining:
        listed = sorted(f"{gvr} has {n} resource instances" for gvr, n in remaining.items())
        failing.append(
            {
                "type": CONTENT_REMAINING,
                "status": "True",
                "reason": "SomeResourcesRemain",
                "message": f"Some resources are remaining: {', '.join(listed)}",
            }
        )
    if by_finalizer:
        listed = sorted(f"{f} in {n} resource instances" for f, n in by_finalizer.items())
        failing.append(
            {
                "type": FINALIZERS_REMAINING,
                "status": "True",
                "reason": "SomeFinalizersRemain",
                "message": "Some content in the namespace has finalizers remaining: "
                + ", ".join(listed),
            }
        )
    return failing


def _set_conditions(status: dict[str, Any], failing: list[Obj], now: datetime) -> None:
    """``updateConditions``: each maintained type failing or in its "ok" variant; the
    transition time moves only when the status does."""
    conditions: list[dict[str, Any]] = status.setdefault("conditions", [])
    by_type = {c.get("type"): c for c in conditions}
    failing_by_type = {c["type"]: c for c in failing}
    for kind, ok_reason, ok_message in _OK:
        wanted = failing_by_type.get(
            kind, {"type": kind, "status": "False", "reason": ok_reason, "message": ok_message}
        )
        old = by_type.get(kind)
        if old is None:
            conditions.append({**wanted, "lastTransitionTime": rfc3339(now)})
            continue
        if old.get("status") != wanted["status"]:
            old["lastTransitionTime"] = rfc3339(now)
        old.update(status=wanted["status"], reason=wanted["reason"], message=wanted["message"])


def controllers(sim: Simulation) -> list[Controller]:
    return [NamespaceController(sim)]
