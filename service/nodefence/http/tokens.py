"""The bearer tokens /alerts and /reconcile accept: from ``NODEFENCE_ALERT_TOKEN`` (several,
comma-separated) and from ``NODEFENCE_ALERT_TOKEN_FILE``, a file mounted from a Secret that is
re-read whenever it changes.

Rotation without a lost webhook needs both tokens to be accepted while Alertmanager switches
from the old one to the new one: put both in the Secret, roll Alertmanager onto the new one,
then remove the old one. A Secret mounted as a volume is updated by the kubelet through an
atomic swap of the ``..data`` symlink, so the path stays the same while the file behind it is
replaced: the check is a ``stat`` that follows symlinks and compares device, inode, size and
modification time, which costs one system call per request and never reads a half-written file.

Only SHA-256 digests of the tokens are held: comparing digests keeps every comparison the same
length (``hmac.compare_digest`` on strings of different lengths returns early), and a memory
dump or a stray ``repr`` shows no token.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import SecretStr

from nodefence.observability.logging import get_logger

log = get_logger("nodefence.http.tokens")

_SEPARATORS = re.compile(r"[,\r\n]+")


class TokenFileError(Exception):
    """The token file cannot be read or holds no token. The message names the file, never its
    content."""


def split_tokens(text: str) -> list[str]:
    """Tokens separated by commas or newlines, surrounding blanks ignored."""
    return [part.strip() for part in _SEPARATORS.split(text) if part.strip()]


def digest(token: str | bytes) -> bytes:
    raw = token.encode() if isinstance(token, str) else token
    return hashlib.sha256(raw).digest()


def read_token_file(path: Path) -> list[SecretStr]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise TokenFileError(
            f"NODEFENCE_ALERT_TOKEN_FILE {path}: cannot read it ({reason})"
        ) from None
    tokens = split_tokens(text)
    if not tokens:
        raise TokenFileError(f"NODEFENCE_ALERT_TOKEN_FILE {path}: holds no token")
    return [SecretStr(token) for token in tokens]


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


class TokenSource:
    """The digests of every accepted token, refreshed from the file when it changed.

    A file that turns unreadable or empty after start keeps the tokens last read from it (and
    says so in the log, once per change): a rotation half done must not lock Alertmanager out.
    """

    def __init__(self, fixed: list[SecretStr], path: Path | None = None) -> None:
        self._fixed = [digest(t.get_secret_value()) for t in fixed]
        self._path = path
        self._from_file: list[bytes] = []
        self._seen: _Seen | None = None
        self.reloads = 0
        if path is not None:
            self._seen = _identity(path)
            self._from_file = [digest(t.get_secret_value()) for t in read_token_file(path)]

    @property
    def configured(self) -> bool:
        return bool(self._fixed) or self._path is not None

    def digests(self) -> list[bytes]:
        self._refresh()
        return [*self._fixed, *self._from_file]

    def _refresh(self) -> None:
        if self._path is None:
            return
        seen = _identity(self._path)
        if seen == self._seen:
            return
        self._seen = seen
        try:
            tokens = read_token_file(self._path)
        except TokenFileError as exc:
            log.warning(
                "alert_token_file_unusable",
                error=str(exc),
                detail="keeping the tokens last read from it",
                kept=len(self._from_file),
            )
            return
        self._from_file = [digest(t.get_secret_value()) for t in tokens]
        self.reloads += 1
        log.info("alert_token_file_reloaded", path=str(self._path), tokens=len(tokens))
