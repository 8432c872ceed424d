"""Each node's last power-state probe, kept in the cluster so ``nodefence status`` can show it.

nodefence is stateless and ``status`` is a separate process, so what a serving replica's probe
learnt would otherwise live and die with that replica. After each round the replica writes the
ConfigMap ``nodefence-fencing-probes`` in its namespace: one key per node (the node's name, so
``kubectl get configmap nodefence-fencing-probes -o jsonpath='{.data.compute01}'`` shows one),
each a JSON object with the driver, the target (where the driver points, never a credential),
the state read, the error, how long the read took, when it answered on the API server's clock,
the interval of the replica that wrote it (so a reader can tell a stale probe) and that replica.

Written once per round, never per node. Several replicas probe the same nodes; each write carries
the resourceVersion it was merged on (a create when the ConfigMap is absent), and per node the
newer answer on the API server's clock is kept, so a slow round of one replica cannot replace a
newer answer of another, and a conflict costs a re-read and a re-merge, a few times at most,
then waits for the next round: an observation is not worth more. Nodes no longer in the writer's
inventory are dropped. Rounds are minutes apart and jittered, so replicas seldom meet.

Secrets: the target and the error come from the drivers, which already leave credentials out;
every secret of the inventory is masked again here before anything is written. The whole data is
kept under ``MAX_DATA_BYTES`` (well below the 1 MiB a ConfigMap may hold): texts are cut, and if
that is not enough, answered nodes are left out before failing ones, and the ConfigMap says how
many were left out. Dry-run replicas write nothing (S8).

Readers take what they can: an absent ConfigMap, a key that is not such an object, or a time that
does not parse is "no probe recorded" for that node, never an error.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog
from pydantic import BaseModel, SecretStr

from nodefence.engine.model import PREFIX
from nodefence.engine.wording import instant
from nodefence.fencing.check import NodeCheck
from nodefence.fencing.inventory import Inventory
from nodefence.kube.client import Dated, Deadline, Json, KubeClient, KubeError
from nodefence.kube.ratelimit import Priority, reads_at

log = structlog.get_logger(__name__)

CONFIGMAP = "nodefence-fencing-probes"
WRITTEN_BY = PREFIX + "probes-written-by"
OMITTED = PREFIX + "probes-omitted"
MAX_DATA_BYTES = 512 * 1024
MAX_TEXT_CHARS = 300
SHORT_TEXT_CHARS = 80
MAX_ATTEMPTS = 3
MASK = "***"
# A probe older than this many of its writer's intervals is flagged: the probe stopped.
STALE_INTERVALS = 2


@dataclass(frozen=True)
class ProbeEntry:
    node: str
    driver: str
    target: str
    state: str
    error: str
    seconds: float
    # When the node's BMC or agent answered, on the API server's clock.
    at: datetime
    interval_seconds: float
    by: str

    @property
    def answered(self) -> bool:
        return self.state in ("on", "off")

    def encode(self, limit: int = MAX_TEXT_CHARS) -> str:
        return json.dumps(
            {
                "driver": self.driver,
                "target": _cut(self.target, limit),
                "state": self.state,
                "error": _cut(self.error, limit),
                "seconds": self.seconds,
                "at": instant(self.at),
                "intervalSeconds": self.interval_seconds,
                "by": self.by,
            },
            separators=(",", ":"),
            sort_keys=True,
        )


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def decode(node: str, raw: object) -> ProbeEntry | None:
    """One key's value, or None when it is not what a probe writes."""
    try:
        data = json.loads(raw) if isinstance(raw, str) else None
        if not isinstance(data, dict):
            return None
        at = datetime.fromisoformat(str(data["at"]).replace("Z", "+00:00"))
        if at.tzinfo is None:
            return None
        return ProbeEntry(
            node=node,
            driver=str(data.get("driver") or ""),
            target=str(data.get("target") or ""),
            state=str(data.get("state") or "unknown"),
            error=str(data.get("error") or ""),
            seconds=float(data.get("seconds") or 0.0),
            at=at,
            interval_seconds=float(data.get("intervalSeconds") or 0.0),
            by=str(data.get("by") or ""),
        )
    except (KeyError, TypeError, ValueError):
        return None


def inventory_secrets(inventory: Inventory | None) -> list[str]:
    """Every credential the inventory holds (passwords, agents' secret parameters)."""
    found: list[str] = []

    def walk(value: object) -> None:
        if isinstance(value, SecretStr):
            secret = value.get_secret_value()
            if secret:
                found.append(secret)
        elif isinstance(value, BaseModel):
            for name in type(value).model_fields:
                walk(getattr(value, name))
        elif isinstance(value, Mapping):
            for item in value.values():
                walk(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)

    if inventory is not None:
        walk(inventory)
    # Longest first, so a secret that contains another is masked whole.
    return sorted(set(found), key=len, reverse=True)


def scrub(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, MASK)
    return text


def entries_of(
    checks: Iterable[tuple[NodeCheck, datetime]],
    *,
    interval_seconds: float,
    by: str,
    secrets: Iterable[str],
) -> list[ProbeEntry]:
    """A round's answers, each with its server time, as they are stored: scrubbed."""
    hidden = list(secrets)
    return [
        ProbeEntry(
            node=check.node,
            driver=check.driver or "none",
            target=scrub(check.target, hidden),
            state=check.state,
            error=scrub(check.error, hidden),
            seconds=check.seconds,
            at=at,
            interval_seconds=interval_seconds,
            by=by,
        )
        for check, at in checks
    ]


