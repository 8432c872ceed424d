"""A thin kubernetes-asyncio wrapper: raw JSON in and out, retries and request accounting.

Responses are read as plain dicts (``_preload_content=False``): model deserialisation of a
thousand pods costs more than the purge itself, and the adapter needs only a few fields. For the
same reason the calls go through ``ApiClient.call_api`` with their paths, as the generated API
classes would send them (same auth settings, headers and query parameters), and those classes
are never imported (``nodefence.kube.library``): the library is kept for what it is needed for,
configuration, credentials and TLS.
Transient failures (429, 5xx, connection errors, timeouts) are retried with backoff until the
request deadline; what remains is raised as ``ClusterUnavailableError`` so the webhook answers 503
and Alertmanager retries.

The status is read before the body: an error answer is an error of its status whatever its body
says (the real API server answers a path it does not serve, such as the group of a CRD that is
not installed, with a plain-text ``404 page not found``), and only a success body must be JSON.
Every reply is read with a size limit (``MAX_REPLY_BYTES``, ``MAX_ERROR_BYTES``, and
``MAX_EVENT_BYTES`` a watch event): a broken or hostile server that streams without end costs a
bounded amount of memory and one clear error, never the process.
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
from aiohttp.http_exceptions import LineTooLong

from nodefence.engine.authorship import FIELD_MANAGER
from nodefence.errors import ClusterUnavailableError
from nodefence.kube.backoff import Backoff
from nodefence.kube.library import defer_generated_modules
from nodefence.kube.ratelimit import Priority, RateLimiter, read_priority
from nodefence.kube.server_clock import ServerClock
from nodefence.kube.singleflight import SingleFlight

defer_generated_modules()
# After the deferral: these import the library's configuration and client, not its models.
from kubernetes_asyncio import config  # noqa: E402
from kubernetes_asyncio.client.api_client import ApiClient  # noqa: E402
from kubernetes_asyncio.client.configuration import Configuration  # noqa: E402

Json = dict[str, Any]
# Told of every request: its verb, its status code (or why it has none) and the seconds it
# took (None for one never sent).
RequestHook = Callable[[str, str, float | None], None]

RETRYABLE = frozenset({429, 500, 502, 503, 504})
# Between tries of one request, within its deadline (a Retry-After header is honoured instead).
RETRY = Backoff(0.05, 2.0, spread=(0.8, 1.2))
PAGE_SIZE = 500
CONFIGMAP = "/api/v1/namespaces/{namespace}/configmaps/{name}"
POD = "/api/v1/namespaces/{namespace}/pods/{name}"
VOLUME_ATTACHMENTS = "/apis/storage.k8s.io/v1/volumeattachments"
AUTH = ["BearerToken"]  # what every generated Kubernetes API method authenticates with
JSON = "application/json"
JSON_PATCH = "application/json-patch+json"
Query = list[tuple[str, Any]]
# The most one reply may hold. The largest nodefence asks for is a page of PAGE_SIZE Nodes or
# Pods: tens of kB each (etcd refuses any object over 1.5 MiB), so a few MB to a few tens of MB.
MAX_REPLY_BYTES = 64 * 1024 * 1024
# An error's body is a Status of a few hundred bytes; past this only its start is kept.
MAX_ERROR_BYTES = 64 * 1024
# One watch event: one object (a Node, a ConfigMap) and its envelope, on one line.
MAX_EVENT_BYTES = 8 * 1024 * 1024
# How much of an error body that is not a Status its message keeps.
TEXT_EXCERPT = 200


class ReplyTooLargeError(ClusterUnavailableError):
    """The API server's reply was larger than nodefence reads (``MAX_REPLY_BYTES``): it was
    not read further, and the request is not retried (the same request would stream the same)."""


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

    @classmethod
    def answered(cls, status: int, http_reason: str | None, raw: bytes) -> KubeError:
        """The error a reply of ``status`` is: its ``Status`` body's reason and message where
        it has one, else the HTTP reason phrase and the start of the body as text (a proxy's
        page, the API server's plain-text ``404 page not found``)."""
        body = _json_or_empty(raw)
        reason = str(body.get("reason") or "") or (http_reason or "")
        message = str(body.get("message") or "") or _excerpt(raw)
        return cls(status, reason, message, body)

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


async def load_api_client(kubeconfig: str | None = None, context: str | None = None) -> ApiClient:
    """The cluster as kubectl finds it (``kube.access``): ``kubeconfig`` (``--kubeconfig``),
    else ``KUBECONFIG``, else ``~/.kube/config``, else the in-cluster service account;
    ``context`` (``--context``, else ``NODEFENCE_CONTEXT``) else the kubeconfig's
    current-context. A kubeconfig that cannot be used raises ``KubeconfigError``, one line
    naming the file."""
    import os

    from nodefence.kube import access

    context = context or os.environ.get(access.CONTEXT_ENV) or None
    source = access.locate(kubeconfig)
    configuration = Configuration()
    if source.in_cluster:
        if context:
            raise access.KubeconfigError(
                f"--context {context} names a kubeconfig context, but there is no kubeconfig "
                "(no --kubeconfig, KUBECONFIG or ~/.kube/config)"
            )
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        return ApiClient(configuration=configuration)
    access.check_files(source)
    files = os.pathsep.join(str(path) for path in source.files or ())
    try:
        # Never written back: nodefence does not rewrite an operator's kubeconfig.
        await config.load_kube_config(
            config_file=files,
            context=context,
            client_configuration=configuration,
            persist_config=False,
        )
    except config.ConfigException as exc:
        raise access.KubeconfigError(f"{source.named_by}: {exc}") from None
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise access.KubeconfigError(
            f"{source.named_by}: not a usable kubeconfig ({type(exc).__name__}: {exc})"
        ) from None
    return ApiClient(configuration=configuration)


@dataclass
class Stream:
    """An open watch: its reply, read one event line at a time. ``close`` ends it."""

    response: Any

    async def next_line(self) -> bytes:
        """The next line of the stream; ``b""`` once the server ended it. A line longer than
        ``MAX_EVENT_BYTES`` is a broken stream (``aiohttp.ClientPayloadError``), as a cut one."""
        try:
            line: bytes = await self.response.content.readuntil(b"\n", max_size=MAX_EVENT_BYTES)
        except LineTooLong as exc:
            raise aiohttp.ClientPayloadError(
                f"a watch event longer than {MAX_EVENT_BYTES} bytes, not read further"
            ) from exc
        return line

    def close(self) -> None:
        self.response.release()


class KubeClient:
    """The calls nodefence makes, and nothing else (the RBAC role lists exactly these)."""

    def __init__(
        self,
        api: ApiClient,
        *,
        on_request: RequestHook | None = None,
        call_timeout: float = 5.0,
        limiter: RateLimiter | None = None,
    ) -> None:
        self.api = api
        self._on_request = on_request or (lambda _verb, _code, _seconds: None)
        self.call_timeout = call_timeout
        # The process's rate limit (``kube.ratelimit``); None: unlimited (one-shot commands).
        self.limiter = limiter
        # Concurrent GETs of one object share one request (``kube.singleflight``).
        self.flights: SingleFlight[Dated] = SingleFlight()
        # The API server's clock as its replies' Date headers show it, between requests.
        self.server_clock = ServerClock()

    async def close(self) -> None:
        await self.api.close()

    def _send(
        self,
        method: str,
        path: str,
        *,
        query: Query | None = None,
        body: Any = None,
        content_type: str = JSON,
        timeout: Any = None,
        **names: str,
    ) -> Awaitable[Any]:
        """One request as a generated API method sends it; ``{name}``-style parts of ``path``
        are filled from ``names`` and quoted, exactly as the generated methods do."""
        return self.api.call_api(  # type: ignore[no-any-return]
            path,
            method,
            path_params=names or None,
            query_params=list(query or []),
            header_params={"Accept": JSON, "Content-Type": content_type},
            body=body,
            auth_settings=AUTH,
            _preload_content=False,
            _request_timeout=timeout,
        )

    async def _call(
        self,
        verb: str,
        factory: Callable[[], Awaitable[Any]],
        deadline: Deadline | None,
        priority: Priority | None = None,
    ) -> Json:
        return (await self._dated(verb, factory, deadline, priority)).body

    async def _shared(
        self, key: str, factory: Callable[[], Awaitable[Any]], deadline: Deadline | None
    ) -> Dated:
        """A GET that concurrent callers of the same ``key`` (path and query) share."""
        return await self.flights.run(key, lambda: self._dated("get", factory, deadline))

    async def _write(
        self,
        key: str,
        verb: str,
        factory: Callable[[], Awaitable[Any]],
        deadline: Deadline | None,
        priority: Priority | None = None,
    ) -> Dated:
        """A write to the object a shared GET of ``key`` reads: no read that starts after the
        write returns joins a GET sent before it (a caller reads its own writes)."""
        self.flights.forget(key)
        try:
            return await self._dated(verb, factory, deadline, priority)
        finally:
            self.flights.wrote(key)

    async def _dated(
        self,
        verb: str,
        factory: Callable[[], Awaitable[Any]],
        deadline: Deadline | None,
        priority: Priority | None = None,
    ) -> Dated:
        deadline = deadline or Deadline(self.call_timeout * 3)
        if priority is None:
            # Reads at the caller's priority; writes are those of a fence in progress.
            priority = read_priority() if verb in ("get", "list") else Priority.FENCE
        attempt = 0
        last_problem = "no attempt made"
        while True:
            attempt += 1
            if self.limiter is not None:
                try:
                    await self.limiter.acquire(priority, deadline.remaining)
                except ClusterUnavailableError:
                    # Never sent: counted as nodefence_kube_api_requests_total{code=...}.
                    self._on_request(verb, "rate-limited", None)
                    raise
            timeout = max(0.05, min(self.call_timeout, deadline.remaining))
            retry_after: float | None = None
            sent = time.monotonic()
            try:
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancel that
                # races a reply, and a cancelled request must not go on retrying.
                async with asyncio.timeout(timeout):
                    response = await factory()
                    try:
                        status = int(response.status)
                        raw = await read_limited(response, status)
                    except ReplyTooLargeError:
                        self._on_request(verb, "too-large", time.monotonic() - sent)
                        raise
                    finally:
                        response.release()
                self._on_request(verb, str(status), time.monotonic() - sent)
                self.server_clock.saw(response.headers.get("Date"))
                if status < 400:
                    # A success must be JSON; one that is not is garbled, retried as a cut reply.
                    body: Json = json.loads(raw) if raw else {}
                    return Dated(body, server_date(response.headers.get("Date")))
                error = KubeError.answered(status, response.reason, raw)
                if status not in RETRYABLE:
                    raise error
                last_problem = f"{status} {error.message}".strip()
                header = response.headers.get("Retry-After")
                if header and header.isdigit():
                    retry_after = float(header)
            except (
                TimeoutError,
                aiohttp.ClientError,
                OSError,
                UnicodeError,
                json.JSONDecodeError,
            ) as exc:
                self._on_request(verb, "error", time.monotonic() - sent)
                last_problem = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            backoff = (
                retry_after * random.uniform(*RETRY.spread)  # noqa: S311 - jitter, not security
                if retry_after is not None
                else RETRY.delay(attempt + 1)
            )
            if deadline.remaining <= backoff:
                raise ClusterUnavailableError(
                    f"Kubernetes API unavailable after {attempt} attempts: {last_problem}"
                )
            await asyncio.sleep(backoff)

    # -------------------------------------------------------------- reads
    async def version(self, deadline: Deadline | None = None) -> Json:
        shared = await self._shared("/version/", lambda: self._send("GET", "/version/"), deadline)
        return shared.body

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
        selector = [("labelSelector", label_selector)] if label_selector else []

        def page(token: str | None) -> Awaitable[Any]:
            return self._send("GET", "/api/v1/nodes", query=[*selector, *_page(token)])

        return await self._list_all("list", page, deadline)

    async def list_node_page(
        self, token: str | None = None, deadline: Deadline | None = None, *, limit: int = PAGE_SIZE
    ) -> Json:
        """One page of the Node list: ``items``, and in ``metadata`` the ``continue`` token of
        the next page (none on the last) and the list's ``resourceVersion`` (where a watch
        resumes). For callers that keep only a summary of each page, never the whole list."""
        query = [("limit", limit), *([("continue", token)] if token else [])]
        return await self._call(
            "list", lambda: self._send("GET", "/api/v1/nodes", query=query), deadline
        )

    async def watch_nodes(
        self, resource_version: str, timeout_seconds: int, *, idle_seconds: float
    ) -> Stream:
        """A watch of every Node from ``resource_version`` (bookmarks asked for), which the
        server ends after ``timeout_seconds``; a stream silent for ``idle_seconds`` fails the
        next read. Any status but 200 raises ``KubeError`` (410: the version is too old)."""
        query: Query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", timeout_seconds),
        ]
        return await self._watch("/api/v1/nodes", query, idle_seconds)

    async def _watch(
        self, path: str, query: Query, idle_seconds: float | None, **params: str
    ) -> Stream:
        """Open a watch: no total timeout (the server ends it), only ``idle_seconds`` of
        silence; a refusal is raised as the status the server answered."""
        timeout = aiohttp.ClientTimeout(
            total=None, connect=self.call_timeout, sock_read=idle_seconds
        )
        if self.limiter is not None:
            await self.limiter.acquire(Priority.LIVE)
        sent = time.monotonic()
        response = await self._send("GET", path, query=query, timeout=timeout, **params)
        status = int(response.status)
        self._on_request("watch", str(status), time.monotonic() - sent)
        if status == 200:
            return Stream(response)
        try:
            raw = await read_limited(response, status)
        finally:
            response.release()
        raise KubeError.answered(status, response.reason, raw)

    async def get_node(self, name: str, deadline: Deadline | None = None) -> Dated:
        return await self._shared(
            f"/api/v1/nodes/{name}",
            lambda: self._send("GET", "/api/v1/nodes/{name}", name=name),
            deadline,
        )

    async def get_lease(self, namespace: str, name: str, deadline: Deadline | None = None) -> Dated:
        path = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        return await self._shared(
            path.format(namespace=namespace, name=name),
            lambda: self._send("GET", path, namespace=namespace, name=name),
            deadline,
        )

    async def list_pods_on_node(self, node: str, deadline: Deadline | None = None) -> list[Json]:
        selector = ("fieldSelector", f"spec.nodeName={node}")

        def page(token: str | None) -> Awaitable[Any]:
            return self._send("GET", "/api/v1/pods", query=[selector, *_page(token)])

        return await self._list_all("list", page, deadline)

    async def list_pods_in(self, namespace: str, deadline: Deadline | None = None) -> list[Json]:
        """Every pod of one namespace, a page at a time: where a fenced node's StatefulSet and
        Deployment pods come back (``engine.recovery``)."""
        path = "/api/v1/namespaces/{namespace}/pods"

        def page(token: str | None) -> Awaitable[Any]:
            return self._send("GET", path, query=_page(token), namespace=namespace)

        return await self._list_all("list", page, deadline)

    async def get_configmap(
        self, namespace: str, name: str, deadline: Deadline | None = None
    ) -> Json:
        return (await self.get_configmap_dated(namespace, name, deadline)).body

    async def get_configmap_dated(
        self, namespace: str, name: str, deadline: Deadline | None = None
    ) -> Dated:
        return await self._shared(
            CONFIGMAP.format(namespace=namespace, name=name),
            lambda: self._send("GET", CONFIGMAP, namespace=namespace, name=name),
            deadline,
        )

    async def list_configmap_named(
        self, namespace: str, name: str, deadline: Deadline | None = None
    ) -> Json:
        """The list of the one ConfigMap ``name`` (empty while it does not exist) and its
        resourceVersion, where a watch of it resumes; by field selector, so the Role can grant
        it for that name only."""
        query = [("fieldSelector", f"metadata.name={name}")]
        path = "/api/v1/namespaces/{namespace}/configmaps"
        return await self._call(
            "list", lambda: self._send("GET", path, query=query, namespace=namespace), deadline
        )

    async def watch_configmap_named(
        self,
        namespace: str,
        name: str,
        resource_version: str,
        timeout_seconds: int,
        *,
        idle_seconds: float,
    ) -> Stream:
        """A watch of the one ConfigMap ``name`` from ``resource_version``, as ``watch_nodes``
        (bookmarks asked for, ended by the server after ``timeout_seconds``)."""
        query: Query = [
            ("fieldSelector", f"metadata.name={name}"),
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", timeout_seconds),
        ]
        path = "/api/v1/namespaces/{namespace}/configmaps"
        return await self._watch(path, query, idle_seconds, namespace=namespace)

    async def create_configmap(
        self,
        namespace: str,
        configmap: Json,
        deadline: Deadline | None = None,
        priority: Priority | None = None,
    ) -> Dated:
        """``priority`` None: the write of a fence in progress (see ``_dated``)."""
        path = "/api/v1/namespaces/{namespace}/configmaps"
        name = str((configmap.get("metadata") or {}).get("name", ""))
        return await self._write(
            CONFIGMAP.format(namespace=namespace, name=name),
            "create",
            lambda: self._send("POST", path, body=configmap, namespace=namespace),
            deadline,
            priority,
        )

    async def replace_configmap(
        self,
        namespace: str,
        name: str,
        configmap: Json,
        deadline: Deadline | None = None,
        priority: Priority | None = None,
    ) -> Dated:
        """PUT with the resourceVersion in ``configmap``: 409 if anyone wrote it since.
        ``priority`` None: the write of a fence in progress (see ``_dated``)."""
        return await self._write(
            CONFIGMAP.format(namespace=namespace, name=name),
            "update",
            lambda: self._send("PUT", CONFIGMAP, body=configmap, namespace=namespace, name=name),
            deadline,
            priority,
        )

    async def list_volume_attachments(self, deadline: Deadline | None = None) -> list[Json]:
        def page(token: str | None) -> Awaitable[Any]:
            return self._send("GET", VOLUME_ATTACHMENTS, query=_page(token))

        return await self._list_all("list", page, deadline)

    # ------------------------------------------------------------- writes
    async def replace_node(self, name: str, node: Json, deadline: Deadline | None = None) -> Dated:
        """PUT with the uid and resourceVersion that were read: 409 if either changed, 422 only
        for an object the API server finds invalid (never confused with a lost race)."""
        return await self._write(
            f"/api/v1/nodes/{name}",
            "update",
            lambda: self._send(
                "PUT",
                "/api/v1/nodes/{name}",
                # S4: the API server records this writer in managedFields, the authorship the
                # engine reads back (engine.authorship).
                query=[("fieldManager", FIELD_MANAGER)],
                body=node,
                name=name,
            ),
            deadline,
        )

    async def patch_node_json(
        self, name: str, operations: list[Json], deadline: Deadline | None = None
    ) -> Json:
        written = await self._write(
            f"/api/v1/nodes/{name}",
            "patch",
            lambda: self._send(
                "PATCH", "/api/v1/nodes/{name}", body=operations, content_type=JSON_PATCH, name=name
            ),
            deadline,
        )
        return written.body

    async def delete_pod(
        self, namespace: str, name: str, uid: str, deadline: Deadline | None = None
    ) -> Json:
        options = {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
        return await self._call(
            "delete",
            lambda: self._send(
                "DELETE",
                POD,
                query=[("gracePeriodSeconds", 0)],
                body=options,
                namespace=namespace,
                name=name,
            ),
            deadline,
        )

    async def patch_pod_json(
        self, namespace: str, name: str, operations: list[Json], deadline: Deadline | None = None
    ) -> Json:
        return await self._call(
            "patch",
            lambda: self._send(
                "PATCH",
                POD,
                body=operations,
                content_type=JSON_PATCH,
                namespace=namespace,
                name=name,
            ),
            deadline,
        )

    async def create_event(
        self, namespace: str, event: Json, deadline: Deadline | None = None
    ) -> Json:
        path = "/api/v1/namespaces/{namespace}/events"
        return await self._call(
            "create",
            lambda: self._send("POST", path, body=event, namespace=namespace),
            deadline,
            # A report of what was done or refused: it waits behind everything that acts.
            Priority.REFUSAL,
        )

    async def patch_event(
        self, namespace: str, name: str, patch: Json, deadline: Deadline | None = None
    ) -> Json:
        """A repeat counted onto the Event its first occurrence created (merge patch)."""
        path = "/api/v1/namespaces/{namespace}/events/{name}"
        return await self._call(
            "patch",
            lambda: self._send(
                "PATCH",
                path,
                body=patch,
                content_type="application/merge-patch+json",
                namespace=namespace,
                name=name,
            ),
            deadline,
            Priority.REFUSAL,
        )

    async def delete_volume_attachment(
        self, name: str, uid: str, deadline: Deadline | None = None
    ) -> Json:
        """409 when the attachment of that name is not the one read (another UID)."""
        options = {"preconditions": {"uid": uid}} if uid else None
        return await self._call(
            "delete",
            lambda: self._send("DELETE", VOLUME_ATTACHMENTS + "/{name}", body=options, name=name),
            deadline,
        )


def _page(token: str | None) -> Query:
    return [("limit", PAGE_SIZE), *([("continue", token)] if token else [])]


async def read_limited(response: Any, status: int) -> bytes:
    """The body of a reply of ``status``, read to at most ``MAX_REPLY_BYTES`` (a success,
    which must be whole: beyond it, ``ReplyTooLargeError``) or ``MAX_ERROR_BYTES`` (an error,
    whose status is the answer: beyond it, only its start is kept). A body refused or cut is
    never read to its end: the connection is closed instead."""
    limit = MAX_REPLY_BYTES if status < 400 else MAX_ERROR_BYTES
    declared = response.content_length
    body = bytearray()
    if declared is None or declared <= limit:
        while chunk := await response.content.readany():
            body += chunk
            if len(body) > limit:
                break
    if len(body) <= limit and (declared is None or declared <= limit):
        return bytes(body)
    response.close()
    if status >= 400:
        return bytes(body[:limit])
    where = f"{response.method} {response.url.path}"
    raise ReplyTooLargeError(
        f"the reply to {where} was larger than {limit // (1024 * 1024)} MiB, the most nodefence "
        "reads of one reply; it was not read further"
    )


def _excerpt(raw: bytes) -> str:
    """The start of a body that is not a Status, as one printable line."""
    text = raw[: TEXT_EXCERPT * 4].decode("utf-8", errors="replace")
    line = " ".join(text.split())
    printable = "".join(c if c.isprintable() else "?" for c in line)
    return printable[:TEXT_EXCERPT]


def _json_or_empty(raw: bytes) -> Json:
    try:
        body = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}
