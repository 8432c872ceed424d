"""A ClusterLabs fence agent (Debian's ``fence-agents``) as a power driver.

Fence agents take their options as ``key=value`` lines on standard input (FenceAgentAPI), which
is the only way they get them here: a command line and an environment are readable by every
process on the host through ``/proc``. Each run is its own process group, so the agent and
anything it started (``ipmitool``, ``curl``) are killed together at the deadline; a process-wide
bound keeps an incident touching many nodes from forking hundreds of agents at once.

Only a separate ``action=status`` run exiting 2 is proof of Off. The ``off`` action's own exit
code or its "Success: Powered OFF" is not: agents report success once the request was accepted,
and some once their own poll timed out. Exit 0 of ``status`` is On, 1 an error, anything else an
answer nobody understands. nodefence never asks an agent to ``reboot``: that action reports
success after the off half, and the policy's ``reboot`` is off, proof, taint, purge, on.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import re
import shutil
import signal
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO, Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator

from nodefence.engine.evidence import PowerEvidence
from nodefence.engine.identity import PLUG, UNCHECKED, Reported, agent_name
from nodefence.fencing.drivers import fence_agent_identity as agent_identity
from nodefence.fencing.drivers import ipmi, redfish
from nodefence.fencing.drivers.fence_agent_metadata import SAFE_PATH, ParameterValue, agent_options
from nodefence.fencing.model import MASK, BmcEntry, SendCheck

# Output beyond this is read and dropped, so that a chatty agent cannot fill memory or a pipe.
MAX_OUTPUT_BYTES = 16 * 1024
MAX_DETAIL_CHARS = 300
READ_GRACE_SECONDS = 1.0
DEFAULT_CONCURRENCY = 8
# Workload-identity settings the cloud agents' SDKs read (a role to assume, the path of a token
# the kubelet projects): no secret in themselves, and the way to run fence_aws, fence_azure_arm
# or fence_gce without a long-lived key in the inventory. Nothing else of nodefence's own
# environment (its tokens, its kubeconfig) reaches an agent.
PASSED_ENVIRONMENT = (
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_STS_REGIONAL_ENDPOINTS",
    "AZURE_CLIENT_ID",
    "AZURE_TENANT_ID",
    "AZURE_FEDERATED_TOKEN_FILE",
    "AZURE_AUTHORITY_HOST",
    "GOOGLE_APPLICATION_CREDENTIALS",
)
# Keys whose values are credentials; every value of theirs is scrubbed from any output. The
# agents' metadata names them password, passwd, password_script, snmp_priv_passwd, community,
# access_key, secret_key, apikey, token, token_file, key (fence_scsi's reservation key) and
# hexadecimal_kg (the IPMI Kg), with "-" for "_" in their long options; "key" and "kg" anywhere
# in a name keep a spelling not listed here (api-key, ssh_key, kg) a secret too.
SECRET_KEY = re.compile(
    r"passw|secret|token|key|community|priv|credential|(?:^|[-_])kg(?:$|[-_])", re.IGNORECASE
)
# Options that name the machine, shown as the driver's target (never a secret), under the
# canonical names the inventory gives every spelling (``fence_agent_metadata``).
TARGET_KEYS = (
    "ip",
    "ipport",
    "systems_uri",
    "plug",
    "region",
    "zone",
    "project",
    "resourceGroup",
    "namespace",
    "auth_url",
)
STATUS_ON = 0
STATUS_ERROR = 1
STATUS_OFF = 2
# Python's warnings about the agent's own imports (and the source line they quote) and the
# logging timestamp say nothing about the machine.
_NOISE = re.compile(r"Warning: |^\s+from \S+ import |^\s+import ")
_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ ")
_STATUS_TEXT = re.compile(r"^Status:\s*(ON|OFF)\b", re.IGNORECASE | re.MULTILINE)

Target = Literal["on", "off"]


def is_secret_key(key: str) -> bool:
    """Whether a parameter's value is a credential, kept as ``SecretStr`` and masked in every
    output; wrongly masking a value costs a less helpful message, wrongly showing one a leak."""
    return SECRET_KEY.search(key) is not None


_LIMITS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


def _limit() -> asyncio.Semaphore:
    """The bound on agents running at once: ``serve`` runs one event loop, so one bound for the
    process; kept per loop because a semaphore belongs to the loop that first waits on it."""
    loop = asyncio.get_running_loop()
    semaphore = _LIMITS.get(loop)
    if semaphore is None:
        semaphore = asyncio.Semaphore(DEFAULT_CONCURRENCY)
        _LIMITS[loop] = semaphore
    return semaphore


@dataclass(frozen=True)
class AgentRun:
    """One finished (or killed) run of an agent; ``output`` is already scrubbed and bounded."""

    action: str
    exit_code: int | None
    output: str
    killed: bool = False
    failed_to_start: str = ""
    # The whole output, scrubbed but not shortened, for an action whose answer is its output
    # (``list``); ``truncated`` when the agent printed more than the run kept.
    text: str = ""
    truncated: bool = False


class FenceAgentDriver:
    """One machine behind one fence agent and its parameters."""

    def __init__(
        self,
        agent: str,
        parameters: Mapping[str, ParameterValue],
        *,
        poll_interval: float = 1.0,
        identity: str | None = None,
    ) -> None:
        self._agent = agent
        self._parameters = dict(parameters)
        # The inventory's ``identity``: stated, it is checked against the agent's own list.
        self._stated = (identity or "").strip()
        self._poll_interval = poll_interval
        self._secrets = sorted(
            {
                value.get_secret_value()
                for value in self._parameters.values()
                if isinstance(value, SecretStr) and value.get_secret_value()
            },
            key=len,
            reverse=True,
        )

    @property
    def agent(self) -> str:
        return self._agent

    @property
    def target(self) -> str:
        """Where the agent points, without a credential: ``ip=... plug=...``."""
        shown = [
            f"{key}={value}"
            for key in TARGET_KEYS
            if isinstance(value := self._parameters.get(key), str)
        ]
        return " ".join(shown)

    @property
    def source(self) -> str:
        name = os.path.basename(self._agent)
        return f"fence-agent {name} {self.target}".rstrip()

    @property
    def parameters(self) -> Mapping[str, ParameterValue]:
        return self._parameters

    @property
    def scope(self) -> str:
        """Where a plug is one machine's name: the agent and where it points, but its plug."""
        shown = [
            f"{key}={value}"
            for key in TARGET_KEYS
            if key != "plug" and isinstance(value := self._parameters.get(key), str)
        ]
        return " ".join([os.path.basename(self._agent), *shown])

    # ------------------------------------------------------------------ public
    async def status(self, timeout: float) -> PowerEvidence:  # noqa: ASYNC109
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        return self._reading(await self.run("status", deadline))

    async def power_off(
        self,
        timeout: float,  # noqa: ASYNC109
        *,
        before_send: SendCheck | None = None,
    ) -> PowerEvidence:
        return await self._power("off", timeout, before_send)

    async def power_on(
        self,
        timeout: float,  # noqa: ASYNC109
        *,
        before_send: SendCheck | None = None,
    ) -> PowerEvidence:
        return await self._power("on", timeout, before_send)

    async def identity(self, timeout: float) -> Reported:  # noqa: ASYNC109
        """Which machine the agent acts on (``fence_agent_identity``): the system UUID read
        through fence_redfish's or fence_ipmilan's own BMC; with an ``identity`` stated in the
        inventory, the plug as the agent's own ``list`` shows it; otherwise its ``plug`` (the
        canonical name of ``port`` too), compared with the instance in the Node's providerID
        (``engine.identity.expected_plug``). An agent given no plug names no machine."""
        if agent_identity.reads_machine_uuid(self._agent):
            return await agent_identity.read_machine_uuid(
                self._agent, self._parameters, self.source, timeout
            )
        plug = agent_identity.text_option(self._parameters, "plug")
        if self._stated and self._stated.lower() != UNCHECKED:
            return await _read_listed(self, plug, timeout)
        if plug:
            return Reported(plug, self.source, basis=PLUG, agent=self._agent)
        return Reported(
            "",
            self.source,
            basis=PLUG,
            agent=self._agent,
            detail="the agent is given no plug, so it names no machine (set identity in the "
            "BMC inventory, or identity: unchecked where none can be read)",
        )

    async def close(self) -> None:
        """Nothing stays open between runs: every run's process group is gone when it returns."""

    # ------------------------------------------------------------------ runs
    async def run(
        self, action: str, deadline: float, *, max_output: int = MAX_OUTPUT_BYTES
    ) -> AgentRun:
        """Run the agent once with ``action`` and the parameters on stdin, until it exits or
        the loop's clock reaches ``deadline`` (then its whole process group is killed); at most
        ``max_output`` bytes of what it prints are kept."""
        try:
            async with asyncio.timeout_at(deadline):
                await _limit().acquire()
        except TimeoutError:
            busy = (
                f"not run: no time left, or no free slot among the {DEFAULT_CONCURRENCY} agents "
                "already running"
            )
            return AgentRun(action, None, "", killed=True, failed_to_start=busy)
        try:
            return await self._run_one(action, deadline, max_output)
        finally:
            _limit().release()

    async def _run_one(self, action: str, deadline: float, max_output: int) -> AgentRun:
        # Both pipes are made here rather than by asyncio: a process's wait() would otherwise
        # also wait for every holder of its stdout (a helper the agent left running) to close.
        # The request is a few hundred bytes, far below a pipe's buffer, so it is written
        # whole before the agent starts and the agent reads it, then end of file.
        stdin_read, stdin_write = os.pipe()
        out_read, out_write = os.pipe()
        try:
            os.write(stdin_write, self._stdin(action))
        finally:
            os.close(stdin_write)
        try:
            process = await asyncio.create_subprocess_exec(
                self._agent,
                stdin=stdin_read,
                stdout=out_write,
                stderr=out_write,
                start_new_session=True,
                env=_environment(),
                close_fds=True,
            )
        except OSError as exc:
            os.close(out_read)
            return AgentRun(
                action, None, "", failed_to_start=f"cannot run {self._agent}: {exc.strerror}"
            )
        finally:
            os.close(stdin_read)
            os.close(out_write)
        collected = bytearray()
        dropped: list[int] = []
        reader = asyncio.create_task(
            _drain(os.fdopen(out_read, "rb", buffering=0), collected, max_output, dropped)
        )
        killed = False
        try:
            async with asyncio.timeout_at(deadline):
                await process.wait()
        except TimeoutError:
            killed = True
        finally:
            # Whatever the agent started goes with its session, at the deadline or after a
            # normal exit; a helper holding the pipe would otherwise keep the reader waiting.
            _kill_session(process.pid)
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await asyncio.shield(process.wait())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(READ_GRACE_SECONDS):
                    await asyncio.shield(reader)
            reader.cancel()
        code = None if killed else process.returncode
        raw = bytes(collected)
        return AgentRun(
            action,
            code,
            self.scrub(raw, cut=bool(dropped)),
            killed=killed,
            text=self._masked(raw, cut=bool(dropped)),
            truncated=bool(dropped),
        )

    def _stdin(self, action: str) -> bytes:
        lines = [f"action={action}"]
        for key, value in self._parameters.items():
            text = value.get_secret_value() if isinstance(value, SecretStr) else value
            lines.append(f"{key}={text}")
        return ("\n".join(lines) + "\n").encode()

    def scrub(self, raw: bytes, *, cut: bool = False) -> str:
        """The agent's output with every secret parameter's value masked, shortened to its last
        lines (where agents say what failed). ``cut``: the output was cut at the read limit."""
        text = self._masked(raw, cut=cut)
        lines = [
            _TIMESTAMP.sub("", line.strip())
            for line in text.splitlines()
            if line.strip() and not _NOISE.search(line)
        ]
        joined = " | ".join(lines)
        if len(joined) > MAX_DETAIL_CHARS:
            joined = "..." + joined[-MAX_DETAIL_CHARS:]
        return joined

    def _masked(self, raw: bytes, *, cut: bool = False) -> str:
        """``raw`` with every secret masked, as bytes before decoding (a secret cut in the
        middle of a character still matches). Output cut at the read limit may end in the first
        part of a secret: that part is masked too, so no cut shows a secret's beginning."""
        for secret in self._secrets:
            raw = raw.replace(secret.encode(), MASK.encode())
        if cut:
            raw = _mask_cut_secret(raw, self._secrets)
        return raw.decode("utf-8", errors="replace")

    # ------------------------------------------------------------------ readings
    def _reading(self, run: AgentRun) -> PowerEvidence:
        said = f": {run.output}" if run.output else ""
        if run.failed_to_start:
            return self._unknown(run.failed_to_start)
        if run.killed:
            return self._unknown(f"{self._name} {run.action} did not finish in time; killed{said}")
        # Proof is a positive statement: fencing.py's status action prints "Status: ON" or
        # "Status: OFF" and exits 0 or 2 to match. An exit code alone is no reading: a wrapper
        # whose program is gone, or a usage error, also exits 2.
        text = _STATUS_TEXT.search(run.output)
        reported = text.group(1).upper() if text else ""
        if run.exit_code == STATUS_OFF:
            if reported == "OFF":
                return PowerEvidence("off", self.source, raw_state="Status: OFF")
            return self._unknown(
                f"{self._name} status exited 2 (off) without printing Status: OFF{said}", "?"
            )
        if run.exit_code == STATUS_ON:
            if reported == "ON":
                return PowerEvidence("on", self.source, raw_state="Status: ON")
            return self._unknown(
                f"{self._name} status exited 0 (on) without printing Status: ON{said}", "?"
            )
        if run.exit_code == STATUS_ERROR:
            return self._unknown(f"{self._name} status failed (exit 1){said}")
        return self._unknown(
            f"{self._name} status exited {run.exit_code}, which the fence agent API does not "
            f"define{said}",
            f"exit {run.exit_code}",
        )

    async def _power(
        self, target: Target, seconds: float, before_send: SendCheck | None = None
    ) -> PowerEvidence:
        """Read; send ``target`` once if the machine is not there yet and ``before_send``
        lets it go; then read ``status`` again until it reports ``target`` or the time is up.
        The action's own answer only explains a failure; it never stands for the state."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        # The action is sent only to a machine whose state the agent can read: without a
        # status there is no proof to be had, and an attempt that sent nothing can be let go
        # at once (its claim released) instead of being waited out.
        first = loop.time() + seconds / 2
        while True:
            reading = self._reading(await self.run("status", deadline))
            if reading.state == target:
                return reading
            if reading.state != "unknown":
                break
            if loop.time() + self._poll_interval >= first:
                return self._unknown(
                    f"{target} not sent: the agent cannot read the power state ({reading.detail})",
                    reading.raw_state,
                )
            await asyncio.sleep(self._poll_interval)
        # The status runs may have taken long: the claim is asked again right before the run.
        if before_send is not None and (why := await before_send()):
            held = self._unknown(f"{target} not sent: {why}", reading.raw_state)
            return dataclasses.replace(held, withheld=why)
        answer = self._answer(await self.run(target, deadline))
        # The last status run to finish says what the machine did; one cut off by the deadline
        # would only say that time ran out.
        said = reading
        while True:
            run = await self.run("status", deadline)
            reading = self._reading(run)
            if reading.state == target:
                return dataclasses.replace(reading, reset_sent=True)
            if not run.killed:
                said = reading
            if loop.time() + self._poll_interval >= deadline:
                break
            await asyncio.sleep(self._poll_interval)
        now = said.raw_state or said.state
        detail = f"sent {target} ({answer}); status still reports {now} after {seconds:g}s" + (
            f" ({said.detail})" if said.detail else ""
        )
        return dataclasses.replace(self._unknown(detail, said.raw_state), reset_sent=True)

    def _answer(self, run: AgentRun) -> str:
        if run.failed_to_start:
            return run.failed_to_start
        if run.killed:
            return f"{self._name} {run.action} did not finish in time; killed"
        said = f": {run.output}" if run.output else ""
        return f"{self._name} {run.action} exited {run.exit_code}{said}"

    @property
    def _name(self) -> str:
        return os.path.basename(self._agent)

    def _unknown(self, detail: str, raw: str = "") -> PowerEvidence:
        return PowerEvidence("unknown", self.source, detail, raw_state=raw)


async def _drain(
    pipe: BinaryIO, into: bytearray, limit: int = MAX_OUTPUT_BYTES, dropped: list[int] | None = None
) -> None:
    """Reads the agent's output into ``into`` (at most ``limit`` bytes, the rest dropped and
    counted in ``dropped``) until end of file; the pipe is closed however this ends, even
    cancelled before it began."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    try:
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), pipe
        )
    except BaseException:
        pipe.close()
        raise
    try:
        while chunk := await reader.read(4096):
            room = limit - len(into)
            if room > 0:
                into.extend(chunk[:room])
            if len(chunk) > room and dropped is not None:
                dropped.append(len(chunk) - max(room, 0))
    finally:
        transport.close()


