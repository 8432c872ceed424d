"""API errors carried as the ``Status`` objects a real API server returns."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An error the API answers with a ``Status`` body (reason and code as Kubernetes uses)."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        kind: str = "",
        name: str = "",
        group: str = "",
        retry_after: int | None = None,
        causes: list[dict[str, str]] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.kind = kind
        self.name = name
        self.group = group
        self.retry_after = retry_after
        self.causes = causes or []

    def status(self) -> dict[str, Any]:
        details: dict[str, Any] = {}
        if self.name:
            details["name"] = self.name
        if self.group:
            details["group"] = self.group
        if self.kind:
            details["kind"] = self.kind
        if self.causes:
            details["causes"] = [dict(c) for c in self.causes]
        if self.retry_after is not None:
            details["retryAfterSeconds"] = self.retry_after
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if details:
            body["details"] = details
        return body


class NotServed(ApiError):
    """A path the API server serves nothing at: under a group it does not serve (a CRD's,
    where it is not installed), or outside ``/api`` and ``/apis`` altogether. kube-apiserver's
    last handler answers it with Go's ``http.NotFound``: the plain text ``404 page not found``,
    not a ``Status`` (which every other path under ``/api`` or a served group gets)."""

    TEXT = "404 page not found\n"

    def __init__(self) -> None:
        super().__init__(404, "NotFound", self.TEXT.strip())


def not_found(resource: str, name: str, group: str = "") -> ApiError:
    qualified = f"{resource}.{group}" if group else resource
    return ApiError(
        404, "NotFound", f'{qualified} "{name}" not found', kind=resource, name=name, group=group
    )


def already_exists(resource: str, name: str, group: str = "") -> ApiError:
    qualified = f"{resource}.{group}" if group else resource
    return ApiError(
        409,
        "AlreadyExists",
        f'{qualified} "{name}" already exists',
        kind=resource,
        name=name,
        group=group,
    )


def conflict(resource: str, name: str, detail: str, group: str = "") -> ApiError:
    qualified = f"{resource}.{group}" if group else resource
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified} "{name}": {detail}',
        kind=resource,
        name=name,
        group=group,
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def invalid(kind: str, name: str, message: str) -> ApiError:
    return ApiError(422, "Invalid", f'{kind} "{name}" is invalid: {message}', kind=kind, name=name)
