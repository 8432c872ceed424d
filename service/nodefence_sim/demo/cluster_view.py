"""What an operator would look at with kubectl, read over the simulator's Kubernetes API."""

from __future__ import annotations

from typing import Any

import aiohttp

Json = dict[str, Any]


def pod_status(pod: Json) -> str:
    """The STATUS column kubectl prints, for the cases the story has."""
    if pod["metadata"].get("deletionTimestamp"):
        return "Terminating"
    status = pod.get("status", {})
    init_total = len(pod.get("spec", {}).get("initContainers") or [])
    init_done = sum(
        1
        for s in status.get("initContainerStatuses") or []
        if (s.get("state") or {}).get("terminated", {}).get("exitCode") == 0
    )
    if init_total and init_done < init_total and status.get("phase") == "Pending":
        return f"Init:{init_done}/{init_total}"
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason"):
            return str(waiting["reason"])
    return str(status.get("phase") or "Pending")


def owner_kind(pod: Json) -> str:
    refs = pod["metadata"].get("ownerReferences") or []
    return str(refs[0]["kind"]) if refs else ""


class ClusterView:
    def __init__(self, session: aiohttp.ClientSession, url: str) -> None:
        self.session = session
        self.url = url.rstrip("/")

    async def _get(self, path: str, **params: str) -> Json:
        async with self.session.get(self.url + path, params=params) as response:
            response.raise_for_status()
            body: Json = await response.json()
            return body

    async def node(self, name: str) -> Json:
        return await self._get(f"/api/v1/nodes/{name}")

    async def nodes(self) -> list[Json]:
        return list((await self._get("/api/v1/nodes"))["items"])

    async def pods(self, *, node: str | None = None) -> list[Json]:
        params = {"fieldSelector": f"spec.nodeName={node}"} if node else {}
        return list((await self._get("/api/v1/pods", **params))["items"])

    async def pod(self, namespace: str, name: str) -> Json | None:
        async with self.session.get(
            f"{self.url}/api/v1/namespaces/{namespace}/pods/{name}"
        ) as response:
            if response.status == 404:
                return None
            response.raise_for_status()
            body: Json = await response.json()
            return body

    async def node_events(self, name: str) -> list[Json]:
        selector = f"involvedObject.kind=Node,involvedObject.name={name}"
        return list((await self._get("/api/v1/events", fieldSelector=selector))["items"])

    async def control(self, node: str, verb: str, body: Json) -> Json:
        async with self.session.post(f"{self.url}/sim/v1/nodes/{node}/{verb}", json=body) as r:
            r.raise_for_status()
            result: Json = await r.json()
            return result


def ready_status(node: Json) -> str:
    for cond in node.get("status", {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return str(cond.get("status"))
    return "Unknown"


def taints(node: Json) -> list[str]:
    return [
        f"{t['key']}={t.get('value', '')}:{t['effect']}"
        for t in node.get("spec", {}).get("taints") or []
    ]
