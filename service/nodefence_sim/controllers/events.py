"""Events as the simulated components record them, through one recorder per component.

``kubectl describe`` and ``kubectl events`` are how an operator reads what the control plane
did, so the Events carry what the real recorders put in them: the involved object's reference,
the reporting component, and repeats folded into one Event. As client-go's ``EventCorrelator``
does, an Event identical to one already recorded (same component, object, type, reason and
message) raises its ``count`` and ``lastTimestamp`` (for the ``events.k8s.io`` recorder the
scheduler uses: its ``series``) instead of creating another, and a per-object token bucket (25
at once, then one every five minutes) drops the rest of a flood, so a controller that retries on
every pass writes a bounded number of times. Components record on transitions only; nothing
here runs on a tick.
"""

from __future__ import annotations

import copy
import socket
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from nodefence_sim.errors import ApiError
from nodefence_sim.managed import CONTROLLER_MANAGER
from nodefence_sim.resources import BY_KIND, EVENTS
from nodefence_sim.store import Obj, rfc3339

if TYPE_CHECKING:
    from nodefence_sim.simulation import Simulation

NORMAL = "Normal"
WARNING = "Warning"
# client-go's defaults: the correlator's LRU size and the spam filter's bucket.
CACHE_SIZE = 4096
SPAM_BURST = 25
SPAM_REFILL_SECONDS = 300.0
# Events of cluster-scoped objects are stored here, as the real recorders do.
CLUSTER_EVENT_NAMESPACE = "default"


def micro_time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def reference(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The ``ObjectReference`` a recorder builds from an object (``ref.GetReference``)."""
    meta = obj["metadata"]
    kind = str(obj.get("kind") or "")
    rt = BY_KIND.get(kind)
    ref: dict[str, Any] = {
        "kind": kind,
        "name": meta["name"],
        "uid": meta.get("uid", ""),
        "apiVersion": obj.get("apiVersion") or (rt.group_version if rt else "v1"),
        "resourceVersion": meta.get("resourceVersion", ""),
    }
    if meta.get("namespace"):
        ref["namespace"] = meta["namespace"]
    return ref


@dataclass
class _Bucket:
    tokens: float
    checked: datetime


class EventRecorder:
    """One component's recorder. ``new_api`` records as ``events.k8s.io/v1`` recorders do
    (``eventTime``, ``series``, ``action``, ``reportingController``/``reportingInstance``, an
    empty ``source``); otherwise as the ``core/v1`` broadcaster (``source.component``,
    ``count``, ``firstTimestamp``/``lastTimestamp``)."""

    def __init__(
        self, sim: Simulation, component: str, *, new_api: bool = False, manager: str = ""
    ) -> None:
        self.sim = sim
        self.component = component
        self.new_api = new_api
        self.manager = manager or CONTROLLER_MANAGER
        self.instance = f"{component}-{socket.gethostname()}" if new_api else ""
        self._recorded: OrderedDict[tuple[str, ...], tuple[str, str]] = OrderedDict()
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()

    def record(
        self,
        involved: Mapping[str, Any],
        type_: str,
        reason: str,
        message: str,
        *,
        at: datetime | None = None,
        action: str = "",
    ) -> None:
        """Record (or count again) an Event about ``involved`` (an object or a reference);
        ``at`` is when it happened, for a transition the simulation dates in the past."""
        ref = dict(involved) if "metadata" not in involved else reference(involved)
        moment = at or self.sim.store.now()
        if not self._allowed(ref, moment):
            return
        namespace = str(ref.get("namespace") or CLUSTER_EVENT_NAMESPACE)
        key = (
            self.component,
            str(ref.get("kind")),
            namespace,
            str(ref.get("name")),
            str(ref.get("uid")),
            type_,
            reason,
            message,
        )
        known = self._recorded.get(key)
        if known is not None and self._count_again(known, moment):
            self._recorded.move_to_end(key)
            return
        name = f"{ref['name']}.{int(moment.timestamp() * 1e9):x}"
        while self.sim.store.peek(EVENTS, namespace, name) is not None:
            name = f"{name}0"
        event: Obj = {
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": ref,
            "reason": reason,
            "message": message,
            "type": type_,
        }
        if self.new_api:
            event.update(
                source={},
                eventTime=micro_time(moment),
                firstTimestamp=None,
                lastTimestamp=None,
                action=action,
                reportingComponent=self.component,
                reportingInstance=self.instance,
            )
        else:
            stamp = rfc3339(moment)
            event.update(
                source={"component": self.component},
                firstTimestamp=stamp,
                lastTimestamp=stamp,
                count=1,
                eventTime=None,
                reportingComponent=self.component,
                reportingInstance="",
            )
        try:
            self.sim.store.create(EVENTS, namespace, event, manager=self.manager)
        except ApiError:
            return
        self._recorded[key] = (namespace, name)
        if len(self._recorded) > CACHE_SIZE:
            self._recorded.popitem(last=False)

    def _count_again(self, known: tuple[str, str], moment: datetime) -> bool:
        """Raise the count of the Event already recorded; False when it is gone."""
        namespace, name = known
        stored = self.sim.store.peek(EVENTS, namespace, name)
        if stored is None:
            return False
        new = copy.deepcopy(stored)
        if self.new_api:
            series = new.get("series") or {"count": 1}
            new["series"] = {
                "count": int(series.get("count", 1)) + 1,
                "lastObservedTime": micro_time(moment),
            }
        else:
            new["count"] = int(new.get("count") or 1) + 1
            new["lastTimestamp"] = rfc3339(moment)
        try:
            self.sim.store.update(EVENTS, namespace, name, new, manager=self.manager)
        except ApiError:
            return False
        return True

    def _allowed(self, ref: Mapping[str, Any], moment: datetime) -> bool:
        """client-go's spam filter: a token bucket per source and involved object."""
        key = "/".join(
            str(ref.get(k, "")) for k in ("kind", "namespace", "name", "uid", "apiVersion")
        )
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = _Bucket(float(SPAM_BURST), moment)
            self._buckets[key] = bucket
            if len(self._buckets) > CACHE_SIZE:
                self._buckets.popitem(last=False)
        elapsed = max(0.0, (moment - bucket.checked).total_seconds())
        bucket.tokens = min(float(SPAM_BURST), bucket.tokens + elapsed / SPAM_REFILL_SECONDS)
        bucket.checked = max(moment, bucket.checked)
        if bucket.tokens < 1:
            return False
        bucket.tokens -= 1
        return True
