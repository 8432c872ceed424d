"""After the taint, the taint manager evicts the node's remaining pods; on a dead node they hang
Terminating too. Purge them while the request still has time; whatever is left is the reconcile
pass's to finish."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from nodefence.actions.executor import ActionResult, Executor
from nodefence.engine.model import Decision, PurgePodAction
from nodefence.kube.client import Deadline
from nodefence.kube.facts import FactsReader, Snapshot

SETTLE_POLL_SECONDS = 0.2


class Settle:
    def __init__(self, reader: FactsReader, executor: Executor) -> None:
        self.reader = reader
        self.executor = executor

    async def run(
        self,
        node: str,
        decider: Callable[[Snapshot], Decision],
        deadline: Deadline,
        seconds: float,
    ) -> list[ActionResult]:
        """Purge what each fresh decision names, for at most ``seconds``, until no pod is left
        running and nothing is left to purge."""
        results: list[ActionResult] = []
        settle = Deadline(min(seconds, deadline.remaining))
        while not settle.expired:
            snapshot = await self.reader.read(node, deadline)
            decision = decider(snapshot)
            purge = [a for a in decision.actions if isinstance(a, PurgePodAction)]
            if purge:
                results.extend(await self.executor.purge(purge, deadline))
            if not any(not p.terminating for p in snapshot.facts.pods) and not purge:
                break
            await asyncio.sleep(SETTLE_POLL_SECONDS)
        return results
