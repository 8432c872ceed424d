"""The VolumeAttachments of a fenced node: say whether the cluster frees them, and where it does
not and the rule allows it, delete them once the node's pods are gone."""

from __future__ import annotations

import dataclasses

from nodefence.actions.executor import ActionResult, Executor
from nodefence.engine.model import Decision, Verdict
from nodefence.engine.volumes import (
    AUTOMATIC_DETACH_FROM,
    VolumeAttachmentFacts,
    plan_volume_release,
    server_minor,
)
from nodefence.kube.client import Deadline, KubeClient
from nodefence.kube.convert import volume_attachment_facts
from nodefence.kube.facts import FactsReader
from nodefence.policy import Policy, Rule


class VolumeRelease:
    def __init__(
        self, kube: KubeClient, reader: FactsReader, executor: Executor, policy: Policy
    ) -> None:
        self.kube = kube
        self.reader = reader
        self.executor = executor
        self.policy = policy

    async def release(
        self, decision: Decision, node_uid: str, deadline: Deadline
    ) -> tuple[Decision, list[ActionResult]]:
        """Only for a node the decision found fenced and verifiably down, and only the same node
        object; the decision comes back with the reason that says what became of its volumes."""
        if decision.node is None or not decision.node_confirmed_down:
            return decision, []
        rule = self.policy.rule_named(decision.rule) or Rule()
        acted = decision.verdict in (Verdict.FENCE, Verdict.PURGE)
        if not acted and not rule.volume_attachment_cleanup:
            # A repeated alert for a node already handled: nothing to say about volumes that
            # the fence did not already say, and nothing to delete.
            return decision, []
        minor = server_minor(self.reader.server_version)
        attachments: tuple[VolumeAttachmentFacts, ...] = ()
        snapshot = await self.reader.read(decision.node, deadline)
        if snapshot.facts.node is None or snapshot.facts.node.uid != node_uid:
            return decision, []
        if minor is None or minor < AUTOMATIC_DETACH_FROM:
            attachments = tuple(
                volume_attachment_facts(a)
                for a in await self.kube.list_volume_attachments(deadline)
            )
        plan = plan_volume_release(
            snapshot.facts, attachments, cleanup_allowed=rule.volume_attachment_cleanup
        )
        results = [await self.executor.release_volume(a.name, deadline) for a in plan.delete]
        return dataclasses.replace(decision, reasons=(*decision.reasons, plan.reason)), results
