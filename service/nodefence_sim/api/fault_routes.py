"""``/sim/v1/faults`` and ``/sim/v1/requests``: fault injection and the request log over HTTP,
for tests that drive a simulator running in another process."""

from __future__ import annotations

from aiohttp import web

from nodefence_sim.faults import Faults


def add_fault_routes(app: web.Application, faults: Faults) -> None:
    async def add(request: web.Request) -> web.Response:
        try:
            body = await request.json() if request.can_read_body else {}
        except ValueError as exc:
            return web.json_response({"error": str(exc)}, status=400)
        if not isinstance(body, dict):
            return web.json_response({"error": "the body must be a JSON object"}, status=400)
        try:
            rules = faults.configure(body)
        except (ValueError, TypeError, KeyError) as exc:
            return web.json_response({"error": str(exc)}, status=400)
        return web.json_response({"added": [r.to_json() for r in rules]}, status=201)

    async def show(_request: web.Request) -> web.Response:
        return web.json_response(
            {"latencySeconds": faults.latency, "rules": [r.to_json() for r in faults.rules]}
        )

    async def clear(_request: web.Request) -> web.Response:
        faults.clear()
        return web.json_response({"rules": []})

    async def requests(request: web.Request) -> web.Response:
        try:
            since = int(request.query.get("since", "0"))
        except ValueError:
            return web.json_response({"error": "since must be an integer"}, status=400)
        records = faults.requests(since)
        return web.json_response(
            {"requests": [r.to_json() for r in records], "cursor": faults.cursor}
        )

    app.router.add_post("/sim/v1/faults", add)
    app.router.add_get("/sim/v1/faults", show)
    app.router.add_delete("/sim/v1/faults", clear)
    app.router.add_get("/sim/v1/requests", requests)
