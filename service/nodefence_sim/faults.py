"""Fault injection and request accounting for the simulated Kubernetes API.

A real API server is slow, throttles, restarts and loses races; a client that was only ever
tested against a perfect one breaks on the first bad day. Every Kubernetes API request passes
through :meth:`Faults.decide` before it is served, so tests can make the API misbehave in the
ways real clusters do, and count exactly which requests a client made.
"""

from __future__ import annotations

import fnmatch
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

ACTIONS = ("error", "conflict", "latency", "reset", "hang", "down")
VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})


@dataclass
class FaultRule:
    """One misbehaviour: which requests it hits, how often, and what happens to them.

    ``verbs`` are Kubernetes verbs (``"write"`` stands for every mutating verb); ``path`` is a
    shell-style pattern on the URL path. ``count`` limits how many requests the rule hits,
    ``fraction`` makes it hit only that share of matching requests (drawn from the seeded
    generator, so a run can be repeated), ``duration`` ends the rule after that many seconds.
    """

    action: str = "error"
    verbs: frozenset[str] = frozenset()
    path: str = "*"
    status: int = 500
    count: int | None = None
    fraction: float | None = None
    duration: float | None = None
    latency: float = 0.0
    retry_after: int | None = None
    message: str = ""
    hits: int = 0
    created: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"unknown fault action {self.action!r}; expected one of {ACTIONS}")
        unknown = self.verbs - set(VERBS) - {"write"}
        if unknown:
            raise ValueError(f"unknown verbs {sorted(unknown)}; expected some of {VERBS}")
        if self.fraction is not None and not 0.0 <= self.fraction <= 1.0:
            raise ValueError("fraction must be between 0 and 1")
        if self.action == "conflict":
            self.status = 409
        if self.action == "down":
            self.status = 503

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FaultRule:
        """Build a rule from the ``POST /sim/v1/faults`` body (camelCase keys)."""
        verbs = data.get("verbs", data.get("verb", ()))
        if isinstance(verbs, str):
            verbs = (verbs,)
        return cls(
            action=str(data.get("action", "error")),
            verbs=frozenset(str(v) for v in verbs),
            path=str(data.get("path", "*")),
            status=int(data.get("status", 500)),
            count=None if data.get("count") is None else int(data["count"]),
            fraction=None if data.get("fraction") is None else float(data["fraction"]),
            duration=None
            if data.get("durationSeconds") is None
            else float(data["durationSeconds"]),
            latency=float(data.get("latencySeconds", 0.0)),
            retry_after=None if data.get("retryAfter") is None else int(data["retryAfter"]),
            message=str(data.get("message", "")),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "verbs": sorted(self.verbs),
            "path": self.path,
            "status": self.status,
            "count": self.count,
            "fraction": self.fraction,
            "durationSeconds": self.duration,
            "latencySeconds": self.latency,
            "retryAfter": self.retry_after,
            "hits": self.hits,
        }

    def expired(self, now: float) -> bool:
        if self.count is not None and self.hits >= self.count:
            return True
        return self.duration is not None and now - self.created >= self.duration

    def matches(self, verb: str, path: str) -> bool:
        if self.verbs:
            wanted = set(self.verbs)
            if "write" in wanted:
                wanted |= WRITE_VERBS
            if verb not in wanted:
                return False
        return fnmatch.fnmatchcase(path, self.path)


@dataclass(frozen=True)
class Fault:
    """What the server does to one request: wait ``latency`` seconds, then maybe misbehave."""

    latency: float = 0.0
    action: str | None = None
    status: int = 500
    retry_after: int | None = None
    message: str = ""
    hang_seconds: float = 0.0


@dataclass
class RequestRecord:
    """One request, logged on arrival; ``status`` is filled in when the reply is sent (0 while
    it is in flight, e.g. an open watch, or when the connection was reset)."""

    seq: int
    method: str
    path: str
    query: str
    verb: str
    status: int
    at: float

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "method": self.method,
            "path": self.path,
            "query": self.query,
            "verb": self.verb,
            "status": self.status,
            "at": self.at,
        }


