"""``nodefence serve`` as a process with NODEFENCE_TLS_CERT_FILE and NODEFENCE_TLS_KEY_FILE on a
Secret volume: it answers HTTPS, serves a renewed certificate without a restart, and closes a
connection that drips its headers over TLS at NODEFENCE_HEADER_TIMEOUT_SECONDS."""

from __future__ import annotations

import contextlib
import socket
import ssl
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from bench.processes import Process, Processes, eventually, free_port, http, processes
from http_support import TOKEN
from tests.e2e.harness import INFERENCE_POLICY, start_simulator
from tls_support import SecretVolume, TestCA, served_fingerprint

DEADLINE = 60.0


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Processes]:
    with processes(tmp_path) as group:
        yield group


def _https_status(url: str, context: ssl.SSLContext) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5, context=context) as response:  # noqa: S310
            return int(response.status)
    except (OSError, ssl.SSLError):
        return 0


def _closed_by_server(tls: ssl.SSLSocket) -> bool:
    """Blocks until the server closes the connection (end of stream or a reset), or fails at
    the socket's deadline."""
    try:
        return tls.recv(65536) == b""
    except (ConnectionResetError, ssl.SSLEOFError):
        return True


def _start_serve(procs: Processes, volume: SecretVolume) -> tuple[Process, int]:
    sim = start_simulator(procs)
    port = free_port()
    env = {
        "PORT": str(port),
        "NODEFENCE_HOST": "127.0.0.1",
        "NODEFENCE_ALERT_TOKEN": TOKEN,
        "KUBECONFIG": str(sim.kubeconfig),
        "NODEFENCE_NAMESPACE": "nodefence",
        "NODEFENCE_LOG_FORMAT": "json",
        "NODEFENCE_POLICY_FILE": str(INFERENCE_POLICY),
        "NODEFENCE_RECONCILE_INTERVAL": "0",
        "NODEFENCE_FENCING_PROBE_INTERVAL": "0",
        "NODEFENCE_TLS_CERT_FILE": str(volume.cert),
        "NODEFENCE_TLS_KEY_FILE": str(volume.key),
        "NODEFENCE_HEADER_TIMEOUT_SECONDS": "1",
    }
    process = procs.start("nodefence", [sys.executable, "-m", "nodefence", "serve"], env=env)
    return process, port


def test_serve_answers_https_serves_a_renewal_and_closes_slow_headers(
    procs: Processes, tmp_path: Path
) -> None:
    ca = TestCA(tmp_path / "ca")
    volume = SecretVolume(tmp_path / "tls")
    first = ca.issue()
    volume.publish(first.cert_pem, first.key_pem)
    process, port = _start_serve(procs, volume)
    base = f"https://127.0.0.1:{port}"
    context = ca.client_context()

    def ready() -> bool:
        if not process.alive():
            raise AssertionError(f"nodefence serve exited:\n{process.output()[-3000:]}")
        return _https_status(f"{base}/readyz", context) == 200

    eventually(ready, within=DEADLINE, what="nodefence serve ready over HTTPS")
    assert served_fingerprint(port, context) == first.fingerprint
    # Plain HTTP to the same port gets no answer: the token never crosses in clear.
    assert http("GET", f"http://127.0.0.1:{port}/healthz")[0] != 200

    renewed = ca.issue()
    volume.publish(renewed.cert_pem, renewed.key_pem)
    assert served_fingerprint(port, context) == renewed.fingerprint
    assert _https_status(f"{base}/healthz", context) == 200
    assert process.alive()

    # Slowloris over TLS: handshake done, then a header line every 0.2 s, never the last one.
    slow = []
    for _ in range(10):
        raw = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE)
        tls = context.wrap_socket(raw, server_hostname="127.0.0.1")
        tls.sendall(b"POST /alerts HTTP/1.1\r\nHost: nodefence\r\n")
        slow.append(tls)
    stop = threading.Event()

    def drip() -> None:
        line = 0
        while not stop.wait(0.2):
            line += 1
            for tls in slow:
                with contextlib.suppress(OSError):
                    tls.sendall(f"X-Drip-{line}: {line}\r\n".encode())

    dripper = threading.Thread(target=drip, daemon=True)
    dripper.start()
    try:
        for tls in slow:
            assert _closed_by_server(tls)
    finally:
        stop.set()
        dripper.join(timeout=10)
        for tls in slow:
            tls.close()
    assert "connection_closed_headers_timeout" in process.output()
    assert _https_status(f"{base}/healthz", context) == 200
