"""What the watch-fed node index saw of each Node, as the engine's ``NodeFacts``, for refusals.

A refusal changes nothing, so it may be made on what the index saw a moment ago instead of a
read per alert: in a storm of hundreds of NotReady alerts, that is the difference between the
receiver adding to the API server's trouble and not. Every action is still decided on live
reads (``shell.cached_refusal``).

Of each Node the cache keeps what the guards a cached refusal may rest on read: name, uid,
labels (rule selectors, exclusion), nodefence's own annotations (exclusion, mirror), taints, the
Ready condition and the API server's stamp on the last status write. Other annotations are
dropped and strings shared between nodes are interned, so 5,000 nodes cost a few megabytes.
How old it may be is the index's ``age``: the time since the index last heard from the API
server, whose watch delivers every change of every Node.
"""

from __future__ import annotations

import dataclasses
import sys

from nodefence.engine.model import PREFIX, Condition, NodeFacts
from nodefence.kube.client import Json
from nodefence.kube.convert import node_facts


def _interned(values: dict[str, str]) -> dict[str, str]:
    return {sys.intern(k): sys.intern(v) for k, v in values.items()}


def slim(facts: NodeFacts) -> NodeFacts:
    """``facts`` without what no cached refusal reads, its shared strings interned."""
    ready = facts.ready
    if ready is not None:
        ready = Condition(
            type=sys.intern(ready.type),
            status=sys.intern(ready.status),
            last_transition=ready.last_transition,
            last_heartbeat=ready.last_heartbeat,
            reason=sys.intern(ready.reason),
            message=sys.intern(ready.message),
        )
    return dataclasses.replace(
        facts,
        labels=_interned(facts.labels),
        annotations=_interned({k: v for k, v in facts.annotations.items() if k.startswith(PREFIX)}),
        ready=ready,
        taints_written_by=tuple(sys.intern(m) for m in facts.taints_written_by),
    )


class NodeFactsCache:
    """Node facts by name, kept by a ``NodeIndex`` (its ``NodeListener``)."""

    def __init__(self) -> None:
        self.nodes: dict[str, NodeFacts] = {}

    def put(self, name: str, node: Json) -> None:
        self.nodes[name] = slim(node_facts(node))

    def drop(self, name: str) -> None:
        self.nodes.pop(name, None)

    def keep_only(self, names: set[str]) -> None:
        for gone in set(self.nodes) - names:
            del self.nodes[gone]

    def get(self, name: str) -> NodeFacts | None:
        return self.nodes.get(name)
