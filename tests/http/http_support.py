"""Helpers for the receiver's HTTP tests: a recording pipeline double and payload fixtures."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nodefence.engine.model import AlertEvent, Decision, Reason, Verdict
from nodefence.settings import Settings

TOKEN = "s3cr3t-token-value-9f2c"
DATA = Path(__file__).parent / "data"


def load_payload(name: str) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads((DATA / name).read_text())
    return copy.deepcopy(payload)


class RecordingPipeline:
    """Records what reaches it and answers one fixed decision per event."""

    def __init__(self) -> None:
        self.alert_names: Sequence[str] = ("KubeNodeNotReady",)
        self.node_labels: Sequence[str] = ("node", "kubernetes_node", "instance")
        self.received: list[list[AlertEvent]] = []
        self.reconciles = 0
        self.closed = False
        self.raise_on_handle: BaseException | None = None
        self.readiness: tuple[bool, str] = (True, "cluster reachable")
        self.gate: asyncio.Event | None = None
        self.entered = asyncio.Event()

    async def handle_events(self, events: list[AlertEvent]) -> list[Decision]:
        self.received.append(list(events))
        self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.raise_on_handle is not None:
            raise self.raise_on_handle
        return [
            Decision(
                verdict=Verdict.SKIP if event.node is None else Verdict.NOOP,
                node=event.node,
                reasons=(
                    Reason("alert", True, f"alert {event.alertname} handled"),
                    Reason("node-ready", event.node is None, "node is Ready"),
                ),
                alertname=event.alertname,
                fingerprint=event.fingerprint,
                status=event.status.value,
            )
            for event in events
        ]

    async def reconcile(self) -> list[Decision]:
        self.reconciles += 1
        return [Decision(verdict=Verdict.NOOP, node="worker-9", reasons=())]

    async def ready(self) -> tuple[bool, str]:
        return self.readiness

    async def close(self) -> None:
        self.closed = True


def make_settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {"alert_token": TOKEN, "namespace": "nodefence", "identity": "t"}
    values.update(overrides)
    return Settings(**values)


def bearer(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
