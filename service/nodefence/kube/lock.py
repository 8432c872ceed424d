"""A cluster-wide lock on the decide-and-fence step, held in a coordination.k8s.io Lease.

Replicas are stateless and any of them may receive an alert for any node, so the fence budget
(at most N nodes fenced) can only hold if the re-read of cluster facts, the decision and the taint
write happen one replica at a time. The Lease has an expiry, so a replica that crashes while
holding it blocks the others for at most ``ttl_seconds``.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

from nodefence.errors import ClusterUnavailableError
from nodefence.kube.client import Deadline, Json, KubeClient, KubeError
from nodefence.kube.convert import parse_time

LOCK_NAME = "nodefence-fence-lock"


def _micro(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class FenceLock:
    def __init__(
        self,
        kube: KubeClient,
        namespace: str,
        identity: str,
        *,
        ttl_seconds: int = 15,
        name: str = LOCK_NAME,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.identity = identity
        self.ttl_seconds = ttl_seconds
        self.name = name
        # Requests inside one replica take turns too: the Lease carries only the replica's
        # identity, so on its own it would let two of this replica's requests in at once.
        self._local = asyncio.Lock()

    def _spec(self, now: datetime, transitions: int) -> Json:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.ttl_seconds,
            "acquireTime": _micro(now),
            "renewTime": _micro(now),
            "leaseTransitions": transitions,
        }

    def _free(self, lease: Json, now: datetime) -> bool:
        spec = lease.get("spec", {})
        holder = spec.get("holderIdentity") or ""
        if not holder or holder == self.identity:
            return True
        renewed = parse_time(spec.get("renewTime"))
        duration = int(spec.get("leaseDurationSeconds") or self.ttl_seconds)
        return renewed is None or renewed + timedelta(seconds=duration) < now

    async def _try_acquire(self, deadline: Deadline) -> Json | None:
        now = datetime.now(UTC)
        try:
            lease = await self.kube.get_lease(self.namespace, self.name, deadline)
        except KubeError as exc:
            if exc.status != 404:
                raise
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(now, 0),
            }
            try:
                return await self.kube.create_lease(self.namespace, body, deadline)
            except KubeError as create_error:
                if create_error.status == 409:
                    return None
                raise
        if not self._free(lease, now):
            return None
        transitions = int(lease.get("spec", {}).get("leaseTransitions") or 0) + 1
        lease["spec"] = self._spec(now, transitions)
        try:
            return await self.kube.replace_lease(self.namespace, self.name, lease, deadline)
        except KubeError as exc:
            if exc.status == 409:
                return None
            raise

    async def _release(self, lease: Json, deadline: Deadline) -> None:
        lease["spec"]["holderIdentity"] = ""
        lease["spec"]["renewTime"] = _micro(datetime.now(UTC))
        try:
            await self.kube.replace_lease(self.namespace, self.name, lease, deadline)
        except (KubeError, ClusterUnavailableError):
            # Someone took it over after our expiry, or the API is down: the expiry frees it.
            return

    @asynccontextmanager
    async def held(self, deadline: Deadline) -> AsyncIterator[None]:
        """Wait for the lock until the deadline; ClusterUnavailableError if it never frees."""
        try:
            async with asyncio.timeout(deadline.remaining):
                await self._local.acquire()
        except TimeoutError:
            raise ClusterUnavailableError(
                "another request of this replica kept the fence lock until the deadline"
            ) from None
        try:
            async with self._held_in_cluster(deadline):
                yield
        finally:
            self._local.release()

    @asynccontextmanager
    async def _held_in_cluster(self, deadline: Deadline) -> AsyncIterator[None]:
        delay = 0.02
        while True:
            lease = await self._try_acquire(deadline)
            if lease is not None:
                break
            if deadline.remaining <= delay:
                raise ClusterUnavailableError(
                    f"fence lock {self.namespace}/{self.name} stayed held by another replica"
                )
            await asyncio.sleep(delay * (0.5 + random.random()))  # noqa: S311 - jitter
            delay = min(0.5, delay * 2)
        try:
            yield
        finally:
            await self._release(lease, Deadline(max(1.0, deadline.remaining)))
