"""A DMTF Redfish BMC as a power driver.

The machine counts as off only when its ComputerSystem reads back ``PowerState: Off``. A BMC
that is unreachable, refuses the credentials, presents a certificate nobody vouches for, answers
slowly or says something else yields ``unknown``: no proof, no fence.

Power actions post ``ComputerSystem.Reset`` once per call, to the target the system itself
lists, with the hardest reset type it allows (a graceful shutdown can hang on the very machine that
is being fenced for hanging). A toggle such as ``PushPowerButton`` is used only as a last resort
and only when the machine reads as being in the opposite state, because on a machine that is
already off it would switch it on.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import ssl
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import aiohttp
from pydantic import Field, SecretStr, field_validator
from yarl import URL

from nodefence.engine.evidence import PowerEvidence
from nodefence.engine.identity import Reported
from nodefence.fencing.model import (
    BmcEntry,
    PowerState,
    SendCheck,
    Strict,
    machine_host,
)

SYSTEMS = "/redfish/v1/Systems"
SESSIONS = "/redfish/v1/SessionService/Sessions"
RESET_ACTION = "#ComputerSystem.Reset"
ALLOWABLE = "ResetType@Redfish.AllowableValues"
# A ComputerSystem is a few kilobytes; anything far larger is not a BMC answering the question.
MAX_BODY_BYTES = 1 << 20
MAX_REDIRECTS = 3
MAX_MESSAGE_CHARS = 200
CLOSE_TIMEOUT = 2.0

# Hardest first. ``Off`` is not in the DMTF ResetType enum but some BMCs list it anyway.
OFF_RESET_TYPES = ("ForceOff", "Off", "GracefulShutdown", "PushPowerButton")
ON_RESET_TYPES = ("On", "ForceOn", "PushPowerButton")
TOGGLES = frozenset({"PushPowerButton"})

_STATES: dict[str, PowerState] = {"On": "on", "Off": "off"}

Target = Literal["on", "off"]


class _Failure(Exception):
    """A step that produced no reading. Transient ones (network, 5xx, per-request timeout) are
    retried while the deadline allows; the others (credentials, certificate, a missing system)
    would only fail again."""

    def __init__(self, detail: str, *, transient: bool) -> None:
        super().__init__(detail)
        self.detail = detail
        self.transient = transient


class _Withheld(Exception):
    """The reset was not posted: the check before sending said the claim no longer holds."""

    def __init__(self, reset_type: str, why: str) -> None:
        super().__init__(why)
        self.reset_type = reset_type
        self.why = why


@dataclass
class _Attempt:
    """What one call learned so far, so that running out of time can still say why."""

    timeout: float
    last_error: str = ""
    last_raw: str = ""
    sent: str = ""

    def expired(self, action: str) -> str:
        if self.sent and self.last_raw:
            return (
                f"sent {self.sent}; the system still reports {self.last_raw} after "
                f"{self.timeout:g}s"
            )
        why = f" (last error: {self.last_error})" if self.last_error else ""
        return f"no {action} within {self.timeout:g}s{why}"


@dataclass
class _Response:
    status: int
    headers: dict[str, str]
    body: bytes


def base_url(address: str) -> URL:
    """The BMC's origin. Plain ``http`` only when the address spells it out, so that a bare host
    name never silently downgrades to an unencrypted connection carrying credentials."""
    text = address.strip()
    url = URL(text if "://" in text else f"https://{text}")
    if url.scheme not in ("https", "http") or not url.host:
        raise ValueError(f"not an http(s) BMC address: {address!r}")
    return url.origin()


def system_path(system: str) -> str:
    """An explicit system: a path (``/redfish/v1/Systems/1``) or just its Id (``1``)."""
    text = system.strip()
    if text.startswith("/"):
        return text.rstrip("/")
    return f"{SYSTEMS}/{text}"


def choose_reset_type(allowed: Iterable[str] | None, target: Target, current: str) -> str:
    """The reset type that brings the machine to ``target``, from what the BMC allows (``None``:
    it does not say, so the standard value)."""
    if allowed is None:
        return "ForceOff" if target == "off" else "On"
    offered = [str(value) for value in allowed]
    preference = OFF_RESET_TYPES if target == "off" else ON_RESET_TYPES
    opposite: PowerState = "on" if target == "off" else "off"
    for value in preference:
        if value in offered and (value not in TOGGLES or current == opposite):
            return value
    verb = "power off" if target == "off" else "power on"
    listed = ", ".join(offered) or "nothing"
    toggle = (
        " (PushPowerButton is used only when the current state is known to be the opposite)"
        if "PushPowerButton" in offered
        else ""
    )
    raise _Failure(
        f"the BMC allows no reset type that would {verb} the system (it lists {listed}){toggle}",
        transient=False,
    )


def _uuid_of(system: dict[str, Any]) -> str:
    value = system.get("UUID")
    return value.strip() if isinstance(value, str) else ""


def _message_of(body: bytes) -> str:
    """The BMC's own explanation from a Redfish error body, shortened."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return ""
    if not isinstance(parsed, dict) or not isinstance(parsed.get("error"), dict):
        return ""
    error = parsed["error"]
    messages = [str(error.get("message", ""))]
    for info in error.get("@Message.ExtendedInfo") or []:
        if isinstance(info, dict) and info.get("Message"):
            messages.append(str(info["Message"]))
    text = "; ".join(m for m in messages if m)
    return text[:MAX_MESSAGE_CHARS]


