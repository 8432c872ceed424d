"""Power drivers a test opens, closed when the test ends whatever it asserted: a driver holds an
HTTP session, a Redfish login or an IPMI thread, and the runtime closes every one at shutdown."""

from __future__ import annotations

from typing import Protocol, TypeVar


class Closable(Protocol):
    async def close(self) -> None: ...


D = TypeVar("D", bound=Closable)


class Opened:
    """Call it on a driver to have it closed at teardown; closing one twice is harmless, so a
    test about ``close`` itself may close its driver first."""

    def __init__(self) -> None:
        self._drivers: list[Closable] = []

    def __call__(self, driver: D) -> D:
        self._drivers.append(driver)
        return driver

    async def close_all(self) -> None:
        while self._drivers:
            await self._drivers.pop().close()
