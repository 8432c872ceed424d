"""The reconcile pass's re-evaluation of the node alerts Alertmanager still holds active, at the
scale of an outage.

In a rack or zone outage Alertmanager holds hundreds of active node alerts, and every pass of
every replica judges each of them again. They follow the rules a webhook follows (refusals from
the cache, anything that acts on live reads, the process's API rate limit), a bounded number at
a time as Alertmanager's own webhooks come, each with the deadline of a webhook: one pass's
alerts neither queue behind a single deadline that runs out before the last of them is judged
nor flood the API server. One node is judged once per pass, on its first active alert.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable

import structlog

from nodefence.engine.model import AlertEvent, Decision
from nodefence.errors import ClusterUnavailableError
from nodefence.kube.client import Deadline

log = structlog.get_logger(__name__)

# Alerts judged at once within a pass; the API rate limit bounds what they send together.
IN_FLIGHT = 16

Handler = Callable[[AlertEvent, Deadline], Awaitable[Decision]]


def one_per_node(events: Iterable[AlertEvent], skip: set[str]) -> list[AlertEvent]:
    """The first active alert of each node, leaving out the nodes in ``skip``."""
    seen = set(skip)
    chosen: list[AlertEvent] = []
    for event in events:
        if event.node is None or event.node in seen:
            continue
        seen.add(event.node)
        chosen.append(event)
    return chosen


async def judge_active(
    events: Iterable[AlertEvent],
    handle: Handler,
    *,
    deadline_seconds: float,
    in_flight: int = IN_FLIGHT,
) -> list[Decision]:
    """Every event judged by ``handle``, ``in_flight`` at a time, each with its own deadline;
    the decisions in the order of the events. An alert whose judgement found the API
    unavailable is logged and left to the next pass (the others are still judged); if every
    one did, the pass fails as the API being down."""
    gate = asyncio.Semaphore(in_flight)
    chosen = list(events)

    async def one(event: AlertEvent) -> Decision | ClusterUnavailableError:
        async with gate:
            try:
                return await handle(event, Deadline(deadline_seconds))
            except ClusterUnavailableError as exc:
                log.warning("active_alert_unjudged", node=event.node, error=str(exc))
                return exc

    outcomes = await asyncio.gather(*(one(e) for e in chosen))
    decisions = [o for o in outcomes if isinstance(o, Decision)]
    failed = [o for o in outcomes if isinstance(o, ClusterUnavailableError)]
    if failed and not decisions:
        raise failed[0]
    return decisions
