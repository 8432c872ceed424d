"""A power step's reading, as the fence record keeps it and as the engine weighs it.

The BMC or fence agent is the one source of facts outside the cluster. Its answer is written
into the fence record beside the node's entry, stamped with the API server's time of that
write, and the request that asked reads it back with the rest of its snapshot: the decision
after a power step stands on what the record holds, like every other fact. A reading is the
asking request's alone (named by its token): any other request, a later delivery or another
replica, asks the machine itself, since a state read minutes ago says nothing of it now.
"""

from __future__ import annotations

from dataclasses import fields, replace
from datetime import datetime

from nodefence.engine.evidence import PowerEvidence
from nodefence.engine.machine import bound_to_node, proof_text
from nodefence.engine.model import Facts
from nodefence.engine.record import RecordedReading, reading_by


def stored(
    evidence: PowerEvidence, *, node: str, uid: str, by: str, operation: str, at: datetime
) -> RecordedReading:
    """The reading to write, stamped ``at`` (the API server's time of the write)."""
    answer = {f.name: getattr(evidence, f.name) for f in fields(PowerEvidence)}
    return RecordedReading(**{**answer, "at": at}, node=node, uid=uid, by=by, operation=operation)


def evidence(reading: RecordedReading) -> PowerEvidence:
    """The answer the reading holds, without who asked."""
    return PowerEvidence(**{f.name: getattr(reading, f.name) for f in fields(PowerEvidence)})


def of_request(facts: Facts, token: str) -> PowerEvidence | None:
    """The reading the request ``token`` wrote for this very node object, or None: it has not
    asked the machine yet."""
    node = facts.node
    if node is None:
        return None
    reading = reading_by(facts.record, node.name, node.uid, token)
    return evidence(reading) if reading is not None else None


def with_reading(facts: Facts, token: str) -> Facts:
    """The facts with the request's own reading as the machine's power state, in place of
    anything read before deciding (a proof written by external fencing is never the rule of a
    driver that powers the machine, so the two do not meet)."""
    read = of_request(facts, token)
    return facts if read is None else replace(facts, power=read)


def proof_to_record(facts: Facts, evidence: PowerEvidence) -> str:
    """The proof text to write before the taint, or "" when the evidence is no proof (not Off,
    or not shown to be this node's machine)."""
    node = facts.node
    if node is None or evidence.state != "off":
        return ""
    identity = bound_to_node(node, facts, evidence)
    if not identity.passed:
        return ""
    return proof_text(evidence, identity)


def timed(evidence: PowerEvidence, at: datetime) -> PowerEvidence:
    """The evidence dated ``at`` (the API server's time of its write) unless it carries its own
    time (a written proof's)."""
    return replace(evidence, at=evidence.at or at)