def _environment() -> dict[str, str]:
    env = {"PATH": SAFE_PATH, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    env.update({key: os.environ[key] for key in PASSED_ENVIRONMENT if key in os.environ})
    return env


def _mask_cut_secret(raw: bytes, secrets: list[str]) -> bytes:
    """``raw`` with a trailing first part of any secret (the rest cut off) masked."""
    for secret in secrets:
        encoded = secret.encode()
        for length in range(len(encoded) - 1, 0, -1):
            if raw.endswith(encoded[:length]):
                return raw[:-length] + MASK.encode()
    return raw


def _kill_session(sid: int) -> None:
    """Kill every process of the session the agent led: its own group, and the groups a helper
    it started in the session made for itself (a shell's background job, a daemon's child)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(sid, signal.SIGKILL)
    for pid in _session_members(sid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _session_members(sid: int) -> list[int]:
    """The processes whose session is ``sid``, from ``/proc/<pid>/stat`` (its sixth field)."""
    members = []
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as stat:
                    fields = stat.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            if len(fields) > 3 and int(fields[3]) == sid:
                members.append(int(entry.name))
    return members


async def _read_listed(driver: FenceAgentDriver, plug: str, timeout: float) -> Reported:  # noqa: ASYNC109
    """The agent's own ``list``, looked up for the plug it is given: the plug (and its alias)
    as the agent lists it, or empty with why not."""
    name = agent_name(driver.agent)
    scope = driver.scope
    if not plug:
        return Reported(
            "",
            driver.source,
            basis=PLUG,
            agent=driver.agent,
            scope=scope,
            detail=f"{name} is given no plug, so its list cannot show which machine it acts on",
        )
    deadline = asyncio.get_running_loop().time() + timeout
    run = await driver.run("list", deadline, max_output=agent_identity.MAX_LIST_BYTES)
    failed = ""
    if run.failed_to_start:
        failed = run.failed_to_start
    elif run.killed:
        failed = f"{name} list did not finish in {timeout:g}s; killed"
    elif run.exit_code != 0:
        said = f": {run.output}" if run.output else ""
        failed = f"{name} list failed (exit {run.exit_code}){said}"
    if failed:
        return Reported(
            "", driver.source, basis=PLUG, agent=driver.agent, scope=scope, detail=failed
        )
    separator = (
        agent_identity.text_option(driver.parameters, "separator") or agent_identity.LIST_SEPARATOR
    )
    listed = agent_identity.parse_list(run.text, separator)
    if plug not in listed:
        cut = " (its output was cut at the size limit)" if run.truncated else ""
        return Reported(
            "",
            driver.source,
            basis=PLUG,
            agent=driver.agent,
            scope=scope,
            detail=f"{name} list does not include plug {plug} ({len(listed)} listed){cut}",
        )
    alias = listed[plug]
    return Reported(
        plug,
        f"{driver.source} (its list)",
        basis=PLUG,
        agent=driver.agent,
        aliases=(alias,) if alias else (),
        scope=scope,
    )


_PARAMETER_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
# By canonical name: nodefence chooses the action; the debug and verbose options would make an
# agent write its exchange (with the credentials) to a file or the output, and port_as_ip would
# make it act on the address in plug instead of the ip nodefence reads the machine through.
_RESERVED_PARAMETERS = frozenset({"action", "debug_file", "verbose", "verbose_level", "port_as_ip"})
MAX_PARAMETERS_BYTES = 16 * 1024


class FenceAgentBmc(BmcEntry):
    """A ClusterLabs fence agent and the ``key=value`` lines it reads on stdin, each option under
    its canonical name (``fence_agent_metadata``), so that what nodefence checks is what the
    agent reads. Values whose key names a credential (``password``, ``secret_key``, ...) are
    ``SecretStr``."""

    driver: Literal["fence-agent"]
    agent: str = Field(min_length=1)
    parameters: dict[str, ParameterValue] = {}

    @field_validator("agent")
    @classmethod
    def _agent_runs(cls, value: str) -> str:
        return resolve_agent(value)

    @field_validator("parameters", mode="before")
    @classmethod
    def _parameters(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            raise ValueError("parameters must be a mapping of the agent's keys to strings")  # noqa: TRY004 - pydantic reports ValueError
        checked: dict[str, ParameterValue] = {}
        size = 0
        for key, item in value.items():
            if not isinstance(key, str) or not _PARAMETER_KEY.match(key):
                raise ValueError(f"parameter name {key!r} is not a fence agent option name")
            secret = is_secret_key(key)
            text = item.get_secret_value() if isinstance(item, SecretStr) else item
            if not isinstance(text, str):
                shown = "a value" if secret else repr(item)
                raise ValueError(f"parameter {key}: values are strings (quote {shown})")  # noqa: TRY004 - pydantic reports ValueError
            if any(c in text for c in "\n\r\0"):
                # A line break would smuggle another key (action=...) into the agent's input.
                raise ValueError(f"parameter {key}: a value may not contain a line break")
            size += len(key) + len(text) + 2
            checked[key] = SecretStr(text) if secret else text
        if size > MAX_PARAMETERS_BYTES:
            raise ValueError(f"parameters longer than {MAX_PARAMETERS_BYTES} bytes")
        return checked

    @field_validator("parameters")
    @classmethod
    def _canonical(
        cls, value: dict[str, ParameterValue], info: ValidationInfo
    ) -> dict[str, ParameterValue]:
        agent = info.data.get("agent")
        if not isinstance(agent, str):
            # The agent's own error is reported; its options cannot be known.
            return value
        canonical = agent_options(agent).normalise(value)
        reserved = sorted(
            f"{key} ({name})" if key != name else key
            for key, name in zip(value, canonical, strict=True)
            if name in _RESERVED_PARAMETERS
        )
        if reserved:
            raise ValueError(
                f"parameter {', '.join(reserved)} is not allowed (nodefence sets the action "
                "and reads the machine at ip; the agent's debug output would carry credentials)"
            )
        if "hexadecimal_kg" in canonical and os.path.basename(agent) in agent_identity.IPMI_AGENTS:
            raise ValueError(
                f"{os.path.basename(agent)} passes hexadecimal_kg to ipmitool as -y on its "
                "command line, readable by every process on the host for the whole run; give "
                "this node driver: ipmi with kg (nodefence's own IPMI client keeps it in memory)"
            )
        return {
            key: SecretStr(item) if isinstance(item, str) and is_secret_key(key) else item
            for key, item in canonical.items()
        }

    def build(self) -> FenceAgentDriver:
        return FenceAgentDriver(self.agent, self.parameters, identity=self.identity)

    def target(self) -> str:
        picked = [
            f"{key}={value.strip()}"
            for key in TARGET_KEYS
            if isinstance(value := self.parameters.get(key), str)
        ]
        return " ".join([f"fence-agent {self.agent}", *picked])

    def machine_keys(self) -> tuple[str, ...]:
        """fence_redfish and fence_ipmilan (and its copies) reach a Redfish system or an IPMI
        BMC, keyed as a native entry of that driver is; any other agent its plug, within the
        options that scope it (a region, a project)."""
        name = agent_name(self.agent)
        options = self.parameters
        if name in agent_identity.REDFISH_AGENTS:
            host, port, system = agent_identity.redfish_endpoint(options)
            return (redfish.machine_key(host, port, system),) if system else ()
        if name in agent_identity.IPMI_AGENTS:
            host, port = agent_identity.ipmi_endpoint(options)
            target = agent_identity.text_option(options, "target")
            return (ipmi.machine_key(host, port, target),)
        plug = agent_identity.text_option(options, "plug")
        if not plug:
            return ()
        names = sorted(set(TARGET_KEYS) - {"plug"})
        picked = [
            f"{key}={value}" for key in names if (value := agent_identity.text_option(options, key))
        ]
        return (" ".join([f"agent {name}", *picked, f"plug={plug}"]),)

    def reads_uuid(self) -> bool:
        return agent_identity.reads_machine_uuid(self.agent)

    def problems(self, node: str) -> list[str]:
        return agent_identity.entry_problems(node, self.agent, self.parameters, self.identity)

    @classmethod
    def canonical_option(cls, entry: Mapping[str, Any]) -> Callable[[str], str | None] | None:
        """The agent's own spellings of its options, or ``None`` where validation will name
        what is wrong with the agent."""
        agent = entry.get("agent")
        if not isinstance(agent, str):
            return None
        try:
            return agent_options(resolve_agent(agent)).canonical
        except ValueError:
            return None


def resolve_agent(agent: str) -> str:
    """The agent's absolute path: a configuration error now rather than during an outage."""
    if os.path.isabs(agent):
        if not (os.path.isfile(agent) and os.access(agent, os.X_OK)):
            raise ValueError(f"fence agent {agent} does not exist or is not executable")
        return agent
    if "/" in agent:
        raise ValueError(f"fence agent {agent!r}: give a name on PATH or an absolute path")
    found = shutil.which(agent, path=_agent_path())
    if found is None:
        raise ValueError(
            f"fence agent {agent} is not installed (not on PATH; Debian package fence-agents)"
        )
    return found


def _agent_path() -> str:
    # Debian installs the agents in /usr/sbin, which a non-root PATH often lacks.
    return os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/local/sbin"])


# The inventory entry of this driver (``fencing.registry.entry_model``).
ENTRY = FenceAgentBmc
