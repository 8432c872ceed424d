"""Exception types shared across the receiver, the fencer and the command line.

They live apart from any one layer so that the HTTP layer can map them to status codes without
importing the Kubernetes adapter, and the adapter can raise them without knowing about HTTP.
"""

from __future__ import annotations


class NodefenceError(Exception):
    """Base of every error nodefence raises on purpose."""


class ConfigError(NodefenceError):
    """The configuration cannot work; the process must not start serving with it."""


class ClusterUnavailableError(NodefenceError):
    """The Kubernetes API stayed unreachable or kept failing after retries.

    The receiver answers 503 with ``Retry-After`` so Alertmanager delivers the alert again
    later, instead of a 4xx that would make it drop the notification.
    """

    problem_kind = "cluster-unavailable"
    public_detail = "The Kubernetes API is unavailable; retry later."

    def __init__(self, message: str, *, retry_after_seconds: int = 10) -> None:
        super().__init__(message)
        self.retry_after_seconds = retry_after_seconds
