"""The webhook over TLS: ``NODEFENCE_TLS_CERT_FILE`` and ``NODEFENCE_TLS_KEY_FILE``, re-read
when they change, so a certificate renewed by cert-manager is served without a restart.

Without TLS the bearer token Alertmanager sends crosses the pod network in clear, readable by
anything that can see the traffic of the node it passes.

Rotation swaps whole contexts rather than loading a new pair into the live one: a context that
has taken a new certificate but refused its key would present a certificate it cannot sign for,
so every new pair is loaded into a fresh context, and only a context that loaded the pair whole
is used. The listener's context carries a ``sni_callback``, which OpenSSL calls for every
ClientHello, with or without a server name; it checks the files and hands the handshake the
current context. The check is a ``stat`` of both files (device, inode, size, modification time,
following the ``..data`` symlink a Secret volume swaps atomically), so the handshake after a
renewal presents the new certificate, connections already open keep theirs, and no request in
flight is touched. A pair that cannot be loaded (half written, mismatched, unreadable) keeps the
last good one serving and is logged as an error once per change of the files.

A certificate outside its validity period (expired, or not valid yet) is refused the same way:
served, it would fail every client that verifies it, and swapping a working certificate for one
nobody accepts is never what a renewal meant. Each refusal of a changed pair is counted in
``nodefence_tls_reload_failures_total`` by reason, so an alert sees a renewal that did not take
before the certificate still served runs out. At start, the same refusal stops the service with
the reason (``Settings``), rather than listening with a certificate no client accepts.
"""

from __future__ import annotations

import hashlib
import os
import re
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from cryptography import x509

from nodefence.observability.logging import get_logger

log = get_logger("nodefence.http.tls")

_PEM_CERTIFICATE = re.compile(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.DOTALL)


# Why a pair was refused: the ``reason`` label of ``nodefence_tls_reload_failures_total``.
UNLOADABLE = "unloadable"
EXPIRED = "expired"
NOT_YET_VALID = "not-yet-valid"
REASONS = (UNLOADABLE, EXPIRED, NOT_YET_VALID)


class TlsPairError(Exception):
    """The certificate and key cannot be served. The message names the files, never their
    content; ``reason`` is one of ``REASONS``."""

    def __init__(self, message: str, reason: str = UNLOADABLE) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class LoadedPair:
    context: ssl.SSLContext
    # SHA-256 of the leaf certificate (DER), as `openssl x509 -fingerprint -sha256` prints it
    # without the colons: what an operator compares with the certificate cert-manager issued.
    fingerprint: str


def _refuse_password() -> bytes:
    # An encrypted key would otherwise make OpenSSL prompt on the terminal for a password.
    return b""


def _server_context() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["http/1.1"])
    return context


def _names(cert: Path, key: Path) -> str:
    return f"NODEFENCE_TLS_CERT_FILE {cert} and NODEFENCE_TLS_KEY_FILE {key}"


def _leaf_der(cert: Path) -> bytes | None:
    """The first certificate of the file (the leaf, the one a client is shown), DER-encoded."""
    try:
        text = cert.read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    match = _PEM_CERTIFICATE.search(text)
    if match is None:
        return None
    try:
        return ssl.PEM_cert_to_DER_cert(match.group(0))
    except ValueError:
        return None


