"""Read the live facts for one decision: the node, its Lease, its pods, cluster counts."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import UTC, datetime

from nodefence.engine import record as fence_record
from nodefence.engine.model import API_SERVER_CLOCK, PREFIX, ClusterFacts, Facts, LeaseFacts
from nodefence.kube.client import Dated, Deadline, Json, KubeClient, KubeError
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
# The cluster-wide counts (storm, ready fraction, quorum) are shared by the requests of a few
# seconds. They steer only guards whose inputs move on that scale anyway; the budget is counted
# from the fence record read fresh each time, and every write carries its own precondition.
CLUSTER_CACHE_SECONDS = 5.0
NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
MAX_NODE_NAME = 253
LOCAL_CLOCK = "nodefence's own clock (no Date header from the API server)"


@dataclass(frozen=True)
class Snapshot:
    """Facts for the engine plus the raw objects the writes are computed from (same versions)."""

    facts: Facts
    node: Json | None
    record_data: dict[str, str] = dataclasses.field(default_factory=dict)
    server_time: datetime | None = None

    @property
    def now(self) -> datetime:
        """The API server's clock at the read, or the local one when no reply carried a Date
        (the facts then say so, and no liveness guard passes on it)."""
        return self.server_time or datetime.now(UTC)


class FactsReader:
    def __init__(self, kube: KubeClient, namespace: str = "nodefence") -> None:
        self.kube = kube
        self.namespace = namespace
        self.server_version = ""
        self._pause: tuple[float, str | None] | None = None
        self._cluster: tuple[float, asyncio.Future[ClusterFacts]] | None = None

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

    async def cluster(self, deadline: Deadline | None = None) -> ClusterFacts:
        """One paginated list of nodes, shared by concurrent requests for
        ``CLUSTER_CACHE_SECONDS``."""
        now = time.monotonic()
        if self._cluster is not None and now - self._cluster[0] < CLUSTER_CACHE_SECONDS:
            return await self._cluster[1]
        task = asyncio.ensure_future(self._read_cluster(deadline))
        self._cluster = (now, task)
        try:
            return await task
        except BaseException:
            self._cluster = None
            raise

    async def _read_cluster(self, deadline: Deadline | None) -> ClusterFacts:
        nodes = await self.kube.list_nodes(deadline)
        paused = await self.paused_reason(deadline)
        return cluster_facts(nodes, self.server_version, paused)

    async def record(self, deadline: Deadline | None = None) -> Dated:
        """The fence record's ConfigMap; an absent one is an empty record (nothing fenced)."""
        try:
            return await self.kube.get_configmap_dated(
                self.namespace, fence_record.CONFIGMAP, deadline
            )
        except KubeError as exc:
            if exc.status != 404:
                raise
            return Dated({}, None)

    async def read(self, node_name: str, deadline: Deadline | None = None) -> Snapshot:
        """The node, its Lease, its pods (by ``spec.nodeName``, so only this node's are ever
        seen), the fence record and the cluster counts, read concurrently. ``now`` is the
        latest ``Date`` among the replies: the API server's clock, not this process's."""
        if not NODE_NAME.fullmatch(node_name) or len(node_name) > MAX_NODE_NAME:
            # No node can have this name (a Node's name is a DNS subdomain), so there is none
            # to read, and a name that could not even be put in a URL never is.
            cluster = await self.cluster(deadline)
            return Snapshot(Facts(None, None, (), cluster, clock=LOCAL_CLOCK), None)
        node, lease, pods, record, cluster = await asyncio.gather(
            self._optional(self.kube.get_node(node_name, deadline)),
            self._optional(self.kube.get_lease(NODE_LEASE_NAMESPACE, node_name, deadline)),
            self.kube.list_pods_on_node(node_name, deadline),
            self.record(deadline),
            self.cluster(deadline),
        )
        dates = [d.server_time for d in (node, lease, record) if d.server_time is not None]
        server_time = max(dates) if dates else None
        meta = record.body.get("metadata") or {}
        data = {str(k): str(v) for k, v in (record.body.get("data") or {}).items()}
        the_record = fence_record.decode(data, str(meta.get("resourceVersion") or ""))
        raw = node.body or None
        lease_of: LeaseFacts | None = lease_facts(lease.body) if lease.body else None
        facts = Facts(
            node=node_facts(raw) if raw is not None else None,
            lease=lease_of if raw is not None else None,
            pods=tuple(pod_facts(p) for p in pods if p.get("spec", {}).get("nodeName") == node_name)
            if raw is not None
            else (),
            cluster=cluster,
            record=the_record,
            clock=API_SERVER_CLOCK if server_time is not None else LOCAL_CLOCK,
        )
        return Snapshot(facts, raw, data, server_time)

    @staticmethod
    async def _optional(call: Awaitable[Dated]) -> Dated:
        """A 404 is an answer (no such object), not an error."""
        try:
            return await call
        except KubeError as exc:
            if exc.status != 404:
                raise
            return Dated({}, None)