class RedfishDriver:
    """One ComputerSystem behind one Redfish service. Not safe to share between event loops; one
    driver per BMC, closed when no longer needed (that logs out its session)."""

    def __init__(
        self,
        address: str,
        *,
        username: str,
        password: SecretStr,
        system: str | None = None,
        auth: Literal["session", "basic"] = "session",
        ca_file: str | None = None,
        insecure: bool = False,
        poll_interval: float = 1.0,
        request_timeout: float = 10.0,
    ) -> None:
        self._base = base_url(address)
        self._username = username
        self._password = password
        self._system = system_path(system) if system else None
        self._auth = auth
        self._ca_file = ca_file
        self._insecure = insecure
        self._poll_interval = poll_interval
        self._request_timeout = request_timeout
        self._http: aiohttp.ClientSession | None = None
        self._token: SecretStr | None = None
        self._session_uri: str | None = None
        self._login_lock = asyncio.Lock()

    @property
    def source(self) -> str:
        return f"redfish {self._base}{self._system or ''}"

    # ------------------------------------------------------------------ public
    async def status(self, timeout: float) -> PowerEvidence:  # noqa: ASYNC109
        attempt = _Attempt(timeout)
        try:
            async with asyncio.timeout(timeout):
                return self._reading(await self._read_system(attempt))
        except _Failure as exc:
            return self._unknown(exc.detail)
        except TimeoutError:
            return self._unknown(attempt.expired("answer from the BMC"))

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
        """The system's ``UUID`` property (its SMBIOS system UUID, which the kubelet reports as
        the Node's ``systemUUID``)."""
        attempt = _Attempt(timeout)
        try:
            async with asyncio.timeout(timeout):
                system = await self._read_system(attempt)
        except _Failure as exc:
            return Reported("", self.source, detail=self._scrub(exc.detail))
        except TimeoutError:
            return Reported("", self.source, detail=self._scrub(attempt.expired("answer")))
        value = _uuid_of(system)
        detail = "" if value else "the system reports no UUID property"
        return Reported(value, self.source, detail=detail)

    async def close(self) -> None:
        http, self._http = self._http, None
        if http is None:
            return
        try:
            if self._token is not None and self._session_uri:
                async with asyncio.timeout(CLOSE_TIMEOUT):
                    await self._send(http, "DELETE", self._session_uri, None, self._headers())
        except (TimeoutError, aiohttp.ClientError, _Failure):
            # The BMC expires the session on its own; a failed logout changes no power state.
            pass
        finally:
            self._token = None
            self._session_uri = None
            await http.close()

    # ----------------------------------------------------------------- actions
    async def _power(
        self, seconds: float, target: Target, before_send: SendCheck | None = None
    ) -> PowerEvidence:
        attempt = _Attempt(seconds)
        try:
            async with asyncio.timeout(seconds):
                system = await self._read_system(attempt)
                reading = self._reading(system)
                attempt.last_raw = reading.raw_state
                if reading.state == target:
                    return reading
                await self._reset(system, target, reading.state, attempt, before_send)
                while True:
                    await asyncio.sleep(self._poll_interval)
                    system = await self._read_system(attempt)
                    reading = self._reading(system)
                    attempt.last_raw = reading.raw_state
                    if reading.state == target:
                        return dataclasses.replace(reading, reset_sent=True)
        except _Withheld as exc:
            detail = f"{exc.reset_type} not sent: {exc.why}"
            held = self._unknown(detail, attempt.last_raw)
            return dataclasses.replace(held, withheld=exc.why)
        except _Failure as exc:
            return self._unknown(exc.detail, attempt.last_raw, sent=bool(attempt.sent))
        except TimeoutError:
            expired = attempt.expired(f"power {target} read back")
            return self._unknown(expired, attempt.last_raw, sent=bool(attempt.sent))

    async def _reset(
        self,
        system: dict[str, Any],
        target: Target,
        current: str,
        attempt: _Attempt,
        before_send: SendCheck | None = None,
    ) -> None:
        """Post the reset once, if ``before_send`` (asked after the read that took the time)
        lets it go. A refusal ends the call; a lost answer does not, because the action may
        have been carried out and only the read-back can tell."""
        action = (system.get("Actions") or {}).get(RESET_ACTION)
        if not isinstance(action, dict) or not isinstance(action.get("target"), str):
            raise _Failure(f"the system lists no {RESET_ACTION} action target", transient=False)
        allowed = action.get(ALLOWABLE)
        reset_type = choose_reset_type(
            allowed if isinstance(allowed, list) else None, target, current
        )
        path = self._same_origin(action["target"])
        if before_send is not None and (why := await before_send()):
            raise _Withheld(reset_type, why)
        attempt.sent = reset_type
        try:
            response = await self._request(
                "POST", path, {"ResetType": reset_type}, retry_auth=False
            )
        except _Failure as exc:
            if not exc.transient:
                raise
            attempt.last_error = f"{reset_type}: {exc.detail}"
            return
        if response.status not in (200, 202, 204):
            message = _message_of(response.body)
            raise _Failure(
                f"the BMC refused {reset_type} (HTTP {response.status}"
                + (f": {message})" if message else ")"),
                transient=False,
            )

    # ------------------------------------------------------------------ reads
    async def _read_system(self, attempt: _Attempt) -> dict[str, Any]:
        delay = min(0.2, self._poll_interval)
        while True:
            try:
                path = self._system or await self._discover()
                return await self._get_json(path)
            except _Failure as exc:
                if not exc.transient:
                    raise
                attempt.last_error = exc.detail
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._poll_interval)

    async def _discover(self) -> str:
        """The only ComputerSystem of the service. With several, guessing could power off the
        wrong machine, so the inventory has to name one."""
        collection = await self._get_json(SYSTEMS)
        members = [
            str(m["@odata.id"])
            for m in collection.get("Members") or []
            if isinstance(m, dict) and isinstance(m.get("@odata.id"), str)
        ]
        if len(members) != 1:
            listed = ", ".join(members[:5]) + (", ..." if len(members) > 5 else "")
            raise _Failure(
                f"{SYSTEMS} lists {len(members)} systems"
                + (f" ({listed})" if members else "")
                + "; name the system in the BMC inventory",
                transient=False,
            )
        self._system = self._same_origin(members[0])
        return self._system

    async def _get_json(self, path: str) -> dict[str, Any]:
        response = await self._request("GET", path, None, retry_auth=True)
        for _ in range(MAX_REDIRECTS):
            if response.status not in (301, 302, 303, 307, 308):
                break
            location = response.headers.get("Location", "")
            response = await self._request(
                "GET", self._same_origin(location), None, retry_auth=True
            )
        if response.status == 404:
            raise _Failure(f"{path} not found on the BMC (HTTP 404)", transient=False)
        if response.status != 200:
            raise _Failure(
                f"unexpected answer to GET {path}: HTTP {response.status}", transient=False
            )
        try:
            parsed = json.loads(response.body)
        except ValueError:
            raise _Failure(f"GET {path} did not answer JSON", transient=False) from None
        if not isinstance(parsed, dict):
            raise _Failure(f"GET {path} did not answer a JSON object", transient=False)
        return parsed

    def _reading(self, system: dict[str, Any]) -> PowerEvidence:
        raw = system.get("PowerState")
        if not isinstance(raw, str):
            return self._unknown("the system reports no PowerState")
        state = _STATES.get(raw, "unknown")
        detail = "" if state != "unknown" else f"the system reports PowerState {raw!r}"
        uuid = _uuid_of(system)
        identity = Reported(uuid, self.source) if uuid else None
        return PowerEvidence(state, self.source, detail, raw_state=raw, identity=identity)

    def _unknown(self, detail: str, raw: str = "", *, sent: bool = False) -> PowerEvidence:
        return PowerEvidence(
            "unknown", self.source, self._scrub(detail), raw_state=raw, reset_sent=sent
        )

    def _scrub(self, text: str) -> str:
        """Last line of defence: whatever a library put in a message, the password stays out."""
        secret = self._password.get_secret_value()
        return text.replace(secret, "***") if secret else text

    def _same_origin(self, reference: str) -> str:
        """A path on this BMC. A link to another host is refused: following it would hand the
        credentials to whoever the answer pointed at."""
        url = URL(reference)
        if url.is_absolute() and url.origin() != self._base:
            raise _Failure(f"the BMC points to another host ({url.origin()})", transient=False)
        if not url.path.startswith("/"):
            raise _Failure(f"the BMC answered an unusable link {reference!r}", transient=False)
        return url.path_qs

    # ---------------------------------------------------------------- transport
    async def _request(
        self, method: str, path: str, body: dict[str, Any] | None, *, retry_auth: bool
    ) -> _Response:
        http = self._client()
        if self._auth == "session" and self._token is None:
            await self._login(http)
        response = await self._send(http, method, path, body, self._headers())
        if response.status in (401, 403) and self._auth == "session" and retry_auth:
            # Sessions expire on the BMC's schedule; one fresh login, then the answer stands.
            self._token = None
            await self._login(http)
            response = await self._send(http, method, path, body, self._headers())
        if response.status == 401:
            raise _Failure("the BMC refused the configured credentials (HTTP 401)", transient=False)
        if response.status == 403:
            raise _Failure(
                f"the configured BMC user may not {method} {path} (HTTP 403)", transient=False
            )
        if response.status >= 500 or response.status == 429:
            raise _Failure(f"{method} {path}: HTTP {response.status}", transient=True)
        return response

    async def _login(self, http: aiohttp.ClientSession) -> None:
        async with self._login_lock:
            if self._token is not None:
                return
            credentials = {
                "UserName": self._username,
                "Password": self._password.get_secret_value(),
            }
            response = await self._send(http, "POST", SESSIONS, credentials, {})
            if response.status in (400, 401, 403):
                raise _Failure(
                    f"the BMC refused the configured credentials (HTTP {response.status} "
                    "creating a session)",
                    transient=False,
                )
            if response.status >= 500 or response.status == 429:
                raise _Failure(f"creating a session: HTTP {response.status}", transient=True)
            token = response.headers.get("X-Auth-Token")
            if response.status not in (200, 201) or not token:
                raise _Failure(
                    f"the BMC did not open a session (HTTP {response.status}, "
                    f"{'no' if not token else 'a'} X-Auth-Token); a BMC without sessions "
                    "needs auth: basic in the inventory",
                    transient=False,
                )
            location = response.headers.get("Location") or self._odata_id(response.body)
            self._session_uri = self._same_origin(location) if location else None
            self._token = SecretStr(token)

    @staticmethod
    def _odata_id(body: bytes) -> str:
        try:
            parsed = json.loads(body)
        except ValueError:
            return ""
        value = parsed.get("@odata.id") if isinstance(parsed, dict) else None
        return value if isinstance(value, str) else ""

    def _headers(self) -> dict[str, str]:
        if self._auth == "basic":
            pair = f"{self._username}:{self._password.get_secret_value()}".encode()
            return {"Authorization": "Basic " + base64.b64encode(pair).decode("ascii")}
        if self._token is not None:
            return {"X-Auth-Token": self._token.get_secret_value()}
        return {}

    def _client(self) -> aiohttp.ClientSession:
        if self._http is None:
            connector = aiohttp.TCPConnector(ssl=self._ssl(), limit=4)
            self._http = aiohttp.ClientSession(
                connector=connector,
                headers={"Accept": "application/json", "OData-Version": "4.0"},
            )
        return self._http

    def _ssl(self) -> ssl.SSLContext | bool:
        if self._base.scheme != "https":
            return True
        if self._insecure:
            return False
        return ssl.create_default_context(cafile=self._ca_file)

    async def _send(
        self,
        http: aiohttp.ClientSession,
        method: str,
        path: str,
        body: dict[str, Any] | None,
        headers: dict[str, str],
    ) -> _Response:
        url = self._base.join(URL(path))
        try:
            async with (
                asyncio.timeout(self._request_timeout),
                http.request(
                    method, url, json=body, headers=headers, allow_redirects=False
                ) as response,
            ):
                data = await _bounded(response.content.iter_chunked(65536))
                return _Response(response.status, dict(response.headers), data)
        except aiohttp.ClientConnectorCertificateError as exc:
            raise _Failure(
                f"the TLS certificate of {self._base.host} is not trusted: {exc.certificate_error}",
                transient=False,
            ) from None
        except aiohttp.ClientSSLError as exc:
            raise _Failure(
                f"TLS with {self._base.host} failed: {type(exc).__name__}", transient=False
            ) from None
        except aiohttp.ClientConnectorError as exc:
            reason = exc.os_error.strerror or type(exc.os_error).__name__
            raise _Failure(
                f"cannot connect to {self._base.host}:{self._base.port}: {reason}",
                transient=True,
            ) from None
        except aiohttp.ClientError as exc:
            raise _Failure(f"{method} {path}: {type(exc).__name__}", transient=True) from None
        except TimeoutError:
            raise _Failure(
                f"{method} {path}: no answer within {self._request_timeout:g}s", transient=True
            ) from None


