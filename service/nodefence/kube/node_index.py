"""The cluster-wide node counts from a watch-fed index, so that an alert costs the same on 5
nodes and on 5,000.

A serving receiver lists the Nodes once, a page at a time, and then follows a watch from the
list's resourceVersion (``kube.informer``). Of each Node it keeps only what ``ClusterFacts``
counts (a ``NodeSummary``: Ready, able to take workloads, control plane, Ready since when), so
its memory is a few hundred bytes per node whatever the size of the Node objects, and no page
of the list is kept once summarised.

Freshness is stated, not assumed: ``age`` is the time since the index last heard from the API
server (a finished list, a watch event or bookmark, or a watch the server ended at its
``timeoutSeconds``, which it sets short so that a quiet cluster still proves the stream alive),
and ``fresh`` answers only while that age is within ``max_age``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from nodefence.engine import readiness
from nodefence.engine.identity import canonical_identity
from nodefence.engine.mirror import FENCED_BY, FENCED_BY_VALUE
from nodefence.engine.model import CONTROL_PLANE_LABELS, OUT_OF_SERVICE_KEY, ClusterFacts
from nodefence.kube.backoff import Backoff
from nodefence.kube.client import Deadline, Json, KubeClient, Stream
from nodefence.kube.convert import ready_condition, recovered_since
from nodefence.kube.informer import Informer
from nodefence.kube.watch_events import parts

# Counts older than this are not served: the caller lists the nodes itself instead.
MAX_AGE_SECONDS = 30.0
# The server ends each watch after this long; the next one resumes where it stopped. Short, so
# that a cluster whose nodes do not change still shows a live stream well within MAX_AGE.
WATCH_SECONDS = 10
# A stream that sends nothing for this long (not even its end) is treated as broken.
IDLE_SECONDS = WATCH_SECONDS + 10.0
LIST_DEADLINE_SECONDS = 60.0
# Nodes per page of the index's list. A real Node is 9-13 KB of JSON and several times that
# once decoded; pages of 100 keep what is held at once to a few megabytes on any cluster, for
# ten times the requests of kubectl's 500 (50 at 5,000 nodes, once per start or relist).
LIST_PAGE_SIZE = 100
BACKOFF = Backoff(0.2, 10.0)


@dataclass(frozen=True, slots=True)
class NodeSummary:
    """What the cluster counts need of one Node."""

    ready: bool
    # Ready, schedulable and without the out-of-service taint: can carry what a fence moves.
    takes_workloads: bool
    control_plane: bool
    # When it came back Ready, on the API server's clock, while Ready; None for its first Ready
    # after joining (the storm cooldown looks at it; ``convert.recovered_since``).
    ready_since: datetime | None
    # S3: carries an out-of-service taint, whoever applied it (its name, interned, then; ``""``
    # otherwise), and whether nodefence's mirror annotation says nodefence fenced it.
    out_of_service: str = ""
    mirrored: bool = False
    # The machine's systemUUID in one spelling (``engine.identity.canonical_identity``), so that
    # Nodes reporting the same machine (cloned VMs) are found without parsing every UUID again.
    machine: str = ""
    # While not Ready: when the Ready condition last changed (the fallback's "NotReady since";
    # ``engine.fallback``). Only a moment to start judging from: every guard reads it afresh.
    not_ready_since: datetime | None = None


def summarize(node: Json) -> NodeSummary:
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    cond = ready_condition(node)
    out_of_service = any(t.get("key") == OUT_OF_SERVICE_KEY for t in spec.get("taints") or [])
    return NodeSummary(
        ready=readiness.is_ready(cond),
        takes_workloads=readiness.takes_workloads(
            cond, unschedulable=bool(spec.get("unschedulable")), out_of_service=out_of_service
        ),
        control_plane=any(k in (meta.get("labels") or {}) for k in CONTROL_PLANE_LABELS),
        ready_since=recovered_since(node, cond),
        out_of_service=_name(node) if out_of_service else "",
        mirrored=out_of_service
        and (meta.get("annotations") or {}).get(FENCED_BY) == FENCED_BY_VALUE,
        machine=_machine(node),
        not_ready_since=None if readiness.is_ready(cond) or cond is None else cond.last_transition,
    )


def _machine(node: Json) -> str:
    reported = ((node.get("status") or {}).get("nodeInfo") or {}).get("systemUUID")
    return canonical_identity(reported) if isinstance(reported, str) and reported else ""


def count(summaries: Iterable[NodeSummary]) -> ClusterFacts:
    """The counts the guards need of the whole cluster, from summaries instead of whole Nodes
    (``tests/kube/oracle.py`` counts the same from a full list, to check the index)."""
    total = ready = control_plane = control_plane_ready = takes_workloads = 0
    ready_since: list[datetime] = []
    tainted: list[str] = []
    mirrored: list[str] = []
    for node in summaries:
        if node.out_of_service:
            tainted.append(node.out_of_service)
            if node.mirrored:
                mirrored.append(node.out_of_service)
        total += 1
        ready += node.ready
        takes_workloads += node.takes_workloads
        control_plane += node.control_plane
        control_plane_ready += node.control_plane and node.ready
        if node.ready_since is not None:
            ready_since.append(node.ready_since)
    return ClusterFacts(
        total_nodes=total,
        ready_nodes=ready,
        control_plane_total=control_plane,
        control_plane_ready=control_plane_ready,
        schedulable_ready=takes_workloads,
        ready_since=tuple(ready_since),
        out_of_service=tuple(sorted(tainted)),
        mirrored=tuple(sorted(mirrored)),
    )


class NodeListener(Protocol):
    """Told every Node the index sees, whole, before it is summarised (``kube.cached_facts``
    keeps what the cached refusals need of each)."""

    def put(self, name: str, node: Json) -> None: ...

    def drop(self, name: str) -> None: ...

    def keep_only(self, names: set[str]) -> None: ...


async def list_summaries(
    kube: KubeClient,
    deadline: Deadline | None = None,
    *,
    listener: NodeListener | None = None,
) -> tuple[dict[str, NodeSummary], str]:
    """Every Node, summarised a page at a time (no more than one page of whole Nodes is ever
    held), and the list's resourceVersion."""
    nodes: dict[str, NodeSummary] = {}
    token: str | None = None
    while True:
        page = await kube.list_node_page(token, deadline, limit=LIST_PAGE_SIZE)
        for node in page.get("items") or []:
            nodes[_name(node)] = summarize(node)
            if listener is not None:
                listener.put(_name(node), node)
        meta = page.get("metadata") or {}
        token = meta.get("continue") or None
        if token is None:
            return nodes, str(meta.get("resourceVersion") or "")


