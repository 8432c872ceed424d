"""Bearer-token or basic authentication for the routes that can change the cluster or show its
decisions.

Credentials are compared with ``hmac.compare_digest`` on SHA-256 digests, and every configured
credential is checked on every request (no early return between them), so response timing says
nothing about how much of a guess was right, nor about which token matched. The ``Authorization``
header is never logged. Each refusal is counted by why it was refused
(``nodefence_webhook_rejected_total``): a 401 is final for Alertmanager, which does not retry
it, so a rotation gone wrong must show on a graph and page someone, not only in a log line.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Collection
from enum import StrEnum

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from multidict import CIMultiDict

from nodefence.http.problems import Problem
from nodefence.http.tokens import TokenSource, digest
from nodefence.observability.logging import get_logger
from nodefence.observability.metrics import Metrics
from nodefence.settings import Settings

REALM = "nodefence"

log = get_logger("nodefence.http.auth")


class Rejection(StrEnum):
    """Why a request was refused: the ``reason`` label of ``nodefence_webhook_rejected_total``."""

    # No Authorization header at all: a receiver configured without credentials.
    MISSING = "missing"
    # A bearer token that is none of the accepted ones: a rotation not finished on one side.
    BAD_TOKEN = "bad-token"  # noqa: S105 - a label value, not a credential
    # Basic credentials that do not match, or that are not valid base64 "user:password".
    BAD_BASIC = "bad-basic"
    # A scheme this receiver is not configured for (Bearer without a token, Basic without a
    # user, Digest, ...).
    SCHEME = "unsupported-scheme"


def _same(given: bytes, expected: bytes) -> bool:
    return hmac.compare_digest(given, expected)


class Authenticator:
    """Checks one request's ``Authorization`` header against the configured credentials."""

    def __init__(self, settings: Settings) -> None:
        self.disabled = settings.auth_disabled
        # With authentication off no token is read, so a token file left behind cannot stop
        # the start.
        self.tokens = (
            TokenSource([])
            if self.disabled
            else TokenSource(settings.alert_tokens, settings.alert_token_file)
        )
        self._user: bytes | None = None
        self._password: bytes | None = None
        if settings.basic_auth_user is not None and settings.basic_auth_password is not None:
            self._user = digest(settings.basic_auth_user)
            self._password = digest(settings.basic_auth_password.get_secret_value())

    def challenges(self) -> list[str]:
        offered = []
        if self.tokens.configured:
            offered.append(f'Bearer realm="{REALM}"')
        if self._user is not None:
            offered.append(f'Basic realm="{REALM}", charset="UTF-8"')
        return offered

    def authenticate(self, authorization: str | None) -> bool:
        return self.check(authorization) is None

    def check(self, authorization: str | None) -> Rejection | None:
        """None when the request may pass, else why it may not."""
        if self.disabled:
            return None
        if not authorization or not authorization.strip():
            return Rejection.MISSING
        scheme, _, credentials = authorization.strip().partition(" ")
        scheme = scheme.lower()
        credentials = credentials.strip()
        if scheme == "bearer" and self.tokens.configured:
            given = digest(credentials)
            matched = False
            for expected in self.tokens.digests():
                matched |= _same(given, expected)
            return None if matched else Rejection.BAD_TOKEN
        if scheme == "basic" and self._user is not None and self._password is not None:
            try:
                decoded = base64.b64decode(credentials, validate=True)
            except (binascii.Error, ValueError):
                return Rejection.BAD_BASIC
            user, separator, password = decoded.partition(b":")
            user_ok = _same(digest(user), self._user)
            password_ok = _same(digest(password), self._password)
            return None if separator and user_ok and password_ok else Rejection.BAD_BASIC
        return Rejection.SCHEME


def auth_middleware(
    authenticator: Authenticator,
    protected_paths: Collection[str],
    metrics: Metrics | None = None,
) -> Middleware:
    """Require credentials on ``protected_paths``; other routes (probes, metrics) stay open."""
    if metrics is not None and not authenticator.disabled:
        # Every series from zero, so that the first refusal is an increase Prometheus sees.
        for path in protected_paths:
            for reason in Rejection:
                metrics.webhook_rejections.labels(path=path, reason=reason.value)

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path not in protected_paths or authenticator.disabled:
            return await handler(request)
        rejection = authenticator.check(request.headers.get("Authorization"))
        if rejection is None:
            return await handler(request)
        if metrics is not None:
            metrics.webhook_rejected(request.path, rejection.value)
        log.warning(
            "request_unauthenticated",
            method=request.method,
            path=request.path,
            remote=request.remote,
            reason=rejection.value,
            credentials_present="Authorization" in request.headers,
        )
        headers: CIMultiDict[str] = CIMultiDict()
        for challenge in authenticator.challenges():
            headers.add("WWW-Authenticate", challenge)
        raise Problem(
            401,
            kind="unauthenticated",
            detail="Send the configured bearer token or basic credentials.",
            headers=headers,
        )

    return middleware


def warn_if_disabled(settings: Settings) -> None:
    """Say loudly at startup that anyone who can reach the service can fence nodes."""
    if settings.auth_disabled:
        log.warning(
            "authentication_disabled",
            detail="NODEFENCE_AUTH_DISABLED is set: /alerts and /reconcile accept any caller; "
            "anyone who can reach this service can taint nodes and delete pods",
        )