def _instant(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _check_validity(cert: Path, key: Path, der: bytes | None, now: datetime) -> None:
    """``TlsPairError`` unless ``now`` is within the leaf certificate's validity period."""
    try:
        leaf = x509.load_der_x509_certificate(der) if der is not None else None
    except ValueError:
        leaf = None
    if leaf is None:
        raise TlsPairError(f"{_names(cert, key)}: cannot read the certificate's validity period")
    not_before, not_after = leaf.not_valid_before_utc, leaf.not_valid_after_utc
    if now > not_after:
        raise TlsPairError(
            f"{_names(cert, key)}: the certificate expired at {_instant(not_after)} (now "
            f"{_instant(now)}); every client that verifies it would refuse it",
            EXPIRED,
        )
    if now < not_before:
        raise TlsPairError(
            f"{_names(cert, key)}: the certificate is not valid before {_instant(not_before)} "
            f"(now {_instant(now)}); every client that verifies it would refuse it",
            NOT_YET_VALID,
        )


def load_pair(cert: Path, key: Path, now: datetime | None = None) -> LoadedPair:
    """A fresh server context holding the pair, or ``TlsPairError`` naming what is wrong: the
    files unreadable, not a certificate and its key, or the certificate outside its validity
    period at ``now`` (default: this moment)."""
    context = _server_context()
    try:
        context.load_cert_chain(cert, key, password=_refuse_password)
    except ssl.SSLError as exc:
        reason = exc.reason or "not PEM"
        raise TlsPairError(
            f"{_names(cert, key)}: not a certificate chain and its private key ({reason})"
        ) from None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise TlsPairError(f"{_names(cert, key)}: cannot read them ({reason})") from None
    der = _leaf_der(cert)
    _check_validity(cert, key, der, now if now is not None else datetime.now(UTC))
    fingerprint = hashlib.sha256(der).hexdigest().upper() if der is not None else "unknown"
    return LoadedPair(context, fingerprint)


@dataclass(frozen=True)
class _Seen:
    device: int
    inode: int
    size: int
    mtime_ns: int


def _identity(path: Path) -> _Seen | None:
    try:
        info = os.stat(path)  # follows the ..data symlink of a Secret volume
    except OSError:
        return None
    return _Seen(info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)


class TlsCertificates:
    """The certificate new handshakes get, re-read from the files when they change.

    ``listener`` is the context to serve with; each handshake on it is handed the context of
    the pair last loaded whole. ``refused`` is told the reason of each changed pair that was
    not taken (``REASONS``): the service counts them.
    """

    def __init__(self, cert: Path, key: Path, refused: Callable[[str], None] | None = None) -> None:
        self._cert = cert
        self._key = key
        self._refused = refused
        self._seen = (_identity(cert), _identity(key))
        self._current = load_pair(cert, key)
        self.reloads = 0
        self.listener = self._current.context
        self.listener.sni_callback = self._on_client_hello
        log.info(
            "tls_certificate_loaded",
            cert_file=str(cert),
            fingerprint_sha256=self._current.fingerprint,
        )

    @property
    def fingerprint(self) -> str:
        """The SHA-256 fingerprint of the certificate new handshakes are given."""
        return self._current.fingerprint

    def refresh(self) -> None:
        """Load the pair again if either file changed since it was last looked at."""
        seen = (_identity(self._cert), _identity(self._key))
        if seen == self._seen:
            return
        self._seen = seen
        refusal: TlsPairError | None = None
        try:
            loaded = load_pair(self._cert, self._key)
        except TlsPairError as exc:
            refusal = exc
        if refusal is not None:
            # An operator's error, not a bug: the message says what is wrong, no traceback.
            log.error(
                "tls_certificate_unusable",
                error=str(refusal),
                reason=refusal.reason,
                detail="still serving the certificate last loaded",
                fingerprint_sha256=self._current.fingerprint,
            )
            if self._refused is not None:
                self._refused(refusal.reason)
            return
        previous = self._current.fingerprint
        self._current = loaded
        self.reloads += 1
        log.info(
            "tls_certificate_reloaded",
            cert_file=str(self._cert),
            fingerprint_sha256=loaded.fingerprint,
            previous_fingerprint_sha256=previous,
        )

    def _on_client_hello(
        self, connection: ssl.SSLObject, server_name: str | None, context: ssl.SSLContext
    ) -> None:
        # An exception here would fail the handshake: a reload problem must never do that.
        try:
            self.refresh()
        except Exception:  # logged; the last good certificate keeps serving
            log.exception("tls_certificate_refresh_failed")
        current = self._current.context
        if connection.context is not current:
            connection.context = current
