"""socat terminating TLS in front of a plain-HTTP BMC on loopback (fence_redfish speaks only
HTTPS, and the simulator's Redfish BMCs speak HTTP), and fence_redfish's parameters for the
simulator's BMCs behind it: what every fence_redfish test against the simulator shares."""

from __future__ import annotations

import shutil
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from nodefence_sim.redfish import SYSTEMS, bmcs_of
from nodefence_sim.simulation import Simulation
from nodefence_sim.testing import SimulatorHandle

from .agents import wait_until
from .peers import Process, free_port, issue_server_cert, make_ca


@contextmanager
def tls_front(directory: Path, target_port: int) -> Iterator[int]:
    """The TLS port in front of ``target_port``; skips cleanly without socat."""
    if shutil.which("socat") is None:
        pytest.skip("socat is not installed (Debian package socat)")
    ca = make_ca(directory, "front")
    cert, key = issue_server_cert(directory, ca, "front")
    pem = directory / "front.pem"
    pem.write_text(cert.read_text() + key.read_text())
    port = free_port()
    process = Process(
        [
            "socat",
            f"OPENSSL-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork,cert={pem},verify=0",
            f"TCP:127.0.0.1:{target_port}",
        ],
        directory / "socat.log",
    )

    def listening() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            return False
        return True

    try:
        assert wait_until(listening), process.output()
        yield port
    finally:
        process.stop()


@pytest.fixture
def tls_bmc(tmp_path: Path, cluster: SimulatorHandle) -> Iterator[int]:
    """The TLS port in front of the ``cluster`` fixture's simulated Redfish BMCs."""
    with tls_front(tmp_path, int(cluster.url.rsplit(":", 1)[1])) as port:
        yield port


def sim_bmc_parameters(
    sim: Simulation, port: int, systems_uri: str = f"{SYSTEMS}/{{node}}"
) -> dict[str, str]:
    """fence_redfish's stdin parameters for the simulator's BMCs behind the front at ``port``:
    its credentials, no certificate check (the front's CA is a throwaway) and, by default, each
    node's own system through the inventory's ``{node}`` placeholder."""
    bmcs = bmcs_of(sim)
    return {
        "ip": "127.0.0.1",
        "ipport": str(port),
        "username": bmcs.username,
        "password": bmcs.password.get_secret_value(),
        "ssl_insecure": "1",
        "systems_uri": systems_uri,
    }
