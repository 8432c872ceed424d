"""The fallback: a NotReady node is judged as if its alert had fired when none arrived.

nodefence's trigger is an alert, and the monitoring stack that sends it may be down, or may have
died with the very node nodefence should fence (a single Alertmanager or Prometheus pod, stuck
Terminating on it). So the reconcile pass looks at the Nodes itself: a node NotReady for
``cluster.fallback_after_seconds`` (on the API server's clock) that no alert brought and that
Alertmanager, where it can be asked, does not hold either, is decided as a firing alert would
be, with every guard. A silenced or inhibited alert counts as held: a silence is an operator
saying "leave this node alone", and the fallback must not go around it.

The serving receiver's watch and wake-ups (``background.wakeups``) judge a node the same way as
soon as it turns NotReady and when a wait ends; the ``alert-wait`` guard then holds the node
until the window has run, unless its machine reads Off (``engine.power_waits``). The default
window is the rule's 5-minute NotReady minimum: a hung machine waits the same with or without an
alert. This module only chooses the nodes and words the reason; deciding stays ``decide``'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from nodefence.engine.model import AlertEvent, AlertStatus
from nodefence.engine.wording import instant

# What the decision, the fence record and the metrics name as the alert of a fallback decision.
ALERTNAME = "no alert (fallback)"


@dataclass(frozen=True)
class Silence:
    """Why no alert is taken to be held for the node: what Alertmanager said, or why it could
    not be asked. ``text`` completes "no alert arrived: ..."."""

    text: str


def not_configured() -> Silence:
    return Silence("no Alertmanager API is configured (NODEFENCE_ALERTMANAGER_URL) to ask")


def unreachable(since: datetime | None, error: str) -> Silence:
    when = f" since {instant(since)}" if since is not None else ""
    return Silence(f"Alertmanager is unreachable{when} ({error})")


def holds_none() -> Silence:
    return Silence("Alertmanager holds no alert for it, firing, silenced or inhibited")


def due(
    not_ready: Mapping[str, datetime | None],
    now: datetime,
    after_seconds: int,
    skip: Iterable[str] = (),
) -> list[tuple[str, datetime]]:
    """The nodes NotReady for at least ``after_seconds`` (``not_ready``: node -> when its Ready
    condition last changed, while not True), oldest outage first, leaving out ``skip`` (nodes
    an alert or the fence record already brings to the pass). A node whose NotReady time is
    unknown is left out: the fallback never guesses how long a node has been down."""
    if after_seconds <= 0:
        return []
    left_out = set(skip)
    window = timedelta(seconds=after_seconds)
    chosen = [
        (name, since)
        for name, since in not_ready.items()
        if since is not None and name not in left_out and now - since >= window
    ]
    return sorted(chosen, key=lambda pair: (pair[1], pair[0]))


def event(node: str, since: datetime, silence: Silence, silenced: str = "") -> AlertEvent:
    """The firing event the fallback judges ``node`` on. Its fingerprint names the node and the
    outage (when it went NotReady), so every replica and every pass of one outage speak of the
    same incident, and a later outage of the same node is another one. The reason holds no
    running duration, so the Events of successive passes read the same. Whether the wait for an
    alert is over is the ``alert-wait`` guard's to say (``guards.alert_waited``): a node the
    watch saw turn NotReady is judged at once, and its machine's state may end that wait."""
    why = (
        f"no alert arrived: {silence.text}; the node has been NotReady since {instant(since)}, "
        "so it is judged as if its alert had fired, on every guard"
    )
    return AlertEvent(
        alertname=ALERTNAME,
        status=AlertStatus.FIRING,
        node=node,
        fingerprint=f"fallback/{node}/{int(since.timestamp())}",
        starts_at=since,
        fallback=why,
        silenced=silenced,
    )
