"""The simulated cluster: store, simulated kubelets and controllers, and their settings."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from nodefence.sim.store import Store, WatchEvent


@dataclass
class SimSettings:
    """Periods and version of the simulated cluster (a scenario file may override them)."""

    k8s_version: str = "1.24.8"
    feature_gates: dict[str, bool] = field(default_factory=dict)
    tick_seconds: float = 0.1


class Controller(Protocol):
    """A level-triggered control loop: look at the store, move it one step toward the desired
    state. Called on every tick and after store changes, so it must be idempotent and cheap."""

    def reconcile(self, now: datetime) -> None: ...


class Simulation:
    """Owns the store and the simulated control loops; the HTTP server serves its store."""

    def __init__(self, settings: SimSettings | None = None) -> None:
        self.settings = settings or SimSettings()
        self.store = Store()
        self.controllers: list[Controller] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.store.add_listener(self._on_change)

    @property
    def git_version(self) -> str:
        return f"v{self.settings.k8s_version}"

    def _on_change(self, _event: WatchEvent) -> None:
        self._wake.set()

    def step(self) -> None:
        """Run every controller once (tests call this to advance deterministically)."""
        now = self.store.now()
        for controller in self.controllers:
            controller.reconcile(now)

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            self.step()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.settings.tick_seconds)

    async def start(self) -> None:
        """Start the simulated kubelets and controllers."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="simulation")

    async def stop(self) -> None:
        """Stop every background loop."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self.store.close_watches()
