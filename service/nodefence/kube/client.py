"""A thin kubernetes-asyncio wrapper: raw JSON in and out, retries and request accounting.

Responses are read as plain dicts (``_preload_content=False``): model deserialisation of a
thousand pods costs more than the purge itself, and the adapter needs only a few fields.
Transient failures (429, 5xx, connection errors, timeouts) are retried with backoff until the
request deadline; what remains is raised as ``ClusterUnavailableError`` so the webhook answers 503
and Alertmanager retries.
"""

from __future__ import annotations

import asyncio
import functools
import json
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any

import aiohttp
from kubernetes_asyncio import client, config

from nodefence.errors import ClusterUnavailableError

Json = dict[str, Any]
RequestHook = Callable[[str, str], None]

RETRYABLE = frozenset({429, 500, 502, 503, 504})
PAGE_SIZE = 500


@dataclass(frozen=True)
class Dated:
    """A reply and the API server's clock when it sent it (its ``Date`` header), or None when
    the reply carried none: the one clock every liveness judgement is made on."""

    body: Json
    server_time: datetime | None


def server_date(header: str | None) -> datetime | None:
    if not header:
        return None
    try:
        moment = parsedate_to_datetime(header)
    except (TypeError, ValueError):
        return None
    return moment if moment.tzinfo is not None else None


@dataclass
class KubeError(Exception):
    """A definitive answer from the API server (404, 409, 422, ...), not worth retrying."""

    status: int
    reason: str
    message: str
    body: Json

    def __str__(self) -> str:
        return f"{self.status} {self.reason}: {self.message}"

    @property
    def is_conflict(self) -> bool:
        """409: a resourceVersion or UID precondition no longer holds."""
        return self.status == 409


class Deadline:
    """The time left for one webhook request; every retry loop respects it."""

    def __init__(self, seconds: float) -> None:
        self.expires = time.monotonic() + seconds

    @property
    def remaining(self) -> float:
        return max(0.0, self.expires - time.monotonic())

    @property
    def expired(self) -> bool:
        return self.remaining <= 0


async def load_api_client(kubeconfig: str | None = None) -> client.ApiClient:
    """KUBECONFIG (or an explicit file) first, in-cluster service account otherwise."""
    import os

    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path:
        configuration = client.Configuration()
        await config.load_kube_config(config_file=path, client_configuration=configuration)
    else:
        configuration = client.Configuration()
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    return client.ApiClient(configuration=configuration)


def _raw(body: Json) -> Any:
    """Plain dicts are sent as they are; the generated signatures only name the model types."""
    return body


