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
from nodefence.engine.model import (
    API_SERVER_CLOCK,
    CONTROL_PLANE_LABELS,
    ClusterFacts,
    Facts,
    LeaseFacts,
    PodFacts,
)
from nodefence.kube import pause_watch
from nodefence.kube.cached_facts import NodeFactsCache
from nodefence.kube.client import Dated, Deadline, Json, KubeClient, KubeError
from nodefence.kube.convert import (
    is_ready,
    lease_facts,
    node_facts,
    pod_facts,
    volume_attachment_facts,
)
from nodefence.kube.node_index import NodeIndex, count, list_summaries, summarize
from nodefence.kube.pause_watch import NOT_PAUSED, PauseState, PauseWatch, pause_state

NODE_LEASE_NAMESPACE = "kube-node-lease"
# The pause switch, followed by ``PauseWatch`` in a serving receiver.
CONTROL_CONFIGMAP = pause_watch.CONTROL_CONFIGMAP
PAUSED = pause_watch.PAUSED
PAUSED_REASON = pause_watch.PAUSED_REASON
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
    # The fence record's ConfigMap metadata as read (its labels and annotations are kept by a
    # write made on this snapshot).
    record_meta: Json = dataclasses.field(default_factory=dict)

    @property
    def now(self) -> datetime:
        """The API server's clock at the read, or the local one when no reply carried a Date
        (the facts then say so, and no liveness guard passes on it)."""
        return self.server_time or datetime.now(UTC)


