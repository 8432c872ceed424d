"""How durations and instants are written in reasons, in the notation of ``kubectl`` and Go."""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta


def duration(value: timedelta | float) -> str:
    """``1h2m3s``, ``5m0s``, ``45s``: the form kubectl prints, so reasons read like its output."""
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    sign = "-" if seconds < 0 else ""
    total = int(abs(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{sign}{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{sign}{minutes}m{secs}s"
    return f"{sign}{secs}s"


def parse_instant(value: object) -> datetime | None:
    """An RFC 3339 timestamp as the API writes them; ``None`` for anything else, a time without
    an offset included (it could not be compared with the server's clock)."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


@functools.lru_cache(maxsize=1024)
def instant(value: datetime) -> str:
    """RFC 3339 in UTC with a ``Z`` suffix, as the Kubernetes API writes timestamps.
    Remembered: each decision writes the same few instants (a Lease's renewal, the alert's
    start) into several reasons, on every repeat of the alert."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