async def _bounded(chunks: AsyncIterator[bytes]) -> bytes:
    data = bytearray()
    async for chunk in chunks:
        data += chunk
        if len(data) > MAX_BODY_BYTES:
            raise _Failure(f"the BMC's answer exceeds {MAX_BODY_BYTES} bytes", transient=False)
    return bytes(data)


def machine_key(host: str, port: str, system: str) -> str:
    """One Redfish system's machine key, however its entry (or a fence_redfish entry) spells
    the service and the system."""
    return f"redfish {machine_host(host)}:{port.strip()} {system.rstrip('/')}"


class Tls(Strict):
    ca_file: str | None = None
    # Turning verification off is a per-BMC decision someone wrote down, never a default.
    insecure: bool = False

    @field_validator("ca_file")
    @classmethod
    def _ca_exists(cls, value: str | None) -> str | None:
        if value is not None and not Path(value).is_file():
            raise ValueError(f"CA file {value} does not exist")
        return value


class RedfishBmc(BmcEntry):
    driver: Literal["redfish"]
    address: str
    system: str | None = None
    username: str = Field(min_length=1)
    password: SecretStr
    auth: Literal["session", "basic"] = "session"
    tls: Tls = Tls()

    @field_validator("address")
    @classmethod
    def _address(cls, value: str) -> str:
        base_url(value)
        return value

    def build(self) -> RedfishDriver:
        return RedfishDriver(
            self.address,
            username=self.username,
            password=self.password,
            system=self.system,
            auth=self.auth,
            ca_file=self.tls.ca_file,
            insecure=self.tls.insecure,
        )

    def target(self) -> str:
        system = system_path(self.system) if self.system else " (its only system)"
        return f"redfish {base_url(self.address)}{system}"

    def machine_keys(self) -> tuple[str, ...]:
        # A service's only system is left to discovery: the target already covers two such
        # entries on one service.
        if not self.system:
            return ()
        origin = base_url(self.address)
        return (machine_key(origin.host or "", str(origin.port), system_path(self.system)),)


# The inventory entry of this driver (``fencing.registry.entry_model``).
ENTRY = RedfishBmc
