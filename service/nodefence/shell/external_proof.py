"""Proof someone else wrote, read before deciding: for a rule whose driver reads proof another
party produced (``annotation``, ``http``), that proof becomes one of the facts the engine decides
on, through the driver's ``read_proof`` (``fencing.drivers``). nodefence sends nothing for it; a
driver that powers the machine proves power through the power step (``shell.power_step``)
instead.
"""

from __future__ import annotations

import dataclasses

from nodefence.engine.alerts import match_rule
from nodefence.engine.model import AlertEvent, AlertStatus
from nodefence.fencing.drivers import proof_reader
from nodefence.fencing.model import ProofPlace
from nodefence.kube.client import Deadline
from nodefence.kube.facts import FactsReader, Snapshot
from nodefence.policy import Policy


class ExternalProof:
    """The proof a firing alert's rule reads before deciding when its driver reads proof
    someone else produced (the driver's ``read_proof``); a powering driver proves power
    through ``shell.power_step.PowerStep`` instead, and ``none`` reads nothing."""

    def __init__(self, reader: FactsReader, policy: Policy) -> None:
        self.place = ProofPlace(reader.kube, reader.namespace)
        self.policy = policy

    async def read(self, event: AlertEvent, snapshot: Snapshot, deadline: Deadline) -> Snapshot:
        """The snapshot with the proof among its facts, when the rule asks for one."""
        node = snapshot.facts.node
        if node is None or event.status is not AlertStatus.FIRING:
            return snapshot
        rule = match_rule(self.policy, event, node)
        fencing = rule.fencing if rule is not None else None
        read_proof = proof_reader(fencing.driver) if fencing is not None else None
        if fencing is None or read_proof is None:
            return snapshot
        evidence = await read_proof(self.place, fencing, node.name, deadline)
        facts = dataclasses.replace(snapshot.facts, power=evidence)
        return dataclasses.replace(snapshot, facts=facts)
