"""The garbage collector: dependents follow their owners through ownerReferences.

Without it ``kubectl delete deployment X`` would leave its ReplicaSet and pods running, and a
foreground deletion would never finish. Background propagation deletes an object once none of
its owners exists any more. An owner re-created under the same name has a new uid and does not
count; an owner of a kind the simulator does not serve is assumed to exist, as the real
collector leaves alone what it cannot resolve. An object that keeps at least one live owner
only loses the dangling references. An owner carrying ``foregroundDeletion`` has its dependents
deleted (in the foreground too, so chains like Deployment -> ReplicaSet -> Pod unwind from the
bottom) and loses the finalizer once no dependent with ``blockOwnerDeletion`` is left; one
carrying ``orphan`` has its dependents' references to it removed first.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from nodefence_sim.errors import ApiError
from nodefence_sim.managed import CONTROLLER_MANAGER
from nodefence_sim.resources import BY_KIND, RESOURCE_TYPES, ResourceType
from nodefence_sim.simulation import Controller, Simulation
from nodefence_sim.store import DeleteOptions, Obj, WatchEvent
from nodefence_sim.wakeup import Wakeup

FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"


class GarbageCollector:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.wakeup = Wakeup(sim.store, cares=ownership_changed)

    def reconcile(self, now: datetime) -> None:
        if not self.wakeup.due(now):
            return
        store = self.sim.store
        objects: list[tuple[ResourceType, Obj]] = [
            (rt, obj) for rt in RESOURCE_TYPES for obj in store.items(rt)
        ]
        kinds_by_uid = {obj["metadata"]["uid"]: obj["kind"] for _, obj in objects}
        for rt, obj in objects:
            finalizers = obj["metadata"].get("finalizers") or []
            if obj["metadata"].get("deletionTimestamp") and ORPHAN in finalizers:
                self._orphan(rt, obj)
            elif obj["metadata"].get("deletionTimestamp") and FOREGROUND in finalizers:
                self._foreground(rt, obj)
        for rt, obj in objects:
            refs = obj["metadata"].get("ownerReferences") or []
            if not refs:
                continue
            live = [
                r
                for r in refs
                if r.get("kind") not in BY_KIND or kinds_by_uid.get(r.get("uid")) == r.get("kind")
            ]
            if len(live) == len(refs):
                continue
            if live:
                self._set_owners(rt, obj, live)
            elif not obj["metadata"].get("deletionTimestamp"):
                self._delete(rt, obj, "Background")

    def _foreground(self, rt: ResourceType, owner: Obj) -> None:
        uid = owner["metadata"]["uid"]
        blocking = 0
        for dep_rt, dep in self.sim.store.dependents(uid):
            if not dep["metadata"].get("deletionTimestamp"):
                self._delete(dep_rt, dep, "Foreground")
            if any(
                r.get("uid") == uid and r.get("blockOwnerDeletion")
                for r in dep["metadata"].get("ownerReferences") or []
            ):
                blocking += 1
        if not blocking:
            self._drop_finalizer(rt, owner, FOREGROUND)

    def _orphan(self, rt: ResourceType, owner: Obj) -> None:
        uid = owner["metadata"]["uid"]
        for dep_rt, dep in self.sim.store.dependents(uid):
            refs = dep["metadata"].get("ownerReferences") or []
            self._set_owners(dep_rt, dep, [r for r in refs if r.get("uid") != uid])
        self._drop_finalizer(rt, owner, ORPHAN)

    def _set_owners(self, rt: ResourceType, obj: Obj, refs: list[Mapping[str, Any]]) -> None:
        new = copy.deepcopy(obj)
        if refs:
            new["metadata"]["ownerReferences"] = [dict(r) for r in refs]
        else:
            new["metadata"].pop("ownerReferences", None)
        self._update(rt, obj, new)

    def _drop_finalizer(self, rt: ResourceType, obj: Obj, finalizer: str) -> None:
        new = copy.deepcopy(obj)
        remaining = [f for f in new["metadata"].get("finalizers") or [] if f != finalizer]
        if remaining:
            new["metadata"]["finalizers"] = remaining
        else:
            new["metadata"].pop("finalizers", None)
        self._update(rt, obj, new)

    def _update(self, rt: ResourceType, old: Obj, new: Obj) -> None:
        meta = old["metadata"]
        try:
            self.sim.store.update(
                rt,
                meta.get("namespace"),
                meta["name"],
                new,
                subresource="all",
                check_rv=False,
                manager=CONTROLLER_MANAGER,
            )
        except ApiError:
            return

    def _delete(self, rt: ResourceType, obj: Obj, policy: str) -> None:
        meta = obj["metadata"]
        try:
            self.sim.store.delete(
                rt,
                meta.get("namespace"),
                meta["name"],
                DeleteOptions(uid=meta["uid"], propagation_policy=policy),
            )
        except ApiError:
            return


def controllers(sim: Simulation) -> list[Controller]:
    return [GarbageCollector(sim)]


def ownership_changed(event: WatchEvent) -> bool:
    """What can give the collector work: an object gone (its dependents may now be orphans),
    one created with owners (they may be gone already), or a change of owners, finalizers or
    deletion. A label, spec or status change of a live object gives it none."""
    if event.type != "MODIFIED" or event.previous is None:
        return event.type == "DELETED" or bool(event.object["metadata"].get("ownerReferences"))
    new, old = event.object["metadata"], event.previous["metadata"]
    return any(new.get(k) != old.get(k) for k in _OWNERSHIP_FIELDS)


_OWNERSHIP_FIELDS = ("ownerReferences", "finalizers", "deletionTimestamp")
