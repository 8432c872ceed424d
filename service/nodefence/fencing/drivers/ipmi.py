"""An IPMI-over-LAN BMC as a power driver, through pyghmi.

pyghmi blocks in its own I/O loop, so every exchange runs on a thread of this driver's own: one
thread per BMC keeps a slow or dead BMC from starving the event loop or the other BMCs, and
serialises the exchanges with one BMC (a pyghmi session is not meant to be used concurrently).
The event loop stops waiting at the call's deadline even if the thread is still inside pyghmi;
the thread then finishes on pyghmi's own timeout, and the next call queues behind it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from pydantic import Field, SecretStr, field_validator
from pyghmi.ipmi.command import Command  # type: ignore[import-untyped]
from pyghmi.ipmi.private.session import Session  # type: ignore[import-untyped]
from pyghmi.ipmi.private.util import decode_wireformat_uuid  # type: ignore[import-untyped]

from nodefence.engine.evidence import PowerEvidence
from nodefence.engine.identity import Reported
from nodefence.fencing.model import BmcEntry, PowerState, SendCheck, machine_host

DEFAULT_PORT = 623
_STATES: dict[str, PowerState] = {"on": "on", "off": "off"}
# pyghmi's words for a refused login: trying again would only lock the account out sooner.
_REFUSALS = ("password", "unauthorized", "username", "privilege")
# Get System GUID (IPMI 2.0, 22.14): network function App, command 37h.
_APP_NETFN = 0x06
_GET_SYSTEM_GUID = 0x37

Target = Literal["on", "off"]
T = TypeVar("T")


class _Failure(Exception):
    def __init__(self, detail: str, *, transient: bool) -> None:
        super().__init__(detail)
        self.detail = detail
        self.transient = transient


class IpmiDriver:
    """Chassis power of one machine over IPMI 2.0 (RMCP+)."""

    def __init__(
        self,
        address: str,
        *,
        username: str,
        password: SecretStr,
        port: int = DEFAULT_PORT,
        poll_interval: float = 1.0,
        kg: SecretStr | None = None,
    ) -> None:
        self._address = address
        # The BMC key (Kg), hexadecimal as ipmitool's -y takes it; None: the password stands in.
        self._kg = kg
        self._username = username
        self._password = password
        self._port = port
        self._poll_interval = poll_interval
        self._command: Any = None
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"ipmi-{address}"
        )

    @property
    def source(self) -> str:
        return f"ipmi {self._address}:{self._port}"

    async def status(self, timeout: float) -> PowerEvidence:  # noqa: ASYNC109
        last_error = ""
        try:
            async with asyncio.timeout(timeout):
                while True:
                    try:
                        return await self._read()
                    except _Failure as exc:
                        if not exc.transient:
                            return self._unknown(exc.detail)
                        last_error = exc.detail
                    await asyncio.sleep(self._poll_interval)
        except TimeoutError:
            why = f" (last error: {last_error})" if last_error else ""
            return self._unknown(f"no answer from the BMC within {timeout:g}s{why}")

    async def power_off(
        self,
        timeout: float,  # noqa: ASYNC109
        *,
        before_send: SendCheck | None = None,
    ) -> PowerEvidence:
        return await self._power(timeout, "off", before_send)

    async def power_on(
        self,
        timeout: float,  # noqa: ASYNC109
        *,
        before_send: SendCheck | None = None,
    ) -> PowerEvidence:
        return await self._power(timeout, "on", before_send)

    async def identity(self, timeout: float) -> Reported:  # noqa: ASYNC109
        """The system GUID (``Get System GUID``), which a BMC takes from the SMBIOS system UUID
        the kubelet reports as ``systemUUID``; decoded as dmidecode prints it."""
        last_error = ""
        try:
            async with asyncio.timeout(timeout):
                while True:
                    try:
                        answer = await self._call(
                            lambda c: c.raw_command(netfn=_APP_NETFN, command=_GET_SYSTEM_GUID)
                        )
                        return self._guid(answer)
                    except _Failure as exc:
                        if not exc.transient:
                            return Reported("", self.source, detail=exc.detail)
                        last_error = exc.detail
                    await asyncio.sleep(self._poll_interval)
        except TimeoutError:
            why = f" (last error: {last_error})" if last_error else ""
            return Reported("", self.source, detail=f"no system GUID within {timeout:g}s{why}")

    def _guid(self, answer: Any) -> Reported:
        if not isinstance(answer, dict) or "error" in answer:
            error = answer.get("error") if isinstance(answer, dict) else "no answer"
            return Reported("", self.source, detail=f"Get System GUID failed: {error}")
        data = answer.get("data")
        if not isinstance(data, bytes | bytearray | list) or len(data) < 16:
            return Reported("", self.source, detail="Get System GUID answered no 16-byte GUID")
        return Reported(str(decode_wireformat_uuid(bytearray(data[:16]))), self.source)

    async def close(self) -> None:
        command, self._command = self._command, None
        if command is not None:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._executor, _logout, command)
        self._executor.shutdown(wait=False)

    async def _power(
        self, seconds: float, target: Target, before_send: SendCheck | None = None
    ) -> PowerEvidence:
        sent = False
        last = ""
        last_error = ""
        try:
            async with asyncio.timeout(seconds):
                while True:
                    try:
                        reading = await self._read()
                        last = reading.raw_state
                        if reading.state == target:
                            return dataclasses.replace(reading, reset_sent=sent)
                        if not sent:
                            # The reads before it may have taken long: the claim that decided
                            # the action is asked again right before it goes out.
                            if before_send is not None and (why := await before_send()):
                                held = self._unknown(f"power {target} not sent: {why}", last)
                                return dataclasses.replace(held, withheld=why)
                            # Marked before the exchange: a lost answer may still mean the
                            # BMC acted, and the action is never repeated within one call.
                            sent = True
                            await self._call(lambda c: c.set_power(target, wait=False))
                    except _Failure as exc:
                        if not exc.transient:
                            return self._unknown(exc.detail, last, sent=sent)
                        last_error = exc.detail
                    await asyncio.sleep(self._poll_interval)
        except TimeoutError:
            if sent and last:
                detail = f"sent power {target}; the BMC still reports {last} after {seconds:g}s"
            else:
                why = f" (last error: {last_error})" if last_error else ""
                detail = f"no power {target} read back within {seconds:g}s{why}"
            return self._unknown(detail, last, sent=sent)

    async def _read(self) -> PowerEvidence:
        answer = await self._call(lambda c: c.get_power())
        raw = str(answer.get("powerstate", "")) if isinstance(answer, dict) else ""
        state = _STATES.get(raw, "unknown")
        detail = "" if state != "unknown" else f"the BMC reports power state {raw!r}"
        return PowerEvidence(state, self.source, detail, raw_state=raw)

    async def _call(self, operation: Callable[[Any], T]) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._exchange, operation)

    def _exchange(self, operation: Callable[[Any], T]) -> T:
        """On the driver's thread: log in if needed, then one exchange. A failed session is
        dropped, so the next attempt logs in afresh instead of reusing a broken one."""
        try:
            if self._command is None:
                self._command = Command(
                    bmc=self._address,
                    userid=self._username,
                    password=self._password.get_secret_value(),
                    port=self._port,
                    kg=bytes.fromhex(self._kg.get_secret_value()) if self._kg else None,
                )
            return operation(self._command)
        except Exception as exc:  # pyghmi's layers raise anything from struct.error to OSError
            command, self._command = self._command, None
            if command is not None:
                _logout(command)
            raise self._failure(exc) from None

    def _failure(self, exc: Exception) -> _Failure:
        message = str(exc) if str(exc) not in ("", "None") else "no answer"
        secret = self._password.get_secret_value()
        if secret:
            message = message.replace(secret, "***")
        refused = any(word in message.lower() for word in _REFUSALS)
        if refused:
            return _Failure(
                f"the BMC refused the configured credentials ({message})", transient=False
            )
        return _Failure(f"{type(exc).__name__}: {message}", transient=True)

    def _unknown(self, detail: str, raw: str = "", *, sent: bool = False) -> PowerEvidence:
        return PowerEvidence("unknown", self.source, detail, raw_state=raw, reset_sent=sent)


def _logout(command: Any) -> None:
    # The session times out on the BMC anyway; a failed logout changes no power state.
    with contextlib.suppress(Exception):
        session = command.ipmi_session
        session.logout()
        # pyghmi keeps a logged-in session in its table of sessions being set up, keyed by BMC
        # and credentials, and hands it to the next Command for the same BMC even once logged
        # out: every later driver for this BMC in the process would then fail ("'<' not
        # supported between float and None"). Only this session's own entry is dropped.
        for key, held in list(Session.initting_sessions.items()):
            if held is session:
                del Session.initting_sessions[key]


def machine_key(host: str, port: int | str, target: str = "") -> str:
    """One IPMI BMC's machine key (``target``: the bridged controller some agents address),
    however its entry (or a fence_ipmilan entry) spells it."""
    return f"ipmi {machine_host(host)}:{port}" + (f" target={target}" if target else "")


class IpmiBmc(BmcEntry):
    driver: Literal["ipmi"]
    address: str = Field(min_length=1)
    port: int = Field(DEFAULT_PORT, ge=1, le=65535)
    username: str = Field(min_length=1)
    password: SecretStr
    # The BMC key (Kg) of an IPMI v2 BMC that has one, hexadecimal; nodefence's own IPMI client
    # uses it in memory, never on a command line.
    kg: SecretStr | None = None

    @field_validator("kg")
    @classmethod
    def _hexadecimal(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            try:
                bytes.fromhex(value.get_secret_value())
            except ValueError:
                raise ValueError("kg must be hexadecimal (as ipmitool's -y takes it)") from None
        return value

    def build(self) -> IpmiDriver:
        return IpmiDriver(
            self.address,
            username=self.username,
            password=self.password,
            port=self.port,
            kg=self.kg,
        )

    def target(self) -> str:
        return f"ipmi {self.address.strip().lower()}:{self.port}"

    def machine_keys(self) -> tuple[str, ...]:
        return (machine_key(self.address, self.port),)


# The inventory entry of this driver (``fencing.registry.entry_model``).
ENTRY = IpmiBmc