class KubeClient:
    """The calls nodefence makes, and nothing else (the RBAC role lists exactly these)."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        on_request: RequestHook | None = None,
        call_timeout: float = 5.0,
    ) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.coordination = client.CoordinationV1Api(api)
        self.storage = client.StorageV1Api(api)
        self.version_api = client.VersionApi(api)
        self._on_request = on_request or (lambda _verb, _code: None)
        self.call_timeout = call_timeout

    async def close(self) -> None:
        await self.api.close()

    async def _call(
        self, verb: str, factory: Callable[[], Awaitable[Any]], deadline: Deadline | None
    ) -> Json:
        return (await self._dated(verb, factory, deadline)).body

    async def _dated(
        self, verb: str, factory: Callable[[], Awaitable[Any]], deadline: Deadline | None
    ) -> Dated:
        deadline = deadline or Deadline(self.call_timeout * 3)
        attempt = 0
        last_problem = "no attempt made"
        while True:
            attempt += 1
            timeout = max(0.05, min(self.call_timeout, deadline.remaining))
            retry_after: float | None = None
            try:
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancel that
                # races a reply, and a cancelled request must not go on retrying.
                async with asyncio.timeout(timeout):
                    response = await factory()
                    try:
                        raw = await response.read()
                    finally:
                        response.release()
                status = int(response.status)
                self._on_request(verb, str(status))
                body: Json = json.loads(raw) if raw else {}
                if status < 400:
                    return Dated(body, server_date(response.headers.get("Date")))
                message = str(body.get("message", "")) if isinstance(body, dict) else ""
                if status not in RETRYABLE:
                    raise KubeError(status, str(body.get("reason", "")), message, body)
                last_problem = f"{status} {message}".strip()
                header = response.headers.get("Retry-After")
                if header and header.isdigit():
                    retry_after = float(header)
            except (TimeoutError, aiohttp.ClientError, OSError, json.JSONDecodeError) as exc:
                self._on_request(verb, "error")
                last_problem = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            backoff = retry_after if retry_after is not None else min(2.0, 0.05 * 2**attempt)
            backoff *= 0.8 + 0.4 * random.random()  # noqa: S311 - jitter, not security
            if deadline.remaining <= backoff:
                raise ClusterUnavailableError(
                    f"Kubernetes API unavailable after {attempt} attempts: {last_problem}"
                )
            await asyncio.sleep(backoff)

    # -------------------------------------------------------------- reads
    async def version(self, deadline: Deadline | None = None) -> Json:
        return await self._call(
            "get", lambda: self.version_api.get_code(_preload_content=False), deadline
        )

    async def _list_all(
        self, verb: str, page: Callable[[str | None], Awaitable[Any]], deadline: Deadline | None
    ) -> list[Json]:
        """Every item of a list, fetched ``PAGE_SIZE`` at a time so that a large cluster is
        never one huge reply (``limit``/``continue``, as kubectl pages)."""
        items: list[Json] = []
        token: str | None = None
        while True:
            body = await self._call(verb, functools.partial(page, token), deadline)
            items.extend(body.get("items") or [])
            token = (body.get("metadata") or {}).get("continue") or None
            if token is None:
                return items

    async def list_nodes(
        self, deadline: Deadline | None = None, *, label_selector: str = ""
    ) -> list[Json]:
        def page(token: str | None) -> Awaitable[Any]:
            extra: dict[str, Any] = {"_continue": token} if token else {}
            if label_selector:
                extra["label_selector"] = label_selector
            return self.core.list_node(limit=PAGE_SIZE, _preload_content=False, **extra)

        return await self._list_all("list", page, deadline)

    async def get_node(self, name: str, deadline: Deadline | None = None) -> Dated:
        return await self._dated(
            "get", lambda: self.core.read_node(name, _preload_content=False), deadline
        )

    async def get_lease(self, namespace: str, name: str, deadline: Deadline | None = None) -> Dated:
        return await self._dated(
            "get",
            lambda: self.coordination.read_namespaced_lease(
                name, namespace, _preload_content=False
            ),
            deadline,
        )

    async def list_pods_on_node(self, node: str, deadline: Deadline | None = None) -> list[Json]:
        def page(token: str | None) -> Awaitable[Any]:
            extra: dict[str, Any] = {"_continue": token} if token else {}
            return self.core.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={node}",
                limit=PAGE_SIZE,
                _preload_content=False,
                **extra,
            )

        return await self._list_all("list", page, deadline)

    async def get_configmap(
        self, namespace: str, name: str, deadline: Deadline | None = None
    ) -> Json:
        return (await self.get_configmap_dated(namespace, name, deadline)).body

    async def get_configmap_dated(
        self, namespace: str, name: str, deadline: Deadline | None = None
    ) -> Dated:
        return await self._dated(
            "get",
            lambda: self.core.read_namespaced_config_map(name, namespace, _preload_content=False),
            deadline,
        )

    async def create_configmap(
        self, namespace: str, configmap: Json, deadline: Deadline | None = None
    ) -> Dated:
        return await self._dated(
            "create",
            lambda: self.core.create_namespaced_config_map(
                namespace, _raw(configmap), _preload_content=False
            ),
            deadline,
        )

    async def replace_configmap(
        self, namespace: str, name: str, configmap: Json, deadline: Deadline | None = None
    ) -> Dated:
        """PUT with the resourceVersion in ``configmap``: 409 if anyone wrote it since."""
        return await self._dated(
            "update",
            lambda: self.core.replace_namespaced_config_map(
                name, namespace, _raw(configmap), _preload_content=False
            ),
            deadline,
        )

    async def list_volume_attachments(self, deadline: Deadline | None = None) -> list[Json]:
        body = await self._call(
            "list",
            lambda: self.storage.list_volume_attachment(_preload_content=False),
            deadline,
        )
        return list(body.get("items", []))

    # ------------------------------------------------------------- writes
    async def replace_node(self, name: str, node: Json, deadline: Deadline | None = None) -> Dated:
        """PUT with the uid and resourceVersion that were read: 409 if either changed, 422 only
        for an object the API server finds invalid (never confused with a lost race)."""
        return await self._dated(
            "update",
            lambda: self.core.replace_node(name, _raw(node), _preload_content=False),
            deadline,
        )

    async def patch_node_json(
        self, name: str, operations: list[Json], deadline: Deadline | None = None
    ) -> Json:
        return await self._call(
            "patch",
            lambda: self.core.patch_node(name, operations, _preload_content=False),
            deadline,
        )

    async def delete_pod(
        self, namespace: str, name: str, uid: str, deadline: Deadline | None = None
    ) -> Json:
        options = client.V1DeleteOptions(
            grace_period_seconds=0, preconditions=client.V1Preconditions(uid=uid)
        )
        return await self._call(
            "delete",
            lambda: self.core.delete_namespaced_pod(
                name, namespace, body=options, grace_period_seconds=0, _preload_content=False
            ),
            deadline,
        )

    async def patch_pod_json(
        self, namespace: str, name: str, operations: list[Json], deadline: Deadline | None = None
    ) -> Json:
        return await self._call(
            "patch",
            lambda: self.core.patch_namespaced_pod(
                name, namespace, operations, _preload_content=False
            ),
            deadline,
        )

    async def create_event(
        self, namespace: str, event: Json, deadline: Deadline | None = None
    ) -> Json:
        return await self._call(
            "create",
            lambda: self.core.create_namespaced_event(
                namespace, _raw(event), _preload_content=False
            ),
            deadline,
        )

    async def delete_volume_attachment(self, name: str, deadline: Deadline | None = None) -> Json:
        return await self._call(
            "delete",
            lambda: self.storage.delete_volume_attachment(name, _preload_content=False),
            deadline,
        )
