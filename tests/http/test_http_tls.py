"""The webhook over TLS: NODEFENCE_TLS_CERT_FILE and NODEFENCE_TLS_KEY_FILE, served by the real
listener (``http.app.run``), and a renewal served by the next handshake without a restart while
a request in flight on the old certificate is still answered."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import pytest
from bench.processes import free_port
from http_support import TOKEN, RecordingPipeline, bearer, load_payload, make_settings
from tls_support import SecretVolume, TestCA, served_fingerprint_async

from nodefence.errors import ConfigError
from nodefence.http.app import run
from nodefence.observability.metrics import Metrics
from nodefence.settings import load_settings


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached before the deadline")
        await asyncio.sleep(0.02)


async def answers(url: str, context: ssl.SSLContext) -> bool:
    try:
        async with (
            aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(force_close=True, ssl=context),
                timeout=aiohttp.ClientTimeout(total=5),
            ) as session,
            session.get(url) as response,
        ):
            return response.status == 200
    except (aiohttp.ClientConnectionError, TimeoutError):
        return False


class Serving:
    def __init__(self, port: int, ca: TestCA, volume: SecretVolume, metrics: Metrics) -> None:
        self.port = port
        self.ca = ca
        self.volume = volume
        self.metrics = metrics
        self.base = f"https://127.0.0.1:{port}"

    def refused(self, reason: str) -> float | None:
        """``nodefence_tls_reload_failures_total{reason}`` as served (None: no such series)."""
        return self.metrics.registry.get_sample_value(
            "nodefence_tls_reload_failures_total", {"reason": reason}
        )

    async def fingerprint(self) -> str:
        return await served_fingerprint_async(self.port, self.ca.client_context())


@pytest.fixture
def ca(tmp_path: Path) -> TestCA:
    return TestCA(tmp_path / "ca")


@pytest.fixture
async def serving(
    tmp_path: Path, ca: TestCA, pipeline: RecordingPipeline
) -> AsyncIterator[Serving]:
    volume = SecretVolume(tmp_path / "tls")
    first = ca.issue()
    volume.publish(first.cert_pem, first.key_pem)
    port = free_port()
    settings = make_settings(
        host="127.0.0.1",
        port=port,
        tls_cert_file=volume.cert,
        tls_key_file=volume.key,
        header_timeout_seconds=1,
    )
    stop = asyncio.Event()
    metrics = Metrics()
    server = asyncio.create_task(run(settings, pipeline, metrics=metrics, stop=stop))
    found = Serving(port, ca, volume, metrics)
    await eventually(lambda: answers(found.base + "/healthz", ca.client_context()))
    assert await found.fingerprint() == first.fingerprint
    yield found
    stop.set()
    await asyncio.wait_for(server, 60)


async def test_a_renewed_certificate_is_served_by_the_next_handshake_and_in_flight_is_answered(
    serving: Serving, pipeline: RecordingPipeline
) -> None:
    pipeline.gate = asyncio.Event()
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(ssl=serving.ca.client_context())
    ) as session:
        in_flight = asyncio.create_task(
            session.post(
                serving.base + "/alerts", json=load_payload("am_firing.json"), headers=bearer()
            )
        )
        await asyncio.wait_for(pipeline.entered.wait(), 60)

        renewed = serving.ca.issue()
        serving.volume.publish(renewed.cert_pem, renewed.key_pem)
        assert await serving.fingerprint() == renewed.fingerprint
        assert not in_flight.done()

        pipeline.gate.set()
        response = await asyncio.wait_for(in_flight, 60)
        assert response.status == 200
        assert len((await response.json())["decisions"]) == 2
        # The connection that was open before the renewal kept its certificate, and works on.
        async with session.get(serving.base + "/healthz") as again:
            assert again.status == 200
    # A new connection after the renewal gets the new certificate and is answered.
    assert await answers(serving.base + "/readyz", serving.ca.client_context())


async def test_an_unusable_pair_keeps_the_last_good_certificate_and_logs_an_error(
    serving: Serving, ca: TestCA, log_stream: io.StringIO
) -> None:
    served = await serving.fingerprint()
    other = ca.issue()
    third = ca.issue()
    # A key that does not belong to the certificate (a half-done manual rotation).
    serving.volume.publish(other.cert_pem, third.key_pem)
    assert await serving.fingerprint() == served
    # Not PEM at all.
    serving.volume.publish("not a certificate\n", "not a key\n")
    assert await serving.fingerprint() == served
    assert await answers(serving.base + "/healthz", ca.client_context())

    lines = [json.loads(line) for line in log_stream.getvalue().splitlines() if line.strip()]
    unusable = [line for line in lines if line.get("event") == "tls_certificate_unusable"]
    assert len(unusable) == 2, unusable
    assert all(line["level"] == "error" for line in unusable)
    assert all(str(serving.volume.key) in line["error"] for line in unusable)
    # The log names the files, never a key.
    assert "PRIVATE KEY" not in log_stream.getvalue()
    assert third.key_pem.splitlines()[1] not in log_stream.getvalue()

    # A good pair after the bad ones is picked up by the next handshake.
    serving.volume.publish(third.cert_pem, third.key_pem)
    assert await serving.fingerprint() == third.fingerprint


def _expired() -> tuple[datetime, datetime]:
    now = datetime.now(UTC)
    return now - timedelta(days=30), now - timedelta(days=1)


def _not_yet_valid() -> tuple[datetime, datetime]:
    now = datetime.now(UTC)
    return now + timedelta(days=1), now + timedelta(days=30)


async def test_a_renewal_outside_its_validity_period_is_refused_logged_and_counted(
    serving: Serving, ca: TestCA, log_stream: io.StringIO
) -> None:
    """A certificate every verifying client would refuse never replaces one they accept."""
    served = await serving.fingerprint()
    assert serving.refused("expired") == 0
    assert serving.refused("not-yet-valid") == 0
    assert serving.refused("unloadable") == 0

    expired = ca.issue(_expired())
    serving.volume.publish(expired.cert_pem, expired.key_pem)
    assert await serving.fingerprint() == served
    too_early = ca.issue(_not_yet_valid())
    serving.volume.publish(too_early.cert_pem, too_early.key_pem)
    assert await serving.fingerprint() == served
    assert await answers(serving.base + "/healthz", ca.client_context())

    assert serving.refused("expired") == 1
    assert serving.refused("not-yet-valid") == 1
    assert serving.refused("unloadable") == 0
    lines = [json.loads(line) for line in log_stream.getvalue().splitlines() if line.strip()]
    unusable = [line for line in lines if line.get("event") == "tls_certificate_unusable"]
    assert [line["reason"] for line in unusable] == ["expired", "not-yet-valid"]
    assert all(line["level"] == "error" for line in unusable)
    assert all(line["fingerprint_sha256"] == served for line in unusable)
    assert "expired at" in unusable[0]["error"]
    assert "not valid before" in unusable[1]["error"]
    assert all(str(serving.volume.cert) in line["error"] for line in unusable)

    # The renewal done right is taken at the next handshake.
    good = ca.issue()
    serving.volume.publish(good.cert_pem, good.key_pem)
    assert await serving.fingerprint() == good.fingerprint


async def test_plain_http_to_the_tls_listener_is_not_answered(serving: Serving) -> None:
    # A client sending the token in clear to the TLS port never gets an HTTP answer.
    reader, writer = await asyncio.open_connection("127.0.0.1", serving.port)
    writer.write(
        f"POST /alerts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
        "Content-Length: 0\r\n\r\n".encode()
    )
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 30)
    assert not answer.startswith(b"HTTP/")
    writer.close()


async def test_a_connection_that_never_completes_the_handshake_is_closed(serving: Serving) -> None:
    # Connected, and then silence: the handshake is bounded by the header timeout (1 s here).
    reader, writer = await asyncio.open_connection("127.0.0.1", serving.port)
    with contextlib.suppress(ConnectionResetError):
        assert await asyncio.wait_for(reader.read(), 30) == b""
    writer.close()


def _pair(ca: TestCA, folder: Path) -> tuple[Path, Path]:
    issued = ca.issue()
    folder.mkdir(parents=True, exist_ok=True)
    cert, key = folder / "tls.crt", folder / "tls.key"
    cert.write_text(issued.cert_pem)
    key.write_text(issued.key_pem)
    return cert, key


def test_settings_need_both_files(
    ca: TestCA, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, _ = _pair(ca, tmp_path)
    monkeypatch.setenv("NODEFENCE_ALERT_TOKEN", TOKEN)
    monkeypatch.setenv("NODEFENCE_TLS_CERT_FILE", str(cert))
    with pytest.raises(ConfigError, match="NODEFENCE_TLS_KEY_FILE must be set together"):
        load_settings()


def test_settings_without_tls_serve_plain_http(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODEFENCE_ALERT_TOKEN", TOKEN)
    # Kubernetes renders an optional Secret key that is absent as an empty variable.
    monkeypatch.setenv("NODEFENCE_TLS_CERT_FILE", "")
    monkeypatch.setenv("NODEFENCE_TLS_KEY_FILE", "")
    settings = load_settings()
    assert settings.tls_cert_file is None
    assert settings.tls_key_file is None


def test_settings_refuse_a_missing_file_naming_it(ca: TestCA, tmp_path: Path) -> None:
    cert, _ = _pair(ca, tmp_path)
    missing = tmp_path / "absent.key"
    with pytest.raises(ConfigError) as caught:
        load_settings(alert_token=TOKEN, tls_cert_file=cert, tls_key_file=missing)
    assert str(missing) in str(caught.value)
    assert "cannot read" in str(caught.value)


def test_settings_refuse_a_key_of_another_certificate_without_printing_it(
    ca: TestCA, tmp_path: Path
) -> None:
    cert, _ = _pair(ca, tmp_path / "a")
    _, other_key = _pair(ca, tmp_path / "b")
    with pytest.raises(ConfigError) as caught:
        load_settings(alert_token=TOKEN, tls_cert_file=cert, tls_key_file=other_key)
    message = str(caught.value)
    assert str(cert) in message
    assert str(other_key) in message
    assert "PRIVATE KEY" not in message
    assert other_key.read_text().splitlines()[1] not in message


@pytest.mark.parametrize(
    ("valid", "words"),
    [(_expired, "the certificate expired at"), (_not_yet_valid, "is not valid before")],
)
def test_settings_refuse_a_certificate_outside_its_validity_period(
    ca: TestCA, tmp_path: Path, valid: Callable[[], tuple[datetime, datetime]], words: str
) -> None:
    """At start (and in check-config) such a pair stops the service with the reason."""
    issued = ca.issue(valid())
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_text(issued.cert_pem)
    key.write_text(issued.key_pem)
    with pytest.raises(ConfigError) as caught:
        load_settings(alert_token=TOKEN, tls_cert_file=cert, tls_key_file=key)
    message = str(caught.value)
    assert words in message
    assert str(cert) in message
    assert "PRIVATE KEY" not in message
