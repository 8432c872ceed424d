"""Pod priority: the PriorityClasses a real API server creates when it starts
(``poststarthook/scheduling/bootstrap-system-priority-classes``) and the Priority admission
plugin (``plugin/pkg/admission/priority``).

On create a pod gets the value and preemption policy of the class it names (or of the
cluster's default class, or 0 and ``PreemptLowerPriority`` without one); naming a class that
does not exist, or a priority that is not the class's, is refused with the real 403. The
simulated scheduler places pods without regard to their priority and preempts nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nodefence_sim.errors import ApiError
from nodefence_sim.resources import PODS, PRIORITY_CLASSES, ResourceType
from nodefence_sim.store import Obj, Store

API_SERVER = "kube-apiserver"
PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
# pkg/apis/scheduling: SystemCriticalPriority is twice the highest user-definable priority.
SYSTEM_CRITICAL_PRIORITY = 2_000_000_000
SYSTEM_PRIORITY_CLASSES: tuple[Obj, ...] = (
    {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "system-node-critical"},
        "value": SYSTEM_CRITICAL_PRIORITY + 1000,
        "description": "Used for system critical pods that must not be moved from their current "
        "node.",
        "preemptionPolicy": PREEMPT_LOWER_PRIORITY,
    },
    {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "system-cluster-critical"},
        "value": SYSTEM_CRITICAL_PRIORITY,
        "description": "Used for system critical pods that must run in the cluster, but can be "
        "moved to another node if necessary.",
        "preemptionPolicy": PREEMPT_LOWER_PRIORITY,
    },
)


def bootstrap_system_priority_classes(store: Store) -> None:
    """Create the system classes the store lacks, as the API server does when it starts."""
    for pc in SYSTEM_PRIORITY_CLASSES:
        if store.peek(PRIORITY_CLASSES, None, pc["metadata"]["name"]) is None:
            store.create(PRIORITY_CLASSES, None, pc, manager=API_SERVER)


def _default_class(store: Store) -> Obj | None:
    """The global default class; the lowest-valued one if several claim it."""
    defaults = [pc for pc in store.items(PRIORITY_CLASSES) if pc.get("globalDefault")]
    return min(defaults, key=lambda pc: int(pc.get("value", 0)), default=None)


def _forbidden(rt: ResourceType, obj: Obj, reason: str) -> ApiError:
    name = str(obj.get("metadata", {}).get("name", ""))
    qualified = f"{rt.plural}.{rt.group}" if rt.group else rt.plural
    return ApiError(
        403,
        "Forbidden",
        f'{qualified} "{name}" is forbidden: {reason}',
        kind=rt.plural,
        name=name,
        group=rt.group,
    )


def priority_admission(store: Store) -> Callable[[ResourceType, Obj], None]:
    """The admission plugin: a pod's priority from its class; one default class at most."""

    def admit(rt: ResourceType, obj: Obj) -> None:
        if rt.key == PRIORITY_CLASSES.key:
            current = _default_class(store) if obj.get("globalDefault") else None
            if current is not None:
                raise _forbidden(
                    rt,
                    obj,
                    f"PriorityClass {current['metadata']['name']} is already marked as default. "
                    "Only one default can exist",
                )
            return
        if rt.key != PODS.key:
            return
        spec: dict[str, Any] = obj.setdefault("spec", {})
        name = str(spec.get("priorityClassName") or "")
        pc = store.peek(PRIORITY_CLASSES, None, name) if name else _default_class(store)
        if name and pc is None:
            raise _forbidden(rt, obj, f"no PriorityClass with name {name} was found")
        value = int(pc.get("value", 0)) if pc is not None else 0
        given = spec.get("priority")
        if given is not None and given != value:
            raise _forbidden(
                rt,
                obj,
                f"the integer value of priority ({given}) must not be provided in pod spec; "
                f"priority admission controller computed {value} from the given PriorityClass "
                "name",
            )
        spec["priority"] = value
        if pc is not None:
            spec["priorityClassName"] = pc["metadata"]["name"]
        policy = str((pc or {}).get("preemptionPolicy") or PREEMPT_LOWER_PRIORITY)
        given_policy = spec.get("preemptionPolicy")
        if given_policy is not None and given_policy != policy:
            raise _forbidden(
                rt,
                obj,
                f"the string value of PreemptionPolicy ({given_policy}) must not be provided in "
                f"pod spec; priority admission controller computed {policy} from the given "
                "PriorityClass name",
            )
        spec["preemptionPolicy"] = policy

    return admit
