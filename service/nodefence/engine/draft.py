"""The decision being assembled, shared by every decision's passes (``engine.decide``,
``engine.fence_path``): reasons accumulate in the order the guards ran, and ``finish`` makes the
decision of them."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from nodefence.engine.guard_kinds import DRY_RUN
from nodefence.engine.model import API_SERVER_CLOCK, Action, Decision, Reason, Verdict
from nodefence.engine.record import FenceEntry
from nodefence.policy import Policy


@dataclass
class Draft:
    """The decision being assembled: reasons accumulate in the order the guards ran."""

    policy: Policy
    now: datetime
    alertname: str
    fingerprint: str
    status: str
    clock: str = API_SERVER_CLOCK
    node: str | None = None
    rule: str | None = None
    reasons: list[Reason] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.policy.dry_run:
            self.add(
                DRY_RUN,
                True,
                "dry run: nothing will be written to the cluster; actions are what would be done",
            )

    def add(self, guard: str, passed: bool, message: str) -> None:
        self.reasons.append(Reason(guard, passed, message))

    def extend(self, *reasons: Reason | None) -> None:
        self.reasons.extend(r for r in reasons if r is not None)

    def finish(
        self, verdict: Verdict, actions: tuple[Action, ...] = (), *, confirmed_down: bool = False
    ) -> Decision:
        return Decision(
            verdict=verdict,
            node=self.node,
            reasons=tuple(self.reasons),
            actions=actions,
            dry_run=self.policy.dry_run,
            alertname=self.alertname,
            fingerprint=self.fingerprint,
            status=self.status,
            rule=self.rule,
            now=self.now,
            node_confirmed_down=confirmed_down,
        )


def claim_fresh(draft: Draft, entry: FenceEntry) -> bool:
    """A claim's age is known only on the API server's clock: on any other it is never judged
    stale, since rolling back a claim another replica is still completing frees its slot."""
    if draft.clock != API_SERVER_CLOCK:
        return True
    timeout = draft.policy.cluster.claim_timeout_seconds
    return draft.now - entry.claimed_at < timedelta(seconds=timeout)
