"""The external power-off proof a firing alert's rule reads before deciding: the ``http``
endpoint's answer, or the proof external fencing wrote in nodefence's namespace
(``annotation``). The BMC drivers prove power through the power step instead."""

from __future__ import annotations

import dataclasses

from nodefence.engine.alerts import match_rule
from nodefence.engine.model import AlertEvent, AlertStatus
from nodefence.kube.client import Deadline
from nodefence.kube.facts import FactsReader, Snapshot
from nodefence.policy import Policy
from nodefence.power import probe_power


class ExternalProof:
    def __init__(self, reader: FactsReader, policy: Policy) -> None:
        self.reader = reader
        self.policy = policy

    async def read(self, event: AlertEvent, snapshot: Snapshot, deadline: Deadline) -> Snapshot:
        """The snapshot with the proof among its facts, when the rule asks for one."""
        node = snapshot.facts.node
        if node is None or event.status is not AlertStatus.FIRING:
            return snapshot
        rule = match_rule(self.policy, event, node)
        proof = rule.fencing if rule is not None else None
        if proof is None or proof.driver not in ("http", "annotation"):
            return snapshot
        if proof.driver == "annotation":
            evidence = await self.reader.power_proof(node.name, proof.annotation, deadline)
        else:
            evidence = await probe_power(proof.url, node.name, proof.timeout_seconds)
        facts = dataclasses.replace(snapshot.facts, power=evidence)
        return dataclasses.replace(snapshot, facts=facts)
