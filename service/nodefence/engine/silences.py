"""Which Alertmanager silence holds a node that no alert brought.

A silence is how an on-call person says "leave this node alone" (a hardware repair, a planned
shutdown). Alertmanager applies it to the alerts it holds; when it holds none for a node (the
monitoring stack is dead, or Alertmanager restarted and Prometheus has not re-sent them), the
fallback judges the node itself, and the silence must hold it there as it would have held the
alert. So a silence is judged, with Alertmanager's semantics (``engine.matchers``), against the
labels the node's alert would carry: a handled alert name, the node under one of the policy's
node labels, and the labels that identify this cluster (``NODEFENCE_ALERTMANAGER_MATCHERS``).
A label nodefence cannot know (``severity``, ``job``) has the empty value, as it would for an
alert without it, so a silence narrowed by one does not hold: it was written for other alerts.
A regular expression that cannot be read holds, since holding is the safe side.

Inhibitions are not silences: Alertmanager inhibits an alert only while another alert (the
source) fires beside it, and both exist only while Alertmanager holds them. With no alert held
there is nothing to inhibit, and nodefence cannot tell which source would have inhibited an
alert that does not exist; an inhibited alert that Alertmanager holds does hold the node
(``engine.fallback``). To hold a node through an outage of the monitoring stack, silence it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from nodefence.engine.matchers import Matcher, all_match
from nodefence.engine.wording import instant

# Bounds on what is kept of one silence, read from outside: the shared record of silences
# (``nodefence-silences``) stays far below the 1 MiB an object may hold.
MAX_COMMENT_CHARS = 300
MAX_CREATOR_CHARS = 100
MAX_ID_CHARS = 64
MAX_KEPT = 200


@dataclass(frozen=True)
class Silence:
    id: str
    matchers: tuple[Matcher, ...]
    starts_at: datetime
    ends_at: datetime
    created_by: str = ""
    comment: str = ""
    # Alertmanager's own word, in the answer just read, that the silence is in force. Its
    # times are on Alertmanager's clock, which may be a little off the API server's: a silence
    # it just started (it moves a start in the past to its "now") must not read as pending.
    in_force: bool = False

    def active(self, now: datetime) -> bool:
        """In force by Alertmanager's word when just read, else by its times on ``now``."""
        return self.in_force or self.starts_at <= now < self.ends_at

    def words(self) -> str:
        comment = f' "{self.comment}"' if self.comment else ""
        creator = f" by {self.created_by}" if self.created_by else ""
        matchers = ", ".join(str(m) for m in self.matchers)
        return (
            f"Alertmanager silence {self.id}{creator}{comment} ({{{matchers}}}) holds it "
            f"until {instant(self.ends_at)}"
        )


def alert_labels(
    node: str, alertnames: Sequence[str], node_labels: Sequence[str], cluster: Mapping[str, str]
) -> list[dict[str, str]]:
    """The label sets the node's alert could carry: one per handled alert name and node label
    (an alert names its node under one label; which one is the alert rule's choice)."""
    return [
        {**cluster, "alertname": name, label: node} for name in alertnames for label in node_labels
    ]


def holding(
    silences: Iterable[Silence], labelsets: Sequence[Mapping[str, str]], now: datetime
) -> Silence | None:
    """The active silence that would silence one of ``labelsets``, the one ending last first:
    the decision names the silence that holds longest."""
    active = sorted(
        (s for s in silences if s.active(now)), key=lambda s: (s.ends_at, s.id), reverse=True
    )
    return next(
        (s for s in active if any(all_match(s.matchers, labels) for labels in labelsets)), None
    )


def could_hold(
    silence: Silence,
    alertnames: Sequence[str],
    node_labels: Sequence[str],
    cluster: Mapping[str, str],
) -> bool:
    """Whether the silence could hold some node of this cluster: its matchers on anything but
    a node label match a handled alert of this cluster. Only these are kept while Alertmanager
    answers, so that another cluster's silences on a shared Alertmanager take no room."""
    rest = tuple(m for m in silence.matchers if m.name not in node_labels)
    return any(all_match(rest, {**cluster, "alertname": name}) for name in alertnames)