class Faults:
    """The active fault rules and the log of every Kubernetes API request served."""

    def __init__(self, seed: int = 0, log_limit: int = 100_000) -> None:
        self.rules: list[FaultRule] = []
        self.latency = 0.0
        self.hang_seconds = 300.0
        self._random = random.Random(seed)  # noqa: S311 - reproducible chaos, not cryptography
        self._log: list[RequestRecord] = []
        self._log_limit = log_limit
        self._seq = 0

    # ------------------------------------------------------------------ rules
    def add(self, rule: FaultRule) -> FaultRule:
        self.rules.append(rule)
        return rule

    def fail(
        self,
        count: int | None = 1,
        *,
        status: int = 500,
        verbs: tuple[str, ...] = (),
        path: str = "*",
        fraction: float | None = None,
        retry_after: int | None = None,
    ) -> FaultRule:
        """Answer the next ``count`` matching requests with ``status`` (a Status body)."""
        return self.add(
            FaultRule(
                "error",
                frozenset(verbs),
                path,
                status,
                count,
                fraction,
                retry_after=retry_after,
            )
        )

    def conflicts(
        self, count: int | None = 1, *, verbs: tuple[str, ...] = ("write",), path: str = "*"
    ) -> FaultRule:
        """A 409 Conflict storm on writes, as concurrent writers cause."""
        return self.add(FaultRule("conflict", frozenset(verbs), path, count=count))

    def slow(self, seconds: float, *, verbs: tuple[str, ...] = (), path: str = "*") -> FaultRule:
        return self.add(FaultRule("latency", frozenset(verbs), path, latency=seconds))

    def reset(
        self, count: int | None = 1, *, verbs: tuple[str, ...] = (), path: str = "*"
    ) -> FaultRule:
        """Drop the TCP connection without answering."""
        return self.add(FaultRule("reset", frozenset(verbs), path, count=count))

    def hang(
        self, count: int | None = 1, *, verbs: tuple[str, ...] = (), path: str = "*"
    ) -> FaultRule:
        """Never answer (until ``hang_seconds``), so the client's own timeout must fire."""
        return self.add(FaultRule("hang", frozenset(verbs), path, count=count))

    def down(self, seconds: float) -> FaultRule:
        """The whole API answers 503 for ``seconds``, as during a control-plane restart."""
        return self.add(FaultRule("down", duration=seconds, retry_after=1))

    def clear(self) -> None:
        self.rules.clear()
        self.latency = 0.0

    def configure(self, body: Mapping[str, Any]) -> list[FaultRule]:
        """Apply a ``POST /sim/v1/faults`` body: ``{"rules": [...], "latencySeconds": s,
        "seed": n, "replace": bool}``."""
        rules = [FaultRule.from_json(r) for r in body.get("rules", ())]
        if body.get("replace"):
            self.rules.clear()
        if "seed" in body:
            self._random.seed(int(body["seed"]))
        if "latencySeconds" in body:
            self.latency = float(body["latencySeconds"])
        self.rules.extend(rules)
        return rules

    def decide(self, verb: str, path: str) -> Fault:
        """Pick what happens to one request; consumes one hit of the rule that fires."""
        now = time.monotonic()
        self.rules = [r for r in self.rules if not r.expired(now)]
        latency = self.latency
        for rule in self.rules:
            if not rule.matches(verb, path):
                continue
            if rule.fraction is not None and self._random.random() >= rule.fraction:
                continue
            rule.hits += 1
            if rule.action == "latency":
                latency += rule.latency
                continue
            return Fault(
                latency=latency + rule.latency,
                action=rule.action,
                status=rule.status,
                retry_after=rule.retry_after,
                message=rule.message,
                hang_seconds=self.hang_seconds,
            )
        return Fault(latency=latency)

    # ---------------------------------------------------------------- logging
    def record(
        self, method: str, path: str, query: str, verb: str, status: int = 0
    ) -> RequestRecord:
        self._seq += 1
        entry = RequestRecord(self._seq, method, path, query, verb, status, time.time())
        self._log.append(entry)
        if len(self._log) > self._log_limit:
            del self._log[: len(self._log) - self._log_limit]
        return entry

    @property
    def cursor(self) -> int:
        """The sequence number of the last recorded request (pass it as ``since`` later)."""
        return self._seq

    def requests(self, since: int = 0) -> list[RequestRecord]:
        return [r for r in self._log if r.seq > since]

    def count(
        self,
        *,
        since: int = 0,
        verb: str | None = None,
        method: str | None = None,
        path: str | None = None,
    ) -> int:
        """How many requests matched (``path`` is a shell-style pattern)."""
        return sum(
            1
            for r in self.requests(since)
            if (verb is None or r.verb == verb)
            and (method is None or r.method == method.upper())
            and (path is None or fnmatch.fnmatchcase(r.path, path))
        )


def faults_of(sim: object) -> Faults:
    """The ``Faults`` attached to a simulation as ``sim.faults``, attaching a new one if it has
    none: the API serves any simulation object, so the attribute is optional on it."""
    existing = getattr(sim, "faults", None)
    if isinstance(existing, Faults):
        return existing
    created = Faults()
    setattr(sim, "faults", created)  # noqa: B010 - the attribute is not declared on every sim
    return created
