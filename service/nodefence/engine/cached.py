"""Which decisions may stand on cached facts: refusals, and only for reasons the cache can show.

A refusal changes nothing and the reconcile pass judges every still-active alert again within a
period, so it does not need the evidence an action needs. The shell may decide first on what
it holds without a request (the node as the watch-fed index last saw it, the fence record from
a read shared by concurrent requests, the cluster counts); this module says whether that
decision stands. It stands only if it has no action at all and every guard that blocked it
rests on facts the cache really holds. Anything else is discarded and decided again on live
reads, with every precondition: a cached fact never leads to a claim, power action, taint,
purge or unfence.

Which guards' refusals may stand is each guard's row (``engine.guard_kinds``, ``Cache``): one
that reads only the node as the index saw it (Ready, NotReady since when, labels, nodefence's
annotations, taints), the fence record, the cluster counts, the pause switch or Alertmanager's
silences. A person's rejection as the fence record holds it is one: written only by nodefence in
its own namespace (S12), never withdrawn, and a stale index can only match an earlier outage's
rejection, a refusal the reconcile pass revisits; waiting for or asking a person never stands on
the cache. The cached snapshot holds no Lease, no pods and no power reading. The reasons of the
guards that read those (``Cache.UNREAD``) are dropped from a decision that stands, since they
were judged on an absence, not on the cluster; a decision is never refused because of one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from nodefence.engine.guard_kinds import CACHED_FACTS as CACHED
from nodefence.engine.guard_kinds import Cache, cache
from nodefence.engine.model import ClaimAction, Decision, Reason, Verdict
from nodefence.engine.wording import duration


@dataclass(frozen=True)
class Source:
    """Where one fact of a cached decision came from, and how old it was."""

    fact: str
    source: str
    age_seconds: float

    def __str__(self) -> str:
        return f"{self.fact} from {self.source} ({duration_text(self.age_seconds)} old)"


def duration_text(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 60 else duration(seconds)


def may_claim(decision: Decision) -> bool:
    """Whether the live decision could spend a budget slot: the cached one claims, or it was
    blocked only by what the cache does not hold (the Lease, a power reading)."""
    if any(isinstance(a, ClaimAction) for a in decision.actions):
        return True
    blocking = {r.guard for r in decision.reasons if not r.passed}
    unread = all(cache(guard) is Cache.UNREAD for guard in blocking)
    return not decision.actions and bool(blocking) and unread


def refusal_on_cache(decision: Decision, sources: tuple[Source, ...]) -> Decision | None:
    """``decision`` (made on cached facts from ``sources``) as it stands, saying so; None when
    it must be made again on live reads."""
    if decision.actions or decision.dry_run:
        return None
    if decision.verdict not in (Verdict.NOOP, Verdict.SKIP):
        return None
    kept = [r for r in decision.reasons if cache(r.guard) is not Cache.UNREAD]
    if decision.power_may_end_wait and decision.waits_only_on_power(tuple(kept)):
        # Only waits the machine's power state may end: judged live, with that state read.
        return None
    blocking = [r for r in kept if not r.passed]
    if not blocking or any(cache(r.guard) is not Cache.REFUSES for r in blocking):
        return None
    said = "; ".join(str(s) for s in sources)
    note = Reason(
        CACHED,
        True,
        f"refused on cached facts, without a live read: {said}; the Lease, pods and power "
        "state were not read (a refusal needs none of them; any action is decided on live "
        "reads)",
    )
    return dataclasses.replace(decision, reasons=(note, *kept))
