"""A raw HTTP/1.1 client: the fuzz tests need what polite clients refuse to send (repeated
``Authorization``, invalid UTF-8 bodies, lying ``Content-Length``, hand-made chunking)."""

from __future__ import annotations

import base64
import http.client
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .stack import BASIC_PASSWORD, BASIC_USER, Stack


@dataclass(frozen=True)
class Reply:
    status: int
    content_type: str
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def bearer(stack: Stack) -> tuple[str, str]:
    return ("Authorization", f"Bearer {stack.token}")


def basic() -> tuple[str, str]:
    credentials = base64.b64encode(f"{BASIC_USER}:{BASIC_PASSWORD}".encode()).decode()
    return ("Authorization", f"Basic {credentials}")


def send(
    stack: Stack,
    path: str,
    body: bytes | None = None,
    *,
    headers: Sequence[tuple[str, str]] = (),
    method: str = "POST",
    chunks: Iterable[bytes] | None = None,
    content_length: int | None = None,
) -> Reply:
    """One request on a fresh connection. ``chunks`` sends the body with chunked encoding."""
    connection = http.client.HTTPConnection(stack.host, stack.port, timeout=30)
    try:
        connection.putrequest(method, path, skip_accept_encoding=True)
        for name, value in headers:
            connection.putheader(name, value.encode("utf-8", "surrogateescape"))
        if chunks is not None:
            connection.putheader("Transfer-Encoding", "chunked")
        elif body is not None:
            length = len(body) if content_length is None else content_length
            connection.putheader("Content-Length", str(length))
        connection.endheaders()
        try:
            if chunks is not None:
                for chunk in chunks:
                    connection.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                connection.send(b"0\r\n\r\n")
            elif body:
                connection.send(body)
        except OSError:
            # The server may answer (413) and close before reading everything we had to say.
            pass
        response = connection.getresponse()
        return Reply(response.status, response.getheader("Content-Type", ""), response.read())
    finally:
        connection.close()
