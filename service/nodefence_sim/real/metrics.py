"""``GET /metrics`` on the real backend: the kube-state-metrics series the simulator serves
(``nodefence_sim.ksm``), rendered from the real API server's own Node and Pod lists, as
kube-state-metrics renders them from its watches. A Prometheus scraping either backend then
evaluates the shipped alert rules on the same series, and on the real backend those follow what
the real node-lifecycle controller wrote (Ready Unknown, the unreachable taint).
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from nodefence_sim.control import problem
from nodefence_sim.errors import ApiError
from nodefence_sim.ksm import CONTENT_TYPE, render_objects
from nodefence_sim.real.rest import Rest


def _lists(rest: Rest) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    nodes = rest.get("/api/v1/nodes").get("items") or []
    pods = rest.get("/api/v1/pods").get("items") or []
    return nodes, pods


def add_metrics_route(app: web.Application, rest: Rest) -> None:
    async def metrics(_request: web.Request) -> web.StreamResponse:
        try:
            # The client is synchronous; the lists must not stall the BMCs served beside them.
            nodes, pods = await asyncio.to_thread(_lists, rest)
        except (ApiError, OSError) as exc:
            # A failed scrape, as kube-state-metrics' would be: Prometheus marks the target down.
            return problem(503, f"the API server did not answer the lists: {exc}")
        return web.Response(
            body=render_objects(nodes, pods).encode(), headers={"Content-Type": CONTENT_TYPE}
        )

    app.router.add_get("/metrics", metrics)
