"""RFC 9457 problem details for every error response.

All errors, whether raised on purpose by a handler, raised by aiohttp (404, 405, 413) or
unexpected, leave as ``application/problem+json`` with the same fields. Unexpected exceptions
are logged in full but answered with a generic 500, so stack traces and internal messages never
reach the caller.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import NotRequired

from aiohttp import web
from aiohttp.typedefs import Handler
from multidict import CIMultiDict
from pydantic import ValidationError
from typing_extensions import TypedDict

from nodefence.observability.logging import get_logger

PROBLEM_CONTENT_TYPE = "application/problem+json"
TYPE_PREFIX = "urn:nodefence:problem:"
# Headers of an aiohttp HTTPException worth keeping on the problem response.
_KEPT_HEADERS = ("Allow", "WWW-Authenticate", "Retry-After", "Location")

log = get_logger("nodefence.http")


class ProblemErrorJson(TypedDict):
    """One schema violation of the request body."""

    pointer: str
    path: str
    detail: str


class ProblemJson(TypedDict):
    """RFC 9457 problem details."""

    type: str
    title: str
    status: int
    detail: NotRequired[str]
    # Each schema violation of the request body (422 only).
    errors: NotRequired[list[ProblemErrorJson]]


class Problem(Exception):
    """An error a handler answers on purpose, carried to the middleware that renders it."""

    def __init__(
        self,
        status: int,
        *,
        kind: str | None = None,
        title: str | None = None,
        detail: str | None = None,
        errors: Sequence[ProblemErrorJson] | None = None,
        headers: Mapping[str, str] | None = None,
        close_connection: bool = False,
    ) -> None:
        super().__init__(detail or title or HTTPStatus(status).phrase)
        self.status = status
        self.kind = kind
        self.title = title or HTTPStatus(status).phrase
        self.detail = detail
        self.errors = list(errors) if errors is not None else None
        self.headers: CIMultiDict[str] = CIMultiDict(headers or {})
        # Set when the rest of the request body was left unread and the connection cannot be
        # reused for another request.
        self.close_connection = close_connection

    def to_response(self) -> web.Response:
        body: ProblemJson = {
            "type": TYPE_PREFIX + self.kind if self.kind else "about:blank",
            "title": self.title,
            "status": self.status,
        }
        if self.detail:
            body["detail"] = self.detail
        if self.errors is not None:
            body["errors"] = self.errors
        response = web.Response(
            status=self.status,
            body=json.dumps(body).encode(),
            headers=self.headers,
        )
        response.content_type = PROBLEM_CONTENT_TYPE
        if self.close_connection:
            response.force_close()
        return response


def json_pointer(location: Sequence[int | str]) -> str:
    """An RFC 6901 pointer (as a URI fragment) to the offending member of the request body."""
    parts = [
        str(part).replace("~", "~0").replace("/", "~1") for part in location if part != "[key]"
    ]
    return "#/" + "/".join(parts) if parts else "#"


def json_path(location: Sequence[int | str]) -> str:
    """The same location as a JSONPath expression, easier for people to read in a log."""
    path = "$"
    for part in location:
        if part == "[key]":
            continue
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def validation_problem(exc: ValidationError, *, detail: str) -> Problem:
    """A 422 listing every schema violation with where in the body it is."""
    errors: list[ProblemErrorJson] = [
        {
            "pointer": json_pointer(error["loc"]),
            "path": json_path(error["loc"]),
            "detail": error["msg"],
        }
        for error in exc.errors(include_url=False, include_input=False)
    ]
    return Problem(422, kind="invalid-payload", detail=detail, errors=errors)


def _from_http_exception(exc: web.HTTPException) -> Problem:
    headers: CIMultiDict[str] = CIMultiDict()
    for name in _KEPT_HEADERS:
        for value in exc.headers.getall(name, []):
            headers.add(name, value)
    detail = exc.text if exc.text and exc.text != f"{exc.status}: {exc.reason}" else None
    return Problem(exc.status, title=exc.reason, detail=detail, headers=headers)


@web.middleware
async def problem_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except Problem as problem:
        return problem.to_response()
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _from_http_exception(exc).to_response()
    except Exception:
        log.exception("unhandled_error", method=request.method, path=request.path)
        return Problem(
            500, detail="The request failed unexpectedly; the error is in the service log."
        ).to_response()
