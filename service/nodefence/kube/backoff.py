"""Waiting before trying again: the one backoff every retry of nodefence uses.

Exponential from ``base`` up to ``cap``, each wait spread by a random factor so that replicas (or
the followers of one replica) that failed together do not all come back at the same instant.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """``base * 2**(attempt - 1)``, at most ``cap``, times a factor drawn from ``spread``."""

    base: float
    cap: float
    spread: tuple[float, float] = (0.5, 1.5)

    def delay(self, attempt: int) -> float:
        """The wait after the ``attempt``-th failure in a row (1 for the first)."""
        raw = min(self.cap, self.base * 2.0 ** max(0, attempt - 1))
        return raw * random.uniform(*self.spread)  # noqa: S311 - jitter, not security


def jittered(seconds: float, spread: float) -> float:
    """``seconds`` give or take ``spread`` of it: the period of a loop every replica runs."""
    return seconds * random.uniform(1 - spread, 1 + spread)  # noqa: S311 - jitter, not security
