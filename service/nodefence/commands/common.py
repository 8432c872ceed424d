"""What the operator's commands share: the person running them, a fencer that finds out at
once whether the cluster answers, and Events on the objects of nodefence's namespace.

A command run at 3 a.m. against an API server that does not answer should say so within
seconds, not after the receiver's whole request deadline: the first request gets
``CONNECT_SECONDS``, and the work after it the usual deadline.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import socket
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from nodefence.errors import ClusterUnavailableError
from nodefence.kube.client import Deadline, Json, KubeClient, KubeError
from nodefence.kube.events import COMPONENT
from nodefence.policy import Policy
from nodefence.settings import Settings
from nodefence.shell.fencer import Fencer

CONNECT_SECONDS = 5.0


def operator_identity() -> str:
    """Who runs the command, as this machine knows them (``user@host``). The API server's audit
    log holds the authenticated user; this is what the record and the Event show."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = os.environ.get("USER") or "unknown"
    return f"{user}@{socket.gethostname()}"


async def who_runs(kube: KubeClient, given: str | None, deadline: Deadline) -> tuple[str, str]:
    """Who the record and the Event name: ``--by`` as given, else the user the API server
    authenticated (a SelfSubjectReview), else this machine's ``user@host`` with a note saying
    so (the second value), since that name is only what this machine calls its user."""
    from nodefence.kube.operator_reads import OperatorReads

    if given:
        return given, ""
    user = await OperatorReads(kube.api).who_am_i(deadline)
    if user:
        return user, ""
    local = operator_identity()
    return local, (
        f"the API server did not say who you are (no SelfSubjectReview), so this is recorded "
        f"as {local}, this machine's user; pass --by to name yourself"
    )


async def check_reachable(fencer: Fencer, settings: Settings) -> str:
    """The API server's version, asked with a short deadline: an unreachable cluster is one
    clear error within seconds. The reader keeps the answer, so it costs no extra request."""
    seconds = min(CONNECT_SECONDS, settings.request_deadline_seconds)
    return await fencer.reader.server_version_string(Deadline(seconds))


@contextlib.asynccontextmanager
async def connected_fencer(settings: Settings, policy: Policy) -> AsyncIterator[Fencer]:
    """A fencer whose cluster answered; closed however the command ends."""
    from nodefence.runtime import build_fencer

    fencer = await build_fencer(settings, policy=policy)
    try:
        await check_reachable(fencer, settings)
        yield fencer
    finally:
        await fencer.close()


async def namespace_event(
    kube: KubeClient,
    *,
    namespace: str,
    kind: str,
    name: str,
    uid: str,
    reason: str,
    message: str,
    identity: str,
    deadline: Deadline,
) -> bool:
    """An Event on an object of nodefence's namespace (the pause ConfigMap), so ``kubectl
    describe`` keeps the history the object's current state does not. Best effort: the change
    it describes is already written."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    involved: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": kind,
        "name": name,
        "namespace": namespace,
    }
    if uid:
        involved["uid"] = uid
    event: Json = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.nodefence.{uuid.uuid4().hex[:12]}", "namespace": namespace},
        "involvedObject": involved,
        "reason": reason,
        "message": message[:1024],
        "type": "Normal",
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": identity,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    try:
        await kube.create_event(namespace, event, deadline)
    except (KubeError, ClusterUnavailableError):
        return False
    return True
