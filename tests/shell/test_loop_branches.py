"""The shell's loop on its own, with small stand-ins for the reader, the commit and the record
writer: each branch of read, decide, commit and read again, without a cluster.

The simulator-backed suites reach these branches only when a race happens to fall the right
way; here each is made to happen: a failed precondition read again, a node that kept changing,
a decision without actions or in dry-run never committed, and a settle that stops at its
deadline or when nothing is left to do.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import cast

import pytest
from tests.engine.engine_factories import NODE, facts, pod

from nodefence.actions.executor import ActionResult
from nodefence.actions.fence_record_writer import FenceRecordWriter
from nodefence.engine.model import Decision, PodFacts, PurgePodAction, Reason, Verdict
from nodefence.kube.client import Deadline
from nodefence.kube.facts import FactsReader, Snapshot
from nodefence.shell.commit import Commit, Committed
from nodefence.shell.loop import MAX_DECIDE_ATTEMPTS, KeptChangingError, Loop
from nodefence.shell.report import Reporter

NOW = datetime(2026, 12, 5, 3, 0, tzinfo=UTC)


class Reader:
    """Hands out one snapshot per read, the pods of each taken from ``pods_per_read`` (the
    last one repeated), and counts the reads."""

    def __init__(self, pods_per_read: list[tuple[PodFacts, ...]] | None = None) -> None:
        self.pods_per_read = pods_per_read or [()]
        self.reads = 0
        self.nodes = None
        self.kube = None

    async def read(self, name: str, deadline: Deadline) -> Snapshot:
        assert name == NODE
        pods = self.pods_per_read[min(self.reads, len(self.pods_per_read) - 1)]
        self.reads += 1
        return Snapshot(facts(pods=pods), node={"metadata": {"name": name}}, server_time=NOW)


class Records:
    def __init__(self) -> None:
        self.tokens = 0

    def new_token(self) -> str:
        self.tokens += 1
        return f"token-{self.tokens}"


class Report:
    def __init__(self) -> None:
        self.logged: list[Decision] = []

    def log_decision(self, decision: Decision) -> None:
        self.logged.append(decision)


class CommitStandIn:
    """Answers each commit from ``outcomes`` in turn (the last one repeated): ``again`` asks
    the loop to read and decide again, as a failed precondition does."""

    def __init__(self, outcomes: list[Committed]) -> None:
        self.outcomes = outcomes
        self.calls: list[tuple[Decision, str]] = []

    async def __call__(
        self, decision: Decision, snapshot: Snapshot, token: str, deadline: Deadline
    ) -> Committed:
        outcome = self.outcomes[min(len(self.calls), len(self.outcomes) - 1)]
        self.calls.append((decision, token))
        return outcome


def purge(snapshot: Snapshot) -> Decision:
    """Purge the node's Terminating pods; nothing to do when it holds none."""
    pods = [p for p in snapshot.facts.pods if p.terminating]
    actions = tuple(PurgePodAction(p.namespace, p.name, p.uid, NODE) for p in pods)
    return Decision(
        Verdict.PURGE if actions else Verdict.NOOP,
        NODE,
        (Reason("pods", True, f"{len(actions)} pod(s) to purge"),),
        actions,
    )


def loop(reader: Reader, commit: CommitStandIn, report: Report | None = None) -> Loop:
    return Loop(
        cast(FactsReader, reader),
        cast(Commit, commit),
        cast(FenceRecordWriter, Records()),
        cast(Reporter, report or Report()),
        None,
    )


def done(target: str) -> ActionResult:
    return ActionResult("purge", target, "done")


def stuck(name: str = "db-0") -> tuple[PodFacts, ...]:
    return (pod(name, terminating=True),)


async def test_a_failed_precondition_is_read_and_decided_again_with_the_same_token() -> None:
    reader = Reader([stuck(), stuck()])
    commit = CommitStandIn(
        [
            Committed([ActionResult("purge", "openstack/db-0", "conflict")], again=True),
            Committed([done("openstack/db-0")]),
        ]
    )
    turn = await loop(reader, commit).run(NODE, purge, Deadline(30))
    assert reader.reads == 2
    assert len(commit.calls) == 2
    assert commit.calls[0][1] == commit.calls[1][1], "a claim keeps its token across attempts"
    assert [r.outcome for r in turn.results] == ["conflict", "done"]
    assert turn.decision.verdict is Verdict.PURGE


async def test_a_node_that_keeps_changing_ends_in_kept_changing_after_the_last_attempt() -> None:
    reader = Reader([stuck()])
    commit = CommitStandIn([Committed([], again=True)])
    with pytest.raises(KeptChangingError, match=f"node {NODE} kept changing"):
        await loop(reader, commit).run(NODE, purge, Deadline(30))
    assert reader.reads == MAX_DECIDE_ATTEMPTS
    assert len(commit.calls) == MAX_DECIDE_ATTEMPTS


async def test_a_decision_without_actions_is_never_committed() -> None:
    reader = Reader([()])
    commit = CommitStandIn([Committed([])])
    turn = await loop(reader, commit).run(NODE, purge, Deadline(30))
    assert commit.calls == []
    assert turn.decision.verdict is Verdict.NOOP
    assert turn.results == []


async def test_a_dry_run_decision_is_logged_and_never_committed() -> None:
    def dry(snapshot: Snapshot) -> Decision:
        return dataclasses.replace(purge(snapshot), dry_run=True)

    reader, report = Reader([stuck()]), Report()
    commit = CommitStandIn([Committed([done("openstack/db-0")])])
    turn = await loop(reader, commit, report).run(NODE, dry, Deadline(30))
    assert commit.calls == []
    assert report.logged == [turn.decision]
    assert turn.decision.actions, "the plan is kept, only its writes are withheld"


async def test_the_prepared_snapshot_is_what_the_engine_decides_on() -> None:
    seen: list[int] = []

    async def add_a_pod(snapshot: Snapshot) -> Snapshot:
        more = dataclasses.replace(snapshot.facts, pods=stuck("added-by-prepare"))
        return dataclasses.replace(snapshot, facts=more)

    def decide(snapshot: Snapshot) -> Decision:
        seen.append(len(snapshot.facts.pods))
        return purge(snapshot)

    commit = CommitStandIn([Committed([done("openstack/added-by-prepare")])])
    turn = await loop(Reader([()]), commit).run(NODE, decide, Deadline(30), prepare=add_a_pod)
    assert seen == [1]
    [(decision, _token)] = commit.calls
    assert [a.name for a in decision.actions if isinstance(a, PurgePodAction)] == [
        "added-by-prepare"
    ]
    assert turn.results == [done("openstack/added-by-prepare")]


async def test_settle_turns_until_nothing_is_left_and_no_pod_still_runs() -> None:
    # Pods still running (not yet evicted) keep the loop turning even when nothing is to be
    # purged; then the evicted one is purged; then nothing is left.
    running = (pod("web-0", terminating=False),)
    reader = Reader([running, stuck("web-0"), ()])
    commit = CommitStandIn([Committed([done("openstack/web-0")])])
    turns = await loop(reader, commit).settle(NODE, purge, Deadline(60), seconds=60)
    assert [t.decision.verdict for t in turns] == [Verdict.NOOP, Verdict.PURGE, Verdict.NOOP]
    assert len(commit.calls) == 1


async def test_settle_with_no_time_left_turns_no_more() -> None:
    reader = Reader([stuck()])
    commit = CommitStandIn([Committed([done("openstack/db-0")])])
    turns = await loop(reader, commit).settle(NODE, purge, Deadline(60), seconds=0)
    assert turns == []
    assert reader.reads == 0
