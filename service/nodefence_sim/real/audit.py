"""The simulator's request log (``GET /sim/v1/requests``) read from the kube-apiserver's own
audit log, so a test that counts a client's requests on the simulator counts them here alike.

The simulator logs only requests from clients over HTTP, never its own controllers; the audit
policy does the same here: level ``None`` for the control plane's components (the controller
manager, the scheduler, the kwok kubelets, the control surface's own writes, the API server's
loopback client), ``Metadata`` for everyone else. ``RequestReceived`` is omitted, so each request
leaves a ``ResponseComplete`` (a watch also a ``ResponseStarted`` first); one record per
``auditID``, numbered in the order the API server wrote them.

The API server writes an event after its reply has gone out, so a log read right after a
request may miss it. :meth:`AuditLog.requests` first sends a barrier (``GET /version`` as a user
of its own) and waits until the barrier's ``Audit-Id`` is in the log; the barrier's own records
are left out of the answer.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from nodefence_sim.faults import RequestRecord

# The audit verb's HTTP method; ``watch`` and ``list`` are both GETs, as in the simulator.
METHODS = {
    "get": "GET",
    "list": "GET",
    "watch": "GET",
    "create": "POST",
    "update": "PUT",
    "patch": "PATCH",
    "delete": "DELETE",
    "deletecollection": "DELETE",
}
BARRIER_TIMEOUT = 30.0
# As many records as the simulator keeps; the oldest go first.
LOG_LIMIT = 100_000


def audit_policy(quiet_users: list[str], quiet_groups: list[str]) -> dict[str, Any]:
    """The policy: nothing for the components, request metadata for every other client."""
    return {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [
            {"level": "None", "users": quiet_users},
            {"level": "None", "userGroups": quiet_groups},
            {"level": "Metadata"},
        ],
    }


def write_audit_policy(path: Path, quiet_users: list[str], quiet_groups: list[str]) -> Path:
    path.write_text(yaml.safe_dump(audit_policy(quiet_users, quiet_groups), sort_keys=False))
    return path


@dataclass
class AuditRecord(RequestRecord):
    """The simulator's request record, read from an audit event, plus what the real log knows:
    the event's ID and who made the request."""

    audit_id: str = ""
    user: str = ""
    user_agent: str = ""

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "user": self.user, "userAgent": self.user_agent}


def _epoch(stamp: str | None) -> float:
    if not stamp:
        return 0.0
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


class AuditLog:
    """Reads ``log_path`` incrementally; ``barrier_user`` is the user whose token sends the
    barrier and whose requests are never reported."""

    def __init__(
        self, log_path: Path, server: str, ca_cert: Path, barrier_user: str, barrier_token: str
    ) -> None:
        self._path = log_path
        self._server = server
        self._tls = ssl.create_default_context(cafile=str(ca_cert))
        self._barrier_user = barrier_user
        self._barrier_token = barrier_token
        self._offset = 0
        self._partial = b""
        self._records: list[AuditRecord] = []
        self._by_id: dict[str, AuditRecord] = {}
        self._barriers: set[str] = set()
        self._seq = 0
        self._lock = threading.Lock()

    def requests(self, since: int = 0) -> tuple[list[dict[str, Any]], int]:
        """Every client request recorded after ``since``, and the cursor, made current first."""
        with self._lock:
            audit_id = self._barrier()
            deadline = time.monotonic() + BARRIER_TIMEOUT
            self._read()
            while audit_id not in self._barriers:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"the audit log did not record the barrier {audit_id} within "
                        f"{BARRIER_TIMEOUT:.0f}s"
                    )
                time.sleep(0.05)
                self._read()
            records = [r.to_json() for r in self._records if r.seq > since]
            return records, self._seq

    def _barrier(self) -> str:
        request = urllib.request.Request(self._server + "/version")  # noqa: S310 - https only
        request.add_header("Authorization", f"Bearer {self._barrier_token}")
        with urllib.request.urlopen(request, timeout=BARRIER_TIMEOUT, context=self._tls) as reply:  # noqa: S310
            reply.read()
            return str(reply.headers["Audit-Id"])

    def _read(self) -> None:
        try:
            with self._path.open("rb") as log:
                log.seek(self._offset)
                chunk = log.read()
        except FileNotFoundError:
            return
        self._offset += len(chunk)
        *lines, self._partial = (self._partial + chunk).split(b"\n")
        for line in lines:
            if line.strip():
                self._add(json.loads(line))

    def _add(self, event: dict[str, Any]) -> None:
        audit_id = str(event.get("auditID", ""))
        user = str((event.get("user") or {}).get("username", ""))
        if user == self._barrier_user:
            self._barriers.add(audit_id)
            return
        status = int((event.get("responseStatus") or {}).get("code") or 0)
        known = self._by_id.get(audit_id)
        if known is not None:
            if event.get("stage") == "ResponseComplete":
                known.status = status
            return
        path, _, query = str(event.get("requestURI", "")).partition("?")
        verb = str(event.get("verb", ""))
        self._seq += 1
        record = AuditRecord(
            seq=self._seq,
            audit_id=audit_id,
            method=METHODS.get(verb, verb.upper()),
            path=path,
            query=query,
            verb=verb,
            status=status,
            at=_epoch(event.get("requestReceivedTimestamp")),
            user=user,
            user_agent=str(event.get("userAgent", "")),
        )
        self._records.append(record)
        self._by_id[audit_id] = record
        if len(self._records) > LOG_LIMIT:
            for old in self._records[: len(self._records) - LOG_LIMIT]:
                self._by_id.pop(old.audit_id, None)
            del self._records[: len(self._records) - LOG_LIMIT]
