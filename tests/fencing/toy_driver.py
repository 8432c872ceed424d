"""A toy powering driver, kept to show what a new driver is: this one module (its client and its
inventory entry) plus one row in the table of drivers (``nodefence.engine.drivers``), which the
test adds. Its machines are in this process: ``MACHINES`` holds each one's power, ``SENT`` every
power action that went out, and a machine reports the system UUID it is given."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr

from nodefence.engine.drivers import DriverKind
from nodefence.engine.evidence import PowerEvidence
from nodefence.engine.identity import Reported
from nodefence.fencing.model import BmcEntry, SendCheck

# Machine name -> (power state, system UUID).
MACHINES: dict[str, tuple[str, str]] = {}
SENT: list[tuple[str, str]] = []
# The row the test adds to the table.
KIND = DriverKind("toy", __name__, powers=True)


class ToyDriver:
    """Honest as a driver must be: an action is sent once, and only a read after it is an
    answer; a machine it does not know is ``unknown``."""

    def __init__(self, machine: str, token: SecretStr) -> None:
        self.machine = machine
        self._token = token
        self.source = f"toy {machine}"

    def _read(self, *, sent: bool = False) -> PowerEvidence:
        if self.machine not in MACHINES or not self._token.get_secret_value():
            return PowerEvidence("unknown", self.source, "no such machine", reset_sent=sent)
        state, _uuid = MACHINES[self.machine]
        return PowerEvidence(state, self.source, raw_state=state.upper(), reset_sent=sent)

    async def status(self, timeout: float) -> PowerEvidence:
        return self._read()

    async def _power(self, target: str, before_send: SendCheck | None) -> PowerEvidence:
        read = self._read()
        if read.state in (target, "unknown"):
            return read
        why = await before_send() if before_send is not None else ""
        if why:
            return PowerEvidence("unknown", self.source, why, withheld=why)
        SENT.append((self.machine, target))
        MACHINES[self.machine] = (target, MACHINES[self.machine][1])
        return self._read(sent=True)

    async def power_off(
        self,
        timeout: float,
        *,
        before_send: SendCheck | None = None,
    ) -> PowerEvidence:
        return await self._power("off", before_send)

    async def power_on(
        self,
        timeout: float,
        *,
        before_send: SendCheck | None = None,
    ) -> PowerEvidence:
        return await self._power("on", before_send)

    async def identity(self, timeout: float) -> Reported:
        if self.machine not in MACHINES:
            return Reported("", self.source, detail="no such machine")
        return Reported(MACHINES[self.machine][1], self.source)

    async def close(self) -> None:
        return None


class ToyBmc(BmcEntry):
    driver: Literal["toy"]
    machine: str = Field(min_length=1)
    token: SecretStr

    def build(self) -> ToyDriver:
        return ToyDriver(self.machine, self.token)

    def target(self) -> str:
        return f"toy {self.machine}"

    def machine_keys(self) -> tuple[str, ...]:
        return (f"toy {self.machine.lower()}",)


ENTRY = ToyBmc
