"""Real processes on loopback for the end-to-end benchmarks and tests (``bench.recovery``,
``tests/e2e``): the simulated cluster, ``nodefence serve``, Prometheus and Alertmanager.

Every process writes to a file in the run's directory, never to a pipe, so a chatty process
cannot block on a full pipe buffer and its output is there to read when a run fails. Every wait
has a deadline, and every process started is stopped (SIGTERM to its process group, then
SIGKILL) however the run ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
TAIL_LINES = 150


# A directory shared by processes that pick ports at the same time (the test suite's parallel
# workers set it): each port handed out is claimed there by a file of its own.
PORT_CLAIMS = "NODEFENCE_PORT_CLAIMS"
PORT_ATTEMPTS = 1000


@contextlib.contextmanager
def closed_port() -> Iterator[int]:
    """A port on 127.0.0.1 that refuses connections until the block ends: bound and never
    listening, so no server started meanwhile (one binding port 0 included, which
    ``free_port``'s claims cannot keep away) takes it and answers."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield int(held.getsockname()[1])


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    """A port on 127.0.0.1 for servers that must be told theirs up front (Prometheus,
    Alertmanager, BMCs; ``SOCK_DGRAM`` for IPMI's UDP).

    The port is free when this returns and is bound only later, by the server told it; where
    ``NODEFENCE_PORT_CLAIMS`` names a directory, a port another process already handed out in
    that window (or any earlier) is never handed out again."""
    claims = os.environ.get(PORT_CLAIMS)
    for _ in range(PORT_ATTEMPTS):
        with socket.socket(socket.AF_INET, kind) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if not claims or _claim(Path(claims) / f"{kind}-{port}"):
            return port
    raise RuntimeError(f"no port left unclaimed in {claims} after {PORT_ATTEMPTS} attempts")


def _claim(path: Path) -> bool:
    try:
        path.touch(exist_ok=False)
    except FileExistsError:
        return False
    return True


def eventually(
    probe: Callable[[], T], *, within: float, interval: float = 0.2, what: str = "condition"
) -> T:
    """Poll ``probe`` until it returns something truthy; at the deadline fail with its last
    value, so the failure says what was seen instead of only that time ran out."""
    deadline = time.monotonic() + within
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not met within {within:.0f}s (last value {value!r})")
        time.sleep(interval)


def http(
    method: str,
    url: str,
    body: Any = None,
    *,
    headers: Mapping[str, str] | None = None,
    timeout: float = 5.0,
) -> tuple[int, bytes]:
    """One request; error statuses are returned, and a refused connection is status 0, so a
    poller treats "not up yet" like any other unready answer."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)  # noqa: S310 - loopback
    request.add_header("Content-Type", "application/json")
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            return int(response.status), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0, b""


def get_json(url: str) -> Any:
    status, body = http("GET", url)
    if status != 200:
        raise RuntimeError(f"GET {url} -> {status}: {body[:300]!r}")
    return json.loads(body)


@dataclass
class Process:
    name: str
    argv: list[str]
    log: Path
    popen: subprocess.Popen[bytes]

    def alive(self) -> bool:
        return self.popen.poll() is None

    def output(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, grace: float = 10.0) -> None:
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(timeout=grace)


@dataclass
class Processes:
    """The processes of one run, stopped in reverse order of start by :meth:`stop_all`."""

    workdir: Path
    started: list[Process] = field(default_factory=list)

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> Process:
        log = self.workdir / f"{name}.log"
        with log.open("wb") as sink:
            popen = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
                cwd=cwd or self.workdir,
                # Its own process group, so stopping it also stops anything it started.
                start_new_session=True,
            )
        process = Process(name, list(argv), log, popen)
        self.started.append(process)
        return process

    def wait_ready(self, process: Process, url: str, *, within: float = 60.0) -> None:
        """Poll ``url`` until it answers 200; fail early if the process has exited."""

        def ready() -> bool:
            if not process.alive():
                raise RuntimeError(
                    f"{process.name} exited with {process.popen.returncode} during startup:\n"
                    + tail(process.output())
                )
            return http("GET", url, timeout=2)[0] == 200

        eventually(ready, within=within, what=f"{process.name} ready at {url}")

    def stop_all(self) -> None:
        for process in reversed(self.started):
            process.stop()

    def report(self) -> str:
        """Each process's state and the tail of its output, for a failure message."""
        parts = []
        for process in self.started:
            state = "running" if process.alive() else f"exit {process.popen.returncode}"
            header = f"===== {process.name} ({state}): {' '.join(process.argv)}"
            parts.append(f"{header}\n{tail(process.output())}")
        return "\n".join(parts)


def tail(text: str, lines: int = TAIL_LINES) -> str:
    return "\n".join(text.splitlines()[-lines:])


@contextlib.contextmanager
def processes(workdir: Path) -> Iterator[Processes]:
    group = Processes(workdir)
    try:
        yield group
    finally:
        group.stop_all()
