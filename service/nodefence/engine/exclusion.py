"""The exclusion switch, ``nodefence.io/exclude`` on a Node's labels or annotations, read as a
person means it.

Read as ``true`` alone, ``nodefence.io/exclude=yes`` (or ``1``, or ``True``) was no exclusion at
all, silently, and the node it was meant to protect could be fenced. Of the two ways to misread
the switch, excluding is the safe one: the node keeps its workloads and a person decides. So
``true``, ``yes`` and ``1`` exclude; only an explicit ``false``, ``no`` or ``0`` does not (case
and surrounding blanks ignored); and any other value, the empty one included, excludes as well,
with a reason that says the value was not understood and was taken as an exclusion.
"""

from __future__ import annotations

from nodefence.engine.model import EXCLUDE_LABEL, NodeFacts

EXCLUDES = ("true", "yes", "1")
DOES_NOT_EXCLUDE = ("false", "no", "0")
# An annotation's value can be long and is written by whoever may patch the Node: the reason
# quotes a bounded, escaped part of it.
_SHOWN = 63


def _shown(value: str) -> str:
    quoted = repr(value[:_SHOWN])
    return quoted + " (cut)" if len(value) > _SHOWN else quoted


def exclusion(node: NodeFacts) -> str | None:
    """Why ``node`` is excluded, or None when it is not."""
    for where, values in (("label", node.labels), ("annotation", node.annotations)):
        if EXCLUDE_LABEL not in values:
            continue
        value = values[EXCLUDE_LABEL]
        spelled = value.strip().lower()
        if spelled in DOES_NOT_EXCLUDE:
            continue
        if spelled in EXCLUDES:
            return f"node {node.name} is excluded ({where} {EXCLUDE_LABEL}={value})"
        return (
            f"node {node.name} is excluded: its {where} {EXCLUDE_LABEL} is {_shown(value)}, "
            f"none of {', '.join(EXCLUDES)} (exclude) or {', '.join(DOES_NOT_EXCLUDE)} (do "
            "not); a value nodefence does not understand is taken as an exclusion"
        )
    return None
