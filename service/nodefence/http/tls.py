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
"""

from __future__ import annotations

import hashlib
import os
import re
import ssl
from dataclasses import dataclass
from pathlib import Path

from nodefence.observability.logging import get_logger

log = get_logger("nodefence.http.tls")

_PEM_CERTIFICATE = re.compile(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.DOTALL)


class TlsPairError(Exception):
    """The certificate and key cannot be served. The message names the files, never their
    content."""


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


def _leaf_fingerprint(cert: Path) -> str:
    try:
        text = cert.read_text(encoding="ascii", errors="replace")
    except OSError:
        return "unknown"
    match = _PEM_CERTIFICATE.search(text)
    if match is None:
        return "unknown"
    try:
        der = ssl.PEM_cert_to_DER_cert(match.group(0))
    except ValueError:
        return "unknown"
    return hashlib.sha256(der).hexdigest().upper()


def load_pair(cert: Path, key: Path) -> LoadedPair:
    """A fresh server context holding the pair, or ``TlsPairError`` naming what is wrong."""
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
    return LoadedPair(context, _leaf_fingerprint(cert))


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
    the pair last loaded whole.
    """

    def __init__(self, cert: Path, key: Path) -> None:
        self._cert = cert
        self._key = key
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
        problem = ""
        loaded: LoadedPair | None = None
        try:
            loaded = load_pair(self._cert, self._key)
        except TlsPairError as exc:
            problem = str(exc)
        if loaded is None:
            # An operator's error, not a bug: the message says what is wrong, no traceback.
            log.error(
                "tls_certificate_unusable",
                error=problem,
                detail="still serving the certificate last loaded",
                fingerprint_sha256=self._current.fingerprint,
            )
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
