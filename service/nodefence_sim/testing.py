"""Run a simulator for tests: in-process (``running_simulator``) or as a separate process
(``SimulatorProcess``), each with a kubeconfig that real clients can use."""

from __future__ import annotations

import contextlib
import os
import queue
import subprocess
import sys
import tempfile
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from nodefence_sim.faults import Faults, faults_of
from nodefence_sim.kubeconfig import write_kubeconfig
from nodefence_sim.server import LISTENING, simulation_from_scenario, start_server, stop_server
from nodefence_sim.simulation import Simulation


@dataclass(frozen=True)
class SimulatorHandle:
    url: str
    port: int
    kubeconfig: Path
    sim: Simulation

    @property
    def faults(self) -> Faults:
        return faults_of(self.sim)


@contextlib.asynccontextmanager
async def running_simulator(
    sim: Simulation | None = None, *, scenario: str | None = None
) -> AsyncIterator[SimulatorHandle]:
    """Start ``sim`` (or the named scenario, or an empty cluster) on a free loopback port."""
    if sim is not None and scenario is not None:
        raise ValueError("pass a Simulation or a scenario, not both")
    if sim is None:
        sim = simulation_from_scenario(scenario) if scenario is not None else Simulation()
    with tempfile.TemporaryDirectory(prefix="nodefence-sim-") as tmp:
        await sim.start()
        runner, port = await start_server(sim)
        try:
            url = f"http://127.0.0.1:{port}"
            path = write_kubeconfig(Path(tmp) / "kubeconfig", url)
            yield SimulatorHandle(url, port, path, sim)
        finally:
            await stop_server(sim, runner)


class SimulatorProcess:
    """``python -m nodefence simulate`` in a subprocess, for tests that need a separate server
    process (a client that blocks the event loop, or a server that must survive the test's)."""

    def __init__(
        self,
        scenario: str = "seed",
        *,
        k8s_version: str | None = None,
        startup_timeout: float = 30.0,
        env: dict[str, str] | None = None,
    ) -> None:
        self.scenario = scenario
        self.k8s_version = k8s_version
        self.startup_timeout = startup_timeout
        self.env = env
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.process: subprocess.Popen[str] | None = None
        self.url = ""
        self.port = 0
        self.kubeconfig = Path()

    def start(self) -> SimulatorProcess:
        self._tmp = tempfile.TemporaryDirectory(prefix="nodefence-simproc-")
        self.kubeconfig = Path(self._tmp.name) / "kubeconfig"
        command = [
            sys.executable,
            "-m",
            "nodefence",
            "simulate",
            "--port",
            "0",
            "--scenario",
            self.scenario,
            "--kubeconfig-out",
            str(self.kubeconfig),
        ]
        if self.k8s_version:
            command += ["--k8s-version", self.k8s_version]
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(self.env or {})},
        )
        lines: queue.Queue[str | None] = queue.Queue()
        stdout = self.process.stdout
        assert stdout is not None

        def read() -> None:
            for line in stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=read, daemon=True).start()
        while True:
            try:
                line = lines.get(timeout=self.startup_timeout)
            except queue.Empty:
                self.stop()
                raise TimeoutError("simulator did not report its port in time") from None
            if line is None:
                message = f"simulator exited during startup: {self._stderr()}"
                self.stop()
                raise RuntimeError(message)
            if line.startswith(LISTENING):
                self.url = line[len(LISTENING) :].strip()
                self.port = int(self.url.rsplit(":", 1)[1])
                return self

    def _stderr(self) -> str:
        if self.process is None or self.process.stderr is None:
            return ""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)
            return self.process.stderr.read()
        return ""

    def stop(self) -> int | None:
        """SIGTERM, then wait; returns the exit code."""
        code: int | None = None
        if self.process is not None:
            if self.process.poll() is None:
                self.process.terminate()
                try:
                    code = self.process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    code = self.process.wait()
            else:
                code = self.process.returncode
            for stream in (self.process.stdout, self.process.stderr):
                if stream is not None:
                    stream.close()
            self.process = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
        return code

    def __enter__(self) -> SimulatorProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
