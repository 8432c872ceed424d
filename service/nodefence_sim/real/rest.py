"""A small synchronous JSON client for the real kube-apiserver (TLS with the run's CA, a bearer
token). Synchronous because the control surface and the Redfish BMCs share the simulator's
synchronous cluster interface, and a loopback request takes milliseconds.

An error answer becomes the simulator's ``ApiError`` with the API server's own code, reason and
message, so callers handle both backends' errors alike (an unknown node is a 404 on either).
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from nodefence_sim.errors import ApiError

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
TIMEOUT = 30.0


class Rest:
    def __init__(self, server: str, ca_cert: Path, token: str) -> None:
        self.server = server
        self._token = token
        self._tls = ssl.create_default_context(cafile=str(ca_cert))

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = JSON,
        accept: str = JSON,
        timeout: float = TIMEOUT,
    ) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.server + path, data=data, method=method)  # noqa: S310 - https only
        request.add_header("Authorization", f"Bearer {self._token}")
        request.add_header("Accept", accept)
        if data is not None:
            request.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=self._tls) as response:  # noqa: S310
                raw = response.read()
        except urllib.error.HTTPError as exc:
            raise _api_error(exc.code, exc.read()) from exc
        parsed: dict[str, Any] = json.loads(raw) if raw else {}
        return parsed

    def get(self, path: str) -> dict[str, Any]:
        return self.request("GET", path)

    def post(self, path: str, body: Any) -> dict[str, Any]:
        return self.request("POST", path, body)

    def merge_patch(self, path: str, body: Any) -> dict[str, Any]:
        return self.request("PATCH", path, body, content_type=MERGE_PATCH)

    def delete(self, path: str) -> dict[str, Any]:
        return self.request("DELETE", path)


def _api_error(code: int, raw: bytes) -> ApiError:
    try:
        status = json.loads(raw)
    except ValueError:
        status = None
    if not isinstance(status, dict):
        return ApiError(code, "Unknown", raw.decode(errors="replace")[:500])
    details = status.get("details") or {}
    return ApiError(
        code,
        str(status.get("reason") or "Unknown"),
        str(status.get("message") or ""),
        kind=str(details.get("kind") or ""),
        name=str(details.get("name") or ""),
        group=str(details.get("group") or ""),
    )
