"""Bearer-token or basic authentication for the routes that can change the cluster.

Credentials are compared with ``hmac.compare_digest`` on bytes, and every configured credential
is checked on every request (no early return between them), so response timing says nothing
about how much of a guess was right. The ``Authorization`` header is never logged.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Collection

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from multidict import CIMultiDict

from nodefence.http.problems import Problem
from nodefence.observability.logging import get_logger
from nodefence.settings import Settings

REALM = "nodefence"

log = get_logger("nodefence.http.auth")


def _same(given: bytes, expected: bytes) -> bool:
    return hmac.compare_digest(given, expected)


class Authenticator:
    """Checks one request's ``Authorization`` header against the configured credentials."""

    def __init__(self, settings: Settings) -> None:
        self.disabled = settings.auth_disabled
        self._token = (
            settings.alert_token.get_secret_value().encode()
            if settings.alert_token is not None
            else None
        )
        self._user: bytes | None = None
        self._password: bytes | None = None
        if settings.basic_auth_user is not None and settings.basic_auth_password is not None:
            self._user = settings.basic_auth_user.encode()
            self._password = settings.basic_auth_password.get_secret_value().encode()

    def challenges(self) -> list[str]:
        offered = []
        if self._token is not None:
            offered.append(f'Bearer realm="{REALM}"')
        if self._user is not None:
            offered.append(f'Basic realm="{REALM}", charset="UTF-8"')
        return offered

    def authenticate(self, authorization: str | None) -> bool:
        if self.disabled:
            return True
        if not authorization:
            return False
        scheme, _, credentials = authorization.strip().partition(" ")
        scheme = scheme.lower()
        credentials = credentials.strip()
        if scheme == "bearer" and self._token is not None:
            return _same(credentials.encode(), self._token)
        if scheme == "basic" and self._user is not None and self._password is not None:
            try:
                decoded = base64.b64decode(credentials, validate=True)
            except (binascii.Error, ValueError):
                return False
            user, separator, password = decoded.partition(b":")
            user_ok = _same(user, self._user)
            password_ok = _same(password, self._password)
            return bool(separator) and user_ok and password_ok
        return False


def auth_middleware(authenticator: Authenticator, protected_paths: Collection[str]) -> Middleware:
    """Require credentials on ``protected_paths``; other routes (probes, metrics) stay open."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path not in protected_paths or authenticator.disabled:
            return await handler(request)
        if authenticator.authenticate(request.headers.get("Authorization")):
            return await handler(request)
        log.warning(
            "request_unauthenticated",
            method=request.method,
            path=request.path,
            remote=request.remote,
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
