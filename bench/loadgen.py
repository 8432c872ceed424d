"""A bounded load generator for ``/alerts``, run as its own process so that it does not share
the receiver's core:
``python -m bench.loadgen URL TOKEN PAYLOAD_JSON COUNT CONCURRENCY SECONDS``.
A payload of ``-`` sends GETs instead. Prints one JSON object: seconds, statuses and
latencies in milliseconds."""

from __future__ import annotations

import asyncio
import json
import sys
import time

import aiohttp


async def main(  # noqa: PLR0917 - the command line's positional arguments, in order
    url: str, token: str, payload: str, count: int, concurrency: int, limit: float
) -> None:
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    body = payload.encode()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    remaining = count
    deadline = time.perf_counter() + limit
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            nonlocal remaining
            while remaining > 0 and time.perf_counter() < deadline:
                remaining -= 1
                began = time.perf_counter()
                request = (
                    session.get(url)
                    if payload == "-"
                    else session.post(url, data=body, headers=headers)
                )
                async with request as response:
                    await response.read()
                    statuses[response.status] = statuses.get(response.status, 0) + 1
                latencies.append((time.perf_counter() - began) * 1000)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    print(json.dumps({"seconds": elapsed, "statuses": statuses, "latencies_ms": latencies}))


if __name__ == "__main__":
    url, token, payload, count, concurrency, limit = sys.argv[1:7]
    asyncio.run(main(url, token, payload, int(count), int(concurrency), float(limit)))