class FactsReader:
    """Live facts for the engine. A serving receiver's reader is given the node index and the
    pause watch (built and run by ``runtime``), and takes what it can from them while they are
    fresh; a one-shot command's reader has neither and lists."""

    def __init__(
        self,
        kube: KubeClient,
        namespace: str = "nodefence",
        *,
        nodes: NodeIndex | None = None,
        pause_watch: PauseWatch | None = None,
        node_facts: NodeFactsCache | None = None,
        own_node: str | None = None,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        # The node this replica runs on (``NODEFENCE_NODE_NAME``), a fact of every decision.
        self.own_node = own_node
        self.server_version = ""
        self._pause: tuple[float, str | None] | None = None
        self._cluster: tuple[float, asyncio.Future[ClusterFacts]] | None = None
        self.nodes = nodes
        # Each Node as the index last saw it, for refusals from the cache (``kube.cached_facts``).
        self.node_facts = node_facts if node_facts is not None else NodeFactsCache()
        # The pause switch as last read, with when it began
        # (``nodefence_paused_timestamp_seconds``).
        self.pause: PauseState = NOT_PAUSED
        self.pause_watch = pause_watch

    async def server_version_string(self, deadline: Deadline | None = None) -> str:
        if not self.server_version:
            info = await self.kube.version(deadline)
            self.server_version = str(info.get("gitVersion", ""))
        return self.server_version

    async def paused_reason(self, deadline: Deadline | None = None) -> str | None:
        """The cluster-wide pause: annotation ``nodefence.io/paused: "true"`` on the ConfigMap
        ``nodefence-control`` in nodefence's namespace (absent ConfigMap: not paused)."""
        now = time.monotonic()
        watching = self.pause_watch is not None and self.pause_watch.fresh() is not None
        if not watching and self._pause is not None and now - self._pause[0] < PAUSE_CACHE_SECONDS:
            return self._pause[1]
        return await self.refresh_pause(deadline)

    async def refresh_pause(self, deadline: Deadline | None = None) -> str | None:
        """From the pause watch while it is fresh (a serving receiver: no request at all),
        otherwise by reading the ConfigMap."""
        now = time.monotonic()
        watched = self.pause_watch.fresh() if self.pause_watch is not None else None
        if watched is not None:
            state = watched
        else:
            try:
                configmap = await self.kube.get_configmap(
                    self.namespace, CONTROL_CONFIGMAP, deadline
                )
            except KubeError as exc:
                if exc.status != 404:
                    raise
                configmap = {}
            state = pause_state(configmap, self.namespace)
        self.pause = state
        self._pause = (now, state.reason)
        return state.reason

    async def cluster(self, deadline: Deadline | None = None) -> ClusterFacts:
        """The cluster counts: from the watch-fed ``NodeIndex`` while it heard from the API
        server within ``node_index.MAX_AGE_SECONDS`` (30 s), otherwise (index not synced, watch
        broken, one-shot command) from one paginated list of nodes, summarised a page at a
        time and shared by concurrent requests for ``CLUSTER_CACHE_SECONDS``. Stale counts are
        never served silently: past the bound the index is not used at all.

        Why each guard is still safe on counts up to 30 s old:
        - budget (max fenced nodes): counted from the fence record, read fresh for each
          decision and changed only with its resourceVersion, which alone keeps two replicas
          from spending the last slot; the out-of-service taints outside the record (an
          admin's, a record that lost entries) are added from these counts, as fresh as the
          index's watch (or the shared list), so a taint written in the last moments before a
          node's own minutes-long outage is judged may be counted on the next pass only;
        - S1, S2 and every other guard about the node itself: read fresh, by name, for every
          decision that acts (a refusal may rest on the node as this index saw it, and then
          says so: ``shell.cached_refusal``);
        - storm (NotReady fraction) and ready fraction: the alerted node's own NotReady time
          is read fresh and must exceed the policy's minimum (5 minutes by default); if its
          outage is part of a storm, the other nodes of that storm have been NotReady about as
          long, far longer than 30 s, so the index counts them; a storm that began within the
          last 30 s did not cause this node's outage, and counts from a live list would not
          show it either before the node monitor's 40 s grace;
        - storm cooldown: it keys on when nodes came back Ready (the Ready lastTransitionTime,
          corrected by each kubelet's clock offset, a node's first Ready after joining left out:
          ``convert.recovered_since``), which the index keeps; a recovery of the last 30 s
          not seen yet leaves that node counted NotReady, which weighs against fencing in the
          storm guard: stale in the safe direction;
        - control-plane quorum: not from the index; for an alert about a control-plane node
          ``read`` lists the control-plane nodes live by label (a handful of objects).
        """
        indexed = self.nodes.fresh() if self.nodes is not None else None
        if indexed is not None:
            paused = await self.paused_reason(deadline)
            return dataclasses.replace(
                indexed.facts, server_version=self.server_version, paused_reason=paused
            )
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

    async def not_ready_nodes(self, deadline: Deadline | None = None) -> dict[str, datetime | None]:
        """Each node that is not Ready and when it stopped being Ready: from the watch-fed
        index while it is fresh (no request at all), otherwise from one paginated list."""
        indexed = self.nodes.not_ready() if self.nodes is not None else None
        if indexed is not None:
            return indexed
        nodes, _version = await list_summaries(self.kube, deadline)
        return {name: n.not_ready_since for name, n in nodes.items() if not n.ready}

    async def _read_cluster(self, deadline: Deadline | None) -> ClusterFacts:
        nodes, _version = await list_summaries(self.kube, deadline)
        paused = await self.paused_reason(deadline)
        counted = count(nodes.values())
        return dataclasses.replace(
            counted, server_version=self.server_version, paused_reason=paused
        )

    async def read_fence_record(self, deadline: Deadline) -> fence_record.FenceRecord:
        """The fence record, parsed."""
        return fence_record.from_configmap((await self.record(deadline)).body)[0]

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
            facts = Facts(None, None, (), cluster, clock=LOCAL_CLOCK, own_node=self.own_node)
            return Snapshot(facts, None)
        node, lease, pods, record, cluster = await asyncio.gather(
            self._optional(self.kube.get_node(node_name, deadline)),
            self._optional(self.kube.get_lease(NODE_LEASE_NAMESPACE, node_name, deadline)),
            self.kube.list_pods_on_node(node_name, deadline),
            self.record(deadline),
            self.cluster(deadline),
        )
        dates = [d.server_time for d in (node, lease, record) if d.server_time is not None]
        server_time = max(dates) if dates else None
        the_record, data = fence_record.from_configmap(record.body)
        raw = node.body or None
        if raw is not None and self.nodes is not None and node_facts(raw).is_control_plane:
            cluster = await self._control_plane_live(cluster, deadline)
        lease_of: LeaseFacts | None = lease_facts(lease.body) if lease.body else None
        attachments = None
        if raw is not None and is_ready(raw) and the_record.entry(node_name) is not None:
            # An unfence is in view: the gate on VolumeAttachments from before the fence.
            listed = await self.kube.list_volume_attachments(deadline)
            attachments = tuple(
                a for a in map(volume_attachment_facts, listed) if a.node_name == node_name
            )
        facts = Facts(
            node=node_facts(raw) if raw is not None else None,
            lease=lease_of if raw is not None else None,
            pods=tuple(pod_facts(p) for p in pods if p.get("spec", {}).get("nodeName") == node_name)
            if raw is not None
            else (),
            cluster=cluster,
            record=the_record,
            clock=API_SERVER_CLOCK if server_time is not None else LOCAL_CLOCK,
            own_node=self.own_node,
            attachments=attachments,
        )
        return Snapshot(facts, raw, data, server_time, record.body.get("metadata") or {})

    async def pods_in(
        self, namespaces: tuple[str, ...], deadline: Deadline | None = None
    ) -> tuple[PodFacts, ...]:
        """Every pod of these namespaces (the ones a fenced node held pods in, at most
        ``held_pods.MAX_HELD_PODS``), for the recovery measurement: where their replacements
        run now."""
        lists = await asyncio.gather(*(self.kube.list_pods_in(ns, deadline) for ns in namespaces))
        return tuple(pod_facts(p) for pods in lists for p in pods)

    async def _control_plane_live(
        self, cluster: ClusterFacts, deadline: Deadline | None
    ) -> ClusterFacts:
        """The control-plane counts from a live read, for the quorum guard: a peer that went
        NotReady a moment ago must block fencing another control-plane node."""
        lists = await asyncio.gather(
            *(
                self.kube.list_nodes(deadline, label_selector=label)
                for label in CONTROL_PLANE_LABELS
            )
        )
        peers = {str(n["metadata"]["name"]): summarize(n) for nodes in lists for n in nodes}
        return dataclasses.replace(
            cluster,
            control_plane_total=len(peers),
            control_plane_ready=sum(1 for p in peers.values() if p.ready),
        )

    @staticmethod
    async def _optional(call: Awaitable[Dated]) -> Dated:
        """A 404 is an answer (no such object), not an error."""
        try:
            return await call
        except KubeError as exc:
            if exc.status != 404:
                raise
            return Dated({}, None)