def _name(node: Json) -> str:
    # Interned: the same name is the key of this index for the life of the process.
    return sys.intern(str((node.get("metadata") or {}).get("name", "")))


@dataclass(frozen=True)
class Counts:
    """The counts, and how old they may be: seconds since the index last heard from the API
    server."""

    facts: ClusterFacts
    age: float


class NodeIndex(Informer):
    """Nodes by name, each as a ``NodeSummary``, kept current by a list and a watch."""

    name = "node-index"

    def __init__(
        self,
        kube: KubeClient,
        *,
        max_age: float = MAX_AGE_SECONDS,
        watch_seconds: int = WATCH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        listener: NodeListener | None = None,
    ) -> None:
        super().__init__(BACKOFF, clock)
        self.kube = kube
        self.listener = listener
        self.max_age = max_age
        self.watch_seconds = watch_seconds
        self.nodes: dict[str, NodeSummary] = {}
        self._counted: ClusterFacts | None = None
        # Told the name of a node the watch saw turn Ready or stop being Ready (a serving
        # receiver's wake-ups judge it at once: ``background.wakeups``).
        self.on_ready_change: Callable[[str], None] | None = None

    # ------------------------------------------------------------ serving
    def fresh(self) -> Counts | None:
        """The counts if the index heard from the API server within ``max_age``, else None."""
        age = self.age
        if age is None or age > self.max_age:
            return None
        if self._counted is None:
            self._counted = count(self.nodes.values())
        return Counts(self._counted, age)

    def not_ready(self) -> dict[str, datetime | None] | None:
        """Each node that is not Ready, with when it stopped being Ready, if the index heard
        from the API server within ``max_age``; else None."""
        age = self.age
        if age is None or age > self.max_age:
            return None
        return {name: n.not_ready_since for name, n in self.nodes.items() if not n.ready}

    # ------------------------------------------------------------ following
    async def list(self) -> str:
        nodes, version = await list_summaries(
            self.kube, Deadline(LIST_DEADLINE_SECONDS), listener=self.listener
        )
        if self.listener is not None:
            self.listener.keep_only(set(nodes))
        self.nodes = nodes
        self._counted = None
        return version

    async def watch(self, resource_version: str) -> Stream:
        return await self.kube.watch_nodes(
            resource_version, self.watch_seconds, idle_seconds=IDLE_SECONDS
        )

    def apply(self, event: dict[str, Any]) -> str:
        kind, obj, version = parts(event)
        if kind in ("ADDED", "MODIFIED"):
            self._put(_name(obj), summarize(obj))
            if self.listener is not None:
                self.listener.put(_name(obj), obj)
        elif kind == "DELETED":
            if self.nodes.pop(_name(obj), None) is not None:
                self._counted = None
            if self.listener is not None:
                self.listener.drop(_name(obj))
        return version

    def _put(self, name: str, summary: NodeSummary) -> None:
        # Most events are heartbeats that change nothing counted: keep the counts then.
        before = self.nodes.get(name)
        if before != summary:
            self.nodes[name] = summary
            self._counted = None
        changed = before is not None and before.ready != summary.ready
        if changed and self.on_ready_change is not None:
            self.on_ready_change(name)
