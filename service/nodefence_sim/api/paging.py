"""``limit`` and ``continue`` on list requests, with the etcd3 storage's semantics.

Every page of a paged list comes from the same snapshot, the one taken at the first page's
resourceVersion, as etcd's MVCC reads serve it; the continue token is the real one's shape
(base64url JSON of the API version, that resourceVersion and the key to start from) so a client
that inspects it sees what it expects. ``metadata.remainingItemCount`` is given only for a list
without selectors, as the real server does. The simulator keeps the most recent snapshots
instead of a revision history, so a token whose snapshot was dropped, while objects changed
since, is answered 410 Expired with the real message, as a compacted revision is.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from nodefence_sim.errors import ApiError, bad_request
from nodefence_sim.store import Obj

CONTINUE_FORMAT = "meta.k8s.io/v1"
KEPT_SNAPSHOTS = 64
EXPIRED_MESSAGE = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this "
    "response to retrieve the remainder of the results. Continuing with the provided token "
    "results in an inconsistent list - objects that were created, modified, or deleted between "
    "the time the first chunk was returned and now may show up in the list."
)

# (resource key, namespace, label selector, field selector, resourceVersion)
SnapshotKey = tuple[tuple[str, str], str, str, str, int]


@dataclass(frozen=True)
class Page:
    """One page of a list: its items, the snapshot's resourceVersion, the token for the next
    page (empty on the last) and how many items follow (``None``: not said)."""

    items: list[Obj]
    resource_version: str
    continue_token: str
    remaining: int | None


def object_key(obj: Obj) -> str:
    """The object's storage key below the resource prefix (``namespace/name`` or ``name``)."""
    meta = obj["metadata"]
    namespace = meta.get("namespace")
    return f"{namespace}/{meta['name']}" if namespace else str(meta["name"])


def encode_token(resource_version: int, start: str) -> str:
    raw = json.dumps(
        {"v": CONTINUE_FORMAT, "rv": resource_version, "start": start}, separators=(",", ":")
    )
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_token(token: str) -> tuple[int, str]:
    """(resourceVersion, start key) of a continue token; 400 for anything else."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = json.loads(raw)
    except (binascii.Error, ValueError) as exc:
        raise bad_request(f"invalid continue token: {exc}") from exc
    if not isinstance(data, dict) or data.get("v") != CONTINUE_FORMAT:
        raise bad_request("invalid continue token: the token has an unrecognized version")
    rv, start = data.get("rv"), data.get("start")
    if not isinstance(rv, int) or isinstance(rv, bool) or rv <= 0 or not isinstance(start, str):
        raise bad_request("invalid continue token: the token is incomplete")
    if start.startswith("/") or ".." in start.split("/"):
        raise bad_request("invalid continue token: the start key may not be relative")
    return rv, start


def parse_limit(value: str | None) -> int:
    """``limit`` as the server reads it: absent, zero or negative means everything."""
    if value in (None, ""):
        return 0
    try:
        return max(0, int(str(value)))
    except ValueError as exc:
        raise bad_request(f"invalid limit: {value!r}: must be an integer") from exc


class Pager:
    """Pages lists from snapshots taken at their first page."""

    def __init__(self) -> None:
        self._snapshots: OrderedDict[SnapshotKey, list[Obj]] = OrderedDict()

    def page(
        self,
        key: tuple[tuple[str, str], str, str, str],
        listing: Callable[[], tuple[list[Obj], str]],
        *,
        limit: int,
        token: str,
        filtered: bool,
    ) -> Page:
        """A page of ``listing()`` (sorted by storage key) after ``token``'s key, at most
        ``limit`` items (0: all)."""
        if token:
            rv, start = decode_token(token)
            objects = self._snapshot((*key, rv), listing, rv)
        else:
            objects, current = _sorted(listing)
            rv, start = int(current), ""
        rest = [o for o in objects if object_key(o) >= start] if start else objects
        if not limit or len(rest) <= limit:
            return Page(rest, str(rv), "", None)
        if not token:
            self._keep((*key, rv), objects)
        chosen = rest[:limit]
        following = encode_token(rv, object_key(chosen[-1]) + "\x00")
        remaining = None if filtered else len(rest) - limit
        return Page(chosen, str(rv), following, remaining)

    def _snapshot(
        self, key: SnapshotKey, listing: Callable[[], tuple[list[Obj], str]], rv: int
    ) -> list[Obj]:
        kept = self._snapshots.get(key)
        if kept is not None:
            self._snapshots.move_to_end(key)
            return kept
        objects, current = _sorted(listing)
        if int(current) != rv:
            raise ApiError(410, "Expired", EXPIRED_MESSAGE)
        self._keep(key, objects)
        return objects

    def _keep(self, key: SnapshotKey, objects: list[Obj]) -> None:
        self._snapshots[key] = objects
        self._snapshots.move_to_end(key)
        while len(self._snapshots) > KEPT_SNAPSHOTS:
            self._snapshots.popitem(last=False)


def _sorted(listing: Callable[[], tuple[list[Obj], str]]) -> tuple[list[Obj], str]:
    """The listing in storage-key order, the order etcd returns a range in."""
    objects, rv = listing()
    return sorted(objects, key=object_key), rv
