"""Signed, expiring button values.

Slack echoes a button's ``value`` back verbatim, but anyone who can post to the channel (or
replay an old payload) could craft one. The value therefore carries its own HMAC-SHA256 under
the approval key, a secret only nodefence holds: unlike the Slack signing secret, which proves
only that Slack delivered the click, it proves that nodefence itself asked this question, about
this node object, for this alert, in this channel, until this moment.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import asdict, dataclass
from enum import StrEnum

from pydantic import SecretStr

VERSION = "v1"
# Slack refuses button values longer than this.
MAX_VALUE_LENGTH = 2000


class Action(StrEnum):
    APPROVE = "approve"
    REJECT = "reject"


class TokenError(Exception):
    """The button value is not a valid, current token; the message says why, without secrets."""


@dataclass(frozen=True)
class ButtonToken:
    """What one button stands for. ``since`` is the start of the NotReady period the question
    was asked about (unix seconds, 0 when unknown), so an old button cannot authorise a fence in
    a later outage of the same node."""

    node: str
    uid: str
    fingerprint: str
    alertname: str
    action: Action
    channel: str
    expires: int
    rule: str = ""
    since: int = 0


_FIELDS = {
    "node": "n",
    "uid": "u",
    "fingerprint": "f",
    "alertname": "a",
    "action": "x",
    "channel": "c",
    "expires": "e",
    "rule": "r",
    "since": "s",
}
_SHORT = {short: name for name, short in _FIELDS.items()}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(key: SecretStr, body: str) -> bytes:
    message = f"{VERSION}.{body}".encode()
    return hmac.new(key.get_secret_value().encode(), message, hashlib.sha256).digest()


def sign(token: ButtonToken, key: SecretStr) -> str:
    fields = {_FIELDS[name]: value for name, value in asdict(token).items()}
    body = _b64(json.dumps(fields, separators=(",", ":"), sort_keys=True).encode())
    value = f"{VERSION}.{body}.{_b64(_mac(key, body))}"
    if len(value) > MAX_VALUE_LENGTH:
        raise ValueError(f"button value of {len(value)} characters exceeds Slack's limit")
    return value


def verify(value: str, key: SecretStr, *, now: float) -> ButtonToken:
    """The token, if its signature is nodefence's and it has not expired at ``now``.

    The signature is compared in constant time and checked before the body is parsed, so a
    forged value never reaches the JSON decoder.
    """
    parts = value.split(".")
    if len(parts) != 3 or parts[0] != VERSION:
        raise TokenError("the button value is not a nodefence approval token")
    _version, body, mac = parts
    try:
        given = _unb64(mac)
    except ValueError:
        raise TokenError("the button value is not a nodefence approval token") from None
    if not hmac.compare_digest(given, _mac(key, body)):
        raise TokenError("the button value does not carry nodefence's signature")
    try:
        fields = json.loads(_unb64(body))
        token = ButtonToken(**{_SHORT[short]: item for short, item in fields.items()})
        token = ButtonToken(
            node=str(token.node),
            uid=str(token.uid),
            fingerprint=str(token.fingerprint),
            alertname=str(token.alertname),
            action=Action(token.action),
            channel=str(token.channel),
            expires=int(token.expires),
            rule=str(token.rule),
            since=int(token.since),
        )
    except (ValueError, KeyError, TypeError):
        raise TokenError("the signed button value cannot be read") from None
    if now >= token.expires:
        raise TokenError("the approval request expired")
    return token
