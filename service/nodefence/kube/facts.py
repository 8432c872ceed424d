"""Read the live facts for one decision: the node, its Lease, its pods, cluster counts."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from nodefence.engine.model import PREFIX, ClusterFacts, Facts, LeaseFacts
from nodefence.kube.client import Deadline, Json, KubeClient, KubeError
from nodefence.kube.convert import cluster_facts, lease_facts, node_facts, pod_facts

NODE_LEASE_NAMESPACE = "kube-node-lease"
CONTROL_CONFIGMAP = "nodefence-control"
PAUSED = PREFIX + "paused"
PAUSED_REASON = PREFIX + "paused-reason"
# The pause switch is read at most this often: operators flip it by hand, and every replica
# seeing it within seconds is enough, while a read per alert would add to the cost of every
# alert. A serving receiver refreshes it in the background (``PAUSE_REFRESH_SECONDS``) so the
# request path finds it fresh.
PAUSE_CACHE_SECONDS = 10.0
PAUSE_REFRESH_SECONDS = 4.0


@dataclass(frozen=True)
class Snapshot:
    """Facts for the engine plus the raw node the writes are computed from (same version)."""

    facts: Facts
    node: Json | None
    lease_read: bool = True


class FactsReader:
    def __init__(self, kube: KubeClient, namespace: str = "nodefence") -> None:
        self.kube = kube
        self.namespace = namespace
        self.server_version = ""
        self._pause: tuple[float, str | None] | None = None

    async def server_version_string(self, deadline: Deadline | None = None) -> str:
        if not self.server_version:
            info = await self.kube.version(deadline)
            self.server_version = str(info.get("gitVersion", ""))
        return self.server_version

    async def paused_reason(self, deadline: Deadline | None = None) -> str | None:
        """The cluster-wide pause: annotation ``nodefence.io/paused: "true"`` on the ConfigMap
        ``nodefence-control`` in nodefence's namespace (absent ConfigMap: not paused)."""
        now = time.monotonic()
        if self._pause is not None and now - self._pause[0] < PAUSE_CACHE_SECONDS:
            return self._pause[1]
        return await self.refresh_pause(deadline)

    async def refresh_pause(self, deadline: Deadline | None = None) -> str | None:
        now = time.monotonic()
        try:
            configmap = await self.kube.get_configmap(self.namespace, CONTROL_CONFIGMAP, deadline)
        except KubeError as exc:
            if exc.status != 404:
                raise
            configmap = {}
        notes = configmap.get("metadata", {}).get("annotations") or {}
        reason: str | None = None
        if str(notes.get(PAUSED, "")).strip().lower() == "true":
            why = str(notes.get(PAUSED_REASON, "")).strip()
            where = f"ConfigMap {self.namespace}/{CONTROL_CONFIGMAP} has {PAUSED}=true"
            reason = f"{where} ({why})" if why else where
        self._pause = (now, reason)
        return reason

    async def cluster(self, deadline: Deadline | None = None) -> tuple[ClusterFacts, list[Json]]:
        nodes = await self.kube.list_nodes(deadline)
        paused = await self.paused_reason(deadline)
        return cluster_facts(nodes, self.server_version, paused), nodes

    async def read(
        self, node_name: str, deadline: Deadline | None = None, *, with_lease: bool = True
    ) -> Snapshot:
        """One list of nodes serves both the node and the cluster counts; the pods are listed by
        ``spec.nodeName`` so only this node's pods are ever seen. The Lease may be left out when
        the caller can decide without it (a missing Lease only ever blocks a fence)."""
        cluster, nodes = await self.cluster(deadline)
        raw = next((n for n in nodes if n["metadata"]["name"] == node_name), None)
        if raw is None:
            return Snapshot(Facts(None, None, (), cluster), None)
        pods = await self.kube.list_pods_on_node(node_name, deadline)
        facts = Facts(
            node=node_facts(raw),
            lease=None,
            pods=tuple(
                pod_facts(p) for p in pods if p.get("spec", {}).get("nodeName") == node_name
            ),
            cluster=cluster,
        )
        snapshot = Snapshot(facts, raw, lease_read=False)
        return await self.with_lease(snapshot, deadline) if with_lease else snapshot

    async def with_lease(self, snapshot: Snapshot, deadline: Deadline | None = None) -> Snapshot:
        if snapshot.lease_read or snapshot.facts.node is None:
            return snapshot
        lease: LeaseFacts | None
        try:
            raw = await self.kube.get_lease(
                NODE_LEASE_NAMESPACE, snapshot.facts.node.name, deadline
            )
            lease = lease_facts(raw)
        except KubeError as exc:
            if exc.status != 404:
                raise
            lease = None
        facts = dataclasses.replace(snapshot.facts, lease=lease)
        return dataclasses.replace(snapshot, facts=facts, lease_read=True)
