"""When a simulated controller's full pass is worth running.

Every controller is level-triggered: a pass looks at the whole store. On a cluster of thousands
of nodes and tens of thousands of pods a pass costs tens of milliseconds, and the store changes
continuously (every kubelet renews its Lease every few seconds), so running every pass after
every change would keep the simulator busy doing nothing. A controller runs its pass only when
something it could react to happened, or when time it waits on may have run out.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from nodefence_sim.resources import EVENTS, LEASES, NODES, ResourceType
from nodefence_sim.store import Obj, Store, WatchEvent


def significant(event: WatchEvent) -> bool:
    """Whether a change can matter to a controller's full pass. A cluster's steady traffic is
    Lease renewals and node heartbeats (thousands a minute on a large cluster); only the
    kubelets and the node lifecycle controller read those, on their own account, so they wake
    nobody else. Events are read by people, not by controllers."""
    key = event.resource.key
    if key == EVENTS.key:
        return False
    if event.type != "MODIFIED" or event.previous is None:
        return True
    if key == LEASES.key:
        return False
    if key == NODES.key:
        return not _heartbeat_only(event.object, event.previous)
    return True


_BOOKKEEPING = frozenset({"resourceVersion", "managedFields"})


def _heartbeat_only(new: Obj, old: Obj) -> bool:
    """A node status post that only moved the heartbeat times."""
    if new.keys() != old.keys():
        return False
    if any(new[k] != old[k] for k in new if k not in ("metadata", "status")):
        return False
    new_meta, old_meta = new["metadata"], old["metadata"]
    if {k: v for k, v in new_meta.items() if k not in _BOOKKEEPING} != {
        k: v for k, v in old_meta.items() if k not in _BOOKKEEPING
    }:
        return False
    status, previous = new.get("status") or {}, old.get("status") or {}
    if status.keys() != previous.keys():
        return False
    if any(status[k] != previous[k] for k in status if k != "conditions"):
        return False
    return _without_heartbeats(status) == _without_heartbeats(previous)


def _without_heartbeats(status: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in c.items() if k != "lastHeartbeatTime"}
        for c in status.get("conditions") or []
    ]


class Wakeup:
    """When a controller's full pass is worth running: after a significant change since its
    last pass, or, for a controller with work that waits on time (a quarantine, a toleration,
    a detach timeout), every ``resync_seconds`` while ``waiting()`` says it has some. ``kinds``
    are the resources it reads (all, if not given), ``cares`` which of their changes matter
    (the significant ones, if not given). An idle cluster of thousands of nodes then
    costs these controllers nothing between changes."""

    def __init__(
        self,
        store: Store,
        *,
        resync_seconds: float = 1.0,
        waiting: Callable[[], bool] = lambda: False,
        kinds: Iterable[ResourceType] | None = None,
        cares: Callable[[WatchEvent], bool] = significant,
    ) -> None:
        self._cares = cares
        self._kinds = None if kinds is None else frozenset(rt.key for rt in kinds)
        self._pending = True
        self._last: datetime | None = None
        self._resync = resync_seconds
        self._waiting = waiting
        store.add_listener(self._heard)

    def _heard(self, event: WatchEvent) -> None:
        if self._pending or (self._kinds is not None and event.resource.key not in self._kinds):
            return
        if self._cares(event):
            self._pending = True

    def due(self, now: datetime) -> bool:
        """Whether to run the pass now; a pass it allows counts as run."""
        timed = self._waiting() and (
            self._last is None
            or now < self._last
            or (now - self._last).total_seconds() >= self._resync
        )
        if not (self._pending or timed):
            return False
        self._pending = False
        self._last = now
        return True


class Agenda:
    """The names a per-object controller (a kubelet, the node lifecycle controller) visits on
    a pass: those marked since their last visit (their object changed), and those whose
    scheduled moment has come (a renewal, a grace period running out). A pass then costs the
    few objects that are due, not one look at each of thousands."""

    def __init__(self) -> None:
        self._marked: set[str] = set()
        self._at: dict[str, datetime] = {}
        self._heap: list[tuple[datetime, str]] = []

    def mark(self, name: str) -> None:
        self._marked.add(name)

    def visited(self, name: str, next_visit: datetime) -> None:
        """``name`` was just looked at: forget the marks its own writes left, and look again
        at ``next_visit`` unless it changes first."""
        self._marked.discard(name)
        if self._at.get(name) != next_visit:
            self._at[name] = next_visit
            heapq.heappush(self._heap, (next_visit, name))

    def forget(self, name: str) -> None:
        self._marked.discard(name)
        self._at.pop(name, None)

    def due(self, now: datetime) -> list[str]:
        """The names to visit now, in name order (passes stay deterministic)."""
        names = self._marked
        self._marked = set()
        while self._heap and self._heap[0][0] <= now:
            moment, name = heapq.heappop(self._heap)
            if self._at.get(name) == moment:
                del self._at[name]
                names.add(name)
        return sorted(names)