def merged(current: Mapping[str, object], round_: list[ProbeEntry]) -> list[ProbeEntry]:
    """This round's entries, except where the ConfigMap holds a newer answer for the node."""
    kept: list[ProbeEntry] = []
    for entry in round_:
        there = decode(entry.node, current.get(entry.node))
        kept.append(there if there is not None and there.at > entry.at else entry)
    return kept


def bounded(entries: list[ProbeEntry]) -> tuple[dict[str, str], int]:
    """The ConfigMap's data within ``MAX_DATA_BYTES`` and how many nodes were left out."""
    for limit in (MAX_TEXT_CHARS, SHORT_TEXT_CHARS):
        data = {e.node: e.encode(limit) for e in entries}
        if _size(data) <= MAX_DATA_BYTES:
            return data, 0
    # Failing nodes first: they are what the operator needs to see.
    data = {}
    used = 0
    for entry in sorted(entries, key=lambda e: (e.answered, e.node)):
        value = entry.encode(SHORT_TEXT_CHARS)
        cost = len(entry.node) + len(value)
        if used + cost > MAX_DATA_BYTES:
            continue
        data[entry.node] = value
        used += cost
    return data, len(entries) - len(data)


def _size(data: Mapping[str, str]) -> int:
    return sum(len(k) + len(v) for k, v in data.items())


def _body(
    namespace: str, current: Json | None, data: dict[str, str], omitted: int, by: str
) -> Json:
    meta: dict[str, Any] = dict((current or {}).get("metadata") or {})
    meta.pop("managedFields", None)
    meta.setdefault("name", CONFIGMAP)
    meta.setdefault("namespace", namespace)
    labels = dict(meta.get("labels") or {})
    labels["app.kubernetes.io/name"] = "nodefence"
    meta["labels"] = labels
    notes = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items() if k != OMITTED}
    notes[WRITTEN_BY] = by
    if omitted:
        notes[OMITTED] = str(omitted)
    meta["annotations"] = notes
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


async def _read(kube: KubeClient, namespace: str, deadline: Deadline) -> Json | None:
    try:
        return (await kube.get_configmap_dated(namespace, CONFIGMAP, deadline)).body
    except KubeError as exc:
        if exc.status == 404:
            return None
        raise


async def write_round(
    kube: KubeClient,
    namespace: str,
    checks: list[tuple[NodeCheck, float]],
    *,
    interval_seconds: float,
    by: str,
    inventory: Inventory | None,
    deadline: Deadline,
) -> Dated | None:
    """Store one round (each check with the monotonic time its answer came): None when it was not
    written (no server time known, or other replicas kept writing)."""
    secrets = inventory_secrets(inventory)
    for _attempt in range(MAX_ATTEMPTS):
        # An observation: its read and its write wait behind every request that acts.
        with reads_at(Priority.REFUSAL):
            current = await _read(kube, namespace, deadline)
        # The read just made anchors the server clock, so every answer's monotonic time maps
        # onto the API server's clock, never this machine's.
        if kube.server_clock.now() is None:
            log.warning("fencing_probe_not_recorded", why="no Date from the API server")
            return None
        stamped = [(check, kube.server_clock.now_at(mono)) for check, mono in checks]
        round_ = entries_of(stamped, interval_seconds=interval_seconds, by=by, secrets=secrets)
        data, omitted = bounded(merged((current or {}).get("data") or {}, round_))
        body = _body(namespace, current, data, omitted, by)
        try:
            if current is None:
                return await kube.create_configmap(namespace, body, deadline, Priority.REFUSAL)
            return await kube.replace_configmap(
                namespace, CONFIGMAP, body, deadline, Priority.REFUSAL
            )
        except KubeError as exc:
            # 409: another replica wrote (or created) it since the read; merge on its write.
            if exc.status != 409:
                raise
    log.info("fencing_probe_not_recorded", why="other replicas kept writing; next round")
    return None


@dataclass(frozen=True)
class ProbeView:
    """What ``status`` reads: the entries, the keys it could not read, and why none at all."""

    entries: list[ProbeEntry]
    unreadable: list[str]
    omitted: int
    note: str


async def read_probes(
    kube: KubeClient, namespace: str, deadline: Deadline
) -> tuple[ProbeView, datetime | None]:
    """The recorded probes and the API server's time of the read (their age is reckoned on it)."""
    where = f"ConfigMap {namespace}/{CONFIGMAP}"
    try:
        reply = await kube.get_configmap_dated(namespace, CONFIGMAP, deadline)
    except KubeError as exc:
        if exc.status == 404:
            return ProbeView([], [], 0, f"{where} is absent"), None
        return ProbeView([], [], 0, f"{where} could not be read: {exc}"), None
    raw = reply.body.get("data")
    data = raw if isinstance(raw, dict) else {}
    entries, unreadable = [], []
    for key in sorted(data):
        entry = decode(str(key), data[key])
        if entry is None:
            unreadable.append(str(key))
        else:
            entries.append(entry)
    notes = (reply.body.get("metadata") or {}).get("annotations") or {}
    try:
        omitted = int(notes.get(OMITTED, 0))
    except (TypeError, ValueError):
        omitted = 0
    note = where if entries or unreadable else f"{where} holds no entry"
    return ProbeView(entries, unreadable, omitted, note), reply.server_time
