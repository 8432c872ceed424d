"""A timeline printer whose steps are checks: the demo passes only if every step was seen."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TextIO, TypeVar

T = TypeVar("T")


class StepFailedError(Exception):
    """An expected step of the story did not happen within its deadline."""


class Timeline:
    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self.started = time.monotonic()
        self.passed = 0
        self.failed: list[str] = []

    def _stamp(self) -> str:
        return f"[{time.monotonic() - self.started:6.1f}s]"

    def say(self, text: str) -> None:
        print(f"{self._stamp()}   {text}", file=self.out, flush=True)

    def detail(self, text: str) -> None:
        for line in text.splitlines():
            print(f"{'':9}     {line}", file=self.out, flush=True)

    def heading(self, text: str) -> None:
        print(f"\n{self._stamp()} == {text}", file=self.out, flush=True)

    def ok(self, text: str) -> None:
        self.passed += 1
        print(f"{self._stamp()} ok {text}", file=self.out, flush=True)

    def fail(self, text: str) -> None:
        self.failed.append(text)
        print(f"{self._stamp()} FAILED {text}", file=self.out, flush=True)

    def verdict(self) -> int:
        """The demo's exit status: 0 only if every step was observed."""
        if self.failed:
            self.say(f"demo FAILED: {len(self.failed)} step(s) not observed")
            return 1
        self.say(f"demo complete: all {self.passed} steps observed")
        return 0

    async def expect(
        self,
        description: str,
        probe: Callable[[], Awaitable[T | None]],
        *,
        within: float = 30.0,
        interval: float = 0.2,
    ) -> T:
        """Poll ``probe`` until it returns something truthy, or fail the step at the deadline."""
        deadline = time.monotonic() + within
        while True:
            value = await probe()
            if value:
                self.ok(description)
                return value
            if time.monotonic() >= deadline:
                self.fail(f"{description} (not observed within {within:.0f}s)")
                raise StepFailedError(description)
            await asyncio.sleep(interval)
