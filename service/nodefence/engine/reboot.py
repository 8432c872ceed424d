"""The power-on of a rule with ``fencing.action: reboot``, and what happens when it does not take.

The machine is powered on again once the purge of what nodefence may purge is done: a pod whose
finalizer the rule may not strip stays Terminating whatever nodefence does, and waiting for it
would keep the machine off for ever, so it is named in the decision and the power-on goes ahead.

A power-on can be lost: a BMC that drops the action, or a power-off that arrives late from a
step another replica started before the machine came back. So a fenced node that is still down
well after its power-on was sent has its machine's power state read; if it reads Off, it is
powered on once more, and after ``MAX_POWER_ONS`` the decision says a person must look, rather
than power-cycling a machine without bound. Nor is a machine powered on through a target the BMC
inventory gives to two nodes (an inventory changed since the fence): it may be the other node's.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from nodefence.engine.evidence import PowerEvidence
from nodefence.engine.model import NodeFacts, PodFacts, PowerAction, PurgePodAction
from nodefence.engine.record import FenceEntry
from nodefence.engine.wording import duration, instant
from nodefence.policy import Fencing

MAX_POWER_ONS = 2
SHARED_TARGET = (
    "nodefence powers on no target that the BMC inventory gives to more than one node: "
    "power the machine on by hand, or correct the inventory"
)
_MAX_LISTED = 5


@dataclass(frozen=True)
class RebootStep:
    """The reboot's next step: why, and the power action (None: nothing to do now)."""

    passed: bool
    message: str
    action: PowerAction | None = None


def reboots(fencing: Fencing | None) -> bool:
    """Whether the rule powers the machine on again after the purge."""
    return fencing is not None and fencing.powers and fencing.action == "reboot"


def left_behind(
    purges: tuple[PurgePodAction, ...], pods: tuple[PodFacts, ...]
) -> tuple[PurgePodAction, ...]:
    """Purges that cannot make their pod go: it is already being deleted and holds a finalizer
    the rule may not strip, so deleting it again changes nothing."""
    by_uid = {p.uid: p for p in pods}
    stays: list[PurgePodAction] = []
    for purge in purges:
        pod = by_uid.get(purge.uid)
        if pod is None or not pod.terminating:
            continue
        if any(f not in purge.strip_finalizers for f in pod.finalizers):
            stays.append(purge)
    return tuple(stays)


def _named(stays: tuple[PurgePodAction, ...], pods: tuple[PodFacts, ...]) -> str:
    by_uid = {p.uid: p for p in pods}
    names = []
    for purge in stays[:_MAX_LISTED]:
        pod = by_uid.get(purge.uid)
        kept = [f for f in (pod.finalizers if pod else ()) if f not in purge.strip_finalizers]
        names.append(f"{purge.namespace}/{purge.name} (finalizer {', '.join(kept)})")
    more = len(stays) - _MAX_LISTED
    return "; ".join(names) + (f" and {more} more" if more > 0 else "")


def next_step(
    node: NodeFacts,
    entry: FenceEntry,
    fencing: Fencing,
    *,
    power: PowerEvidence | None,
    now: datetime,
    stays: tuple[PurgePodAction, ...],
    pods: tuple[PodFacts, ...],
) -> RebootStep:
    """For a fenced node that is still down, with nothing left to purge that nodefence can
    purge: the power-on, a read of the power state, a power-on once more, or nothing."""
    behind = (
        f"; left behind, since the rule may not strip their finalizers: {_named(stays, pods)}"
        if stays
        else ""
    )
    sent = entry.power_on_sent_at
    if sent is None:
        gone = "every pod nodefence may purge is purged" if stays else "the stuck pods are gone"
        return RebootStep(
            True,
            f"{gone}: powering the machine on again through its BMC (the rule's "
            "fencing.action is reboot); the unfence follows once it is back with a new boot "
            f"ID{behind}",
            PowerAction(node.name, node.uid, fencing.driver, "on", True, entry=entry),
        )
    since = now - sent
    when = f"power-on was sent at {instant(sent)} ({duration(max(since, timedelta()))} ago)"
    if since < timedelta(seconds=fencing.timeout_seconds):
        return RebootStep(True, f"{when}; waiting for the machine to come back")
    if entry.power_on_count >= MAX_POWER_ONS:
        return RebootStep(
            False,
            f"{when} and the node is still not back after {entry.power_on_count} power-ons; "
            "nodefence does not power it on again: check the machine and its BMC",
        )
    if power is None:
        return RebootStep(
            True,
            f"{when} and the node is not back: reading the machine's power state",
            PowerAction(node.name, node.uid, fencing.driver, "status", False, entry=entry),
        )
    if power.state == "off":
        attempt = entry.power_on_count + 1
        return RebootStep(
            True,
            f"{when}, and {power.source} still reports the machine Off: powering it on once "
            f"more (power-on {attempt} of at most {MAX_POWER_ONS})",
            PowerAction(node.name, node.uid, fencing.driver, "on", True, entry=entry),
        )
    return RebootStep(
        True,
        f"{when}; {power.source} reports {power.state}: waiting for the node's kubelet",
    )
