"""Read the live facts for one decision: the node, its Lease, its pods, cluster counts."""

from __future__ import annotations

from dataclasses import dataclass

from nodefence.engine.model import ClusterFacts, Facts, LeaseFacts
from nodefence.kube.client import Deadline, Json, KubeClient, KubeError
from nodefence.kube.convert import cluster_facts, lease_facts, node_facts, pod_facts

NODE_LEASE_NAMESPACE = "kube-node-lease"


@dataclass(frozen=True)
class Snapshot:
    """Facts for the engine plus the raw node the writes are computed from (same version)."""

    facts: Facts
    node: Json | None
    nodes: tuple[Json, ...]


class FactsReader:
    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube
        self.server_version = ""

    async def server_version_string(self, deadline: Deadline | None = None) -> str:
        if not self.server_version:
            info = await self.kube.version(deadline)
            self.server_version = str(info.get("gitVersion", ""))
        return self.server_version

    async def cluster(self, deadline: Deadline | None = None) -> tuple[ClusterFacts, list[Json]]:
        nodes = await self.kube.list_nodes(deadline)
        return cluster_facts(nodes, self.server_version), nodes

    async def read(self, node_name: str, deadline: Deadline | None = None) -> Snapshot:
        """One list of nodes serves both the node and the cluster counts; the Lease and pods
        follow. Pods are listed by ``spec.nodeName`` so only this node's pods are ever seen."""
        cluster, nodes = await self.cluster(deadline)
        raw = next((n for n in nodes if n["metadata"]["name"] == node_name), None)
        if raw is None:
            return Snapshot(Facts(None, None, (), cluster), None, tuple(nodes))
        lease: LeaseFacts | None
        try:
            lease = lease_facts(
                await self.kube.get_lease(NODE_LEASE_NAMESPACE, node_name, deadline)
            )
        except KubeError as exc:
            if exc.status != 404:
                raise
            lease = None
        pods = await self.kube.list_pods_on_node(node_name, deadline)
        facts = Facts(
            node=node_facts(raw),
            lease=lease,
            pods=tuple(
                pod_facts(p) for p in pods if p.get("spec", {}).get("nodeName") == node_name
            ),
            cluster=cluster,
        )
        return Snapshot(facts, raw, tuple(nodes))
