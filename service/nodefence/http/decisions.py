"""The receiver's memory of its last decisions, and the one place a decision is counted.

A week of dry-run has to leave an operator more than log lines: every decision this replica
made (from a webhook, a reconcile pass, its own or one asked for) is kept, newest first, up to
``DECISION_LOG_SIZE``, and readable over ``GET /decisions`` with the same credentials as
``/alerts``. It is per replica and lost on restart, like the log it summarises; the metrics
(``nodefence_decisions_total``, ``nodefence_dry_run_decisions_total``) are the durable record,
aggregated by Prometheus.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from aiohttp import web

from nodefence.engine.model import Decision
from nodefence.engine.render import DecisionJson, decision_to_dict
from nodefence.engine.wording import instant
from nodefence.http.problems import Problem
from nodefence.observability.metrics import Metrics

DECISION_LOG_SIZE = 200
_WHOLE = re.compile(r"[0-9]{1,6}")


@dataclass(frozen=True)
class Logged:
    recorded_at: datetime
    source: str
    decision: Decision


class DecisionLog:
    def __init__(self, size: int = DECISION_LOG_SIZE) -> None:
        self._entries: deque[Logged] = deque(maxlen=size)

    def add(self, decisions: Iterable[Decision], source: str) -> None:
        now = datetime.now(UTC)
        for decision in decisions:
            self._entries.appendleft(Logged(now, source, decision))

    def newest(
        self, *, limit: int, node: str | None = None, dry_run: bool | None = None
    ) -> list[Logged]:
        chosen: list[Logged] = []
        for entry in self._entries:
            if len(chosen) >= limit:
                break
            if node is not None and entry.decision.node != node:
                continue
            if dry_run is not None and entry.decision.dry_run != dry_run:
                continue
            chosen.append(entry)
        return chosen


DECISIONS = web.AppKey("decision_log", DecisionLog)


def observe_decisions(
    metrics: Metrics, log: DecisionLog | None, decisions: Iterable[Decision], source: str
) -> None:
    """Count each decision (by verdict and blocking guard, dry-run ones also on their own) and
    remember it for ``GET /decisions``."""
    made = list(decisions)
    for decision in made:
        metrics.decision_made(decision)
    if log is not None:
        log.add(made, source)


class LoggedDecisionJson(DecisionJson):
    """A decision as ``GET /decisions`` serves it: when this replica recorded it, and from where
    (the route, /alerts or /reconcile, or reconcile-loop)."""

    recorded_at: str
    source: str


def _entry_json(entry: Logged) -> LoggedDecisionJson:
    return {
        "recorded_at": instant(entry.recorded_at),
        "source": entry.source,
        **decision_to_dict(entry.decision),
    }


def _query_int(request: web.Request, name: str, default: int, upper: int) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    if not _WHOLE.fullmatch(raw) or not 1 <= int(raw) <= upper:
        raise Problem(
            400,
            kind="bad-query",
            detail=f"{name} must be a whole number from 1 to {upper}.",
        )
    return int(raw)


def _query_bool(request: web.Request, name: str) -> bool | None:
    raw = request.query.get(name)
    if raw is None:
        return None
    if raw.lower() not in ("true", "false"):
        raise Problem(400, kind="bad-query", detail=f"{name} must be true or false.")
    return raw.lower() == "true"


async def get_decisions(request: web.Request) -> web.Response:
    """The last decisions of this replica, newest first: ``?limit=N`` (default 50), ``?node=``
    and ``?dry_run=true|false`` narrow them."""
    log = request.app[DECISIONS]
    limit = _query_int(request, "limit", 50, DECISION_LOG_SIZE)
    node = request.query.get("node") or None
    entries = log.newest(limit=limit, node=node, dry_run=_query_bool(request, "dry_run"))
    return web.json_response({"decisions": [_entry_json(e) for e in entries]})


def add_decision_routes(app: web.Application, log: DecisionLog) -> None:
    app[DECISIONS] = log
    app.router.add_get("/decisions", get_decisions)
