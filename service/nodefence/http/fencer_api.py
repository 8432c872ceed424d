"""The boundary between the HTTP receiver and whatever turns events into decisions and actions.

The receiver depends only on this protocol, so it can be served and tested without a cluster
and the fencer can be exercised without HTTP.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from nodefence.engine.model import AlertEvent, Decision


class FencerApi(Protocol):
    """What the receiver needs of the fencer (``nodefence.shell.fencer.Fencer``)."""

    @property
    def alert_names(self) -> Sequence[str]:
        """Alert names the policy handles; the node is resolved only for these."""

    @property
    def node_labels(self) -> Sequence[str]:
        """Alert labels naming the node, in order of preference."""

    async def handle_events(self, events: list[AlertEvent]) -> list[Decision]:
        """Decide on and act for each event; one decision per event."""

    async def reconcile(self) -> list[Decision]:
        """Finish what lost or failed deliveries left undone."""

    async def ready(self) -> tuple[bool, str]:
        """Whether this replica can serve decisions now, and why (or why not)."""

    async def close(self) -> None:
        """Release clients and connections at shutdown."""
