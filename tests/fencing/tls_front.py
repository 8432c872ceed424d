"""socat terminating TLS in front of a plain-HTTP BMC on loopback (fence_redfish speaks only
HTTPS, and the simulator's Redfish BMCs speak HTTP)."""

from __future__ import annotations

import shutil
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

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
