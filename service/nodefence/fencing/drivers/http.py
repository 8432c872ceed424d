"""Driver ``http``: asking a power-status service (a BMC gateway or cloud API proxy) whether a
machine is off, before deciding.

Only a clear "off" within the timeout counts as proof; anything else (an error, a timeout, an
answer that is not understood) is reported as "unknown" and the fence guard refuses.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING
from urllib.parse import quote

import aiohttp

from nodefence.engine.evidence import PowerEvidence

if TYPE_CHECKING:
    from nodefence.fencing.model import ProofPlace
    from nodefence.kube.client import Deadline
    from nodefence.policy import Fencing

MAX_ANSWER_BYTES = 4096


def _state_of(body: bytes) -> str:
    text = body.decode("utf-8", errors="replace").strip()
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = text
    if isinstance(parsed, dict):
        parsed = parsed.get("state", parsed.get("power", ""))
    value = str(parsed).strip().lower()
    return value if value in ("off", "on") else "unknown"


async def probe_power(url_template: str, node: str, timeout_seconds: float) -> PowerEvidence:
    url = url_template.replace("{node}", quote(node, safe=""))
    source = f"power-status endpoint {url_template}"
    try:
        timeout = aiohttp.ClientTimeout(total=timeout_seconds)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(url, headers={"Accept": "application/json, text/plain"}) as response,
        ):
            body = await response.content.read(MAX_ANSWER_BYTES)
            if response.status != 200:
                return PowerEvidence("unknown", source, f"HTTP {response.status}")
            state = _state_of(body)
            detail = "" if state != "unknown" else "answer not understood"
            return PowerEvidence(state, source, detail)
    except TimeoutError:
        return PowerEvidence("unknown", source, f"no answer within {timeout_seconds:g}s")
    except aiohttp.ClientError as exc:
        return PowerEvidence("unknown", source, type(exc).__name__)


async def read_proof(
    place: ProofPlace,
    fencing: Fencing,
    node: str,
    deadline: Deadline,
) -> PowerEvidence:
    """The endpoint's answer: the rule's own, bounded by its ``timeout_seconds`` (the cluster
    and the request's deadline are not the endpoint's)."""
    return await probe_power(fencing.url, node, fencing.timeout_seconds)
