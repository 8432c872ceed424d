"""Ask Alertmanager (API v2) which handled node alerts are firing now.

The answer feeds the reconcile pass, which re-evaluates each node as a firing delivery would, so
every event here is built by the same code as a webhook's events: a node named by an alert
through the API is the node the same alert would name in a webhook.

Only alerts that would notify someone are returned: active, not silenced, not inhibited. A
silence is how an operator says "leave this node alone" without pausing nodefence; the retry
must respect it as the webhook path does (Alertmanager sends no webhook for a silenced alert).
"""

from __future__ import annotations

import base64
import json
import re
import ssl
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import aiohttp
from pydantic import ValidationError

from nodefence.alertmanager.config import AlertmanagerConfig
from nodefence.alerts.events import extract_events
from nodefence.alerts.webhook import WebhookPayload
from nodefence.engine.matchers import (
    MAX_MATCHERS,
    MAX_VALUE_CHARS,
    Matcher,
    Operator,
    all_match,
)
from nodefence.engine.model import AlertEvent
from nodefence.engine.silences import (
    MAX_COMMENT_CHARS,
    MAX_CREATOR_CHARS,
    MAX_ID_CHARS,
    Silence,
)

# Told how many seconds each request to the API took, answered or failed.
Observer = Callable[[float], None]

# The characters Go's regexp.QuoteMeta escapes; any other character is literal in RE2.
_REGEX_SPECIAL = re.compile(r"[\\.+*?()|\[\]{}^$]")


class AlertmanagerUnavailableError(Exception):
    """Alertmanager could not be asked, or its answer cannot be trusted.

    The message names the URL (never a credential) and the cause, since it ends up in the
    reconcile pass's log line and in ``check-config`` output.
    """


def alertname_matcher(names: Sequence[str]) -> str:
    """An API v2 ``filter`` matcher selecting exactly ``names``.

    Alertmanager anchors regex matchers, and every regex metacharacter is escaped, so a name is
    matched literally: ``KubeNodeNotReady`` never selects ``KubeNodeNotReadyX``. Filtering on
    the server keeps the response proportional to the node alerts, not to every alert an
    outage raises.
    """
    pattern = "|".join(_REGEX_SPECIAL.sub(lambda m: "\\" + m.group(0), name) for name in names)
    quoted = pattern.replace("\\", "\\\\").replace('"', '\\"')
    return f'alertname=~"{quoted}"'


async def active_alerts(
    config: AlertmanagerConfig,
    names: Sequence[str],
    node_labels: Sequence[str],
    *,
    observe: Observer | None = None,
) -> list[AlertEvent]:
    """The firing, unsilenced, uninhibited alerts named ``names`` that name a node.

    ``node_labels`` is the policy's ``alerts.node_labels``. ``config.timeout`` bounds the
    whole exchange; a caller whose own deadline is nearer wraps the call in ``asyncio.timeout``.
    Raises :class:`AlertmanagerUnavailableError` on any failure: a partial or unverified answer
    is never returned, because an alert missing from it would look resolved. ``observe`` is
    told how long the request took.
    """
    if not names:
        return []
    query = _alert_query(config, alertname_matcher(names))
    body = await _fetch(config, config.alerts_url, query, observe=observe)
    try:
        payload = _as_payload(_ours(config, json.loads(body)))
    except (ValueError, TypeError) as exc:
        raise _error(config, f"answered with a body that is not a list of alerts: {exc}") from None
    events = extract_events(payload, alert_names=names, node_labels=node_labels)
    return [e for e in events if e.alertname in names and e.node is not None]


async def held_nodes(
    config: AlertmanagerConfig,
    names: Sequence[str],
    node_labels: Sequence[str],
    *,
    observe: Observer | None = None,
) -> set[str]:
    """The nodes named by any alert called ``names`` that Alertmanager holds, whatever its
    state: firing, silenced, inhibited or not processed yet. The fallback leaves these nodes
    alone (``engine.fallback``): a firing one is judged as an alert, and a suppressed one is a
    person's or a rule's word that nobody should act. Raises
    :class:`AlertmanagerUnavailableError` as ``active_alerts`` does: an answer that cannot be
    read never reads as "holds none"."""
    if not names:
        return set()
    params = {"active": "true", "silenced": "true", "inhibited": "true", "unprocessed": "true"}
    query = _alert_query(config, alertname_matcher(names), params)
    body = await _fetch(config, config.alerts_url, query, observe=observe)
    try:
        payload = _as_payload(_ours(config, json.loads(body)), suppressed_too=True)
    except (ValueError, TypeError) as exc:
        raise _error(config, f"answered with a body that is not a list of alerts: {exc}") from None
    events = extract_events(payload, alert_names=names, node_labels=node_labels)
    return {e.node for e in events if e.alertname in names and e.node is not None}


async def active_silences(
    config: AlertmanagerConfig, *, observe: Observer | None = None
) -> list[Silence]:
    """Every silence Alertmanager holds that is in force or yet to start, as it answered them.

    Not filtered on the server: Alertmanager's ``filter`` on silences compares the silence's
    own matchers as if they were labels, so a silence without a ``cluster`` matcher (which
    silences every cluster's alerts) would be left out by ``cluster="prod-a"``. The caller
    judges each silence against the labels its node's alert would carry
    (``engine.silences``). Raises :class:`AlertmanagerUnavailableError` as ``active_alerts``
    does: a list that cannot be read never reads as "no silence"."""
    body = await _fetch(config, config.silences_url, [], observe=observe)
    try:
        return silences_from_json(json.loads(body))
    except (ValueError, TypeError) as exc:
        raise _error(
            config,
            f"answered with a body that is not a list of silences: {exc}",
            config.silences_url,
        ) from None


def silences_from_json(data: Any) -> list[Silence]:
    """Silences in the API v2 shape (``gettableSilences``), the expired ones left out. Each
    field read from outside is bounded (``engine.silences``); an entry that is not a silence
    makes the whole answer unreadable rather than quietly dropping a person's silence."""
    if not isinstance(data, list):
        raise TypeError("expected a JSON array of silence objects")
    found: list[Silence] = []
    for index, raw in enumerate(data):
        if not isinstance(raw, dict):
            raise TypeError(f"[{index}] is not an object")
        status = raw.get("status")
        state = status.get("state") if isinstance(status, dict) else None
        if state == "expired":
            continue
        try:
            found.append(_silence(raw, in_force=state == "active"))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"[{index}]: {exc}") from None
    return found


def _silence(raw: dict[str, Any], *, in_force: bool) -> Silence:
    matchers = raw["matchers"]
    if not isinstance(matchers, list) or not matchers or len(matchers) > MAX_MATCHERS:
        raise ValueError(f"matchers must be a list of 1 to {MAX_MATCHERS}")
    read: list[Matcher] = []
    for matcher in matchers:
        name, value = str(matcher["name"]), str(matcher["value"])
        if len(name) > MAX_VALUE_CHARS or len(value) > MAX_VALUE_CHARS:
            raise ValueError(f"a matcher is longer than {MAX_VALUE_CHARS} characters")
        regex = bool(matcher.get("isRegex", False))
        # isEqual is absent from Alertmanager before 0.22: equal then.
        equal = bool(matcher.get("isEqual", True))
        op: Operator = ("=~" if equal else "!~") if regex else ("=" if equal else "!=")
        read.append(Matcher(name, value, op))
    return Silence(
        id=str(raw["id"])[:MAX_ID_CHARS],
        matchers=tuple(read),
        starts_at=_instant(raw["startsAt"]),
        ends_at=_instant(raw["endsAt"]),
        created_by=str(raw.get("createdBy", ""))[:MAX_CREATOR_CHARS],
        comment=str(raw.get("comment", ""))[:MAX_COMMENT_CHARS],
        in_force=in_force,
    )


def silences_to_json(silences: Sequence[Silence]) -> list[dict[str, Any]]:
    """The API v2 shape again, for the shared record of silences last read."""
    return [
        {
            "id": s.id,
            "matchers": [
                {
                    "name": m.name,
                    "value": m.value,
                    "isRegex": m.op in {"=~", "!~"},
                    "isEqual": m.op in {"=", "=~"},
                }
                for m in s.matchers
            ],
            "startsAt": s.starts_at.isoformat(),
            "endsAt": s.ends_at.isoformat(),
            "createdBy": s.created_by,
            "comment": s.comment,
            "status": {"state": "active" if s.in_force else "pending"},
        }
        for s in silences
    ]


def _instant(value: Any) -> datetime:
    if not isinstance(value, str):
        raise TypeError("a time is not a string")
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        raise ValueError(f"time {value[:40]!r} has no zone")
    return parsed.astimezone(UTC)


def _ours(config: AlertmanagerConfig, data: Any) -> Any:
    """This cluster's alerts only, judged here too: the query asked Alertmanager for them, but
    a proxy or another implementation of the API may ignore ``filter``, and another cluster's
    alert would fence a node of this one that happens to share its name."""
    wanted = config.cluster_matchers
    if not wanted or not isinstance(data, list):
        return data
    return [
        alert
        for alert in data
        if isinstance(alert, dict)
        and isinstance(alert.get("labels"), dict)
        and all_match(wanted, {str(k): str(v) for k, v in alert["labels"].items()}, unknown=False)
    ]


async def cluster_label_values(
    config: AlertmanagerConfig, names: Sequence[str], *, observe: Observer | None = None
) -> dict[str, list[str]]:
    """The values of every label whose name speaks of a cluster (``cluster``,
    ``k8s_cluster``, ...) on the node alerts Alertmanager holds, in any state: a label with
    several values means an Alertmanager shared by clusters, whose alerts
    ``NODEFENCE_ALERTMANAGER_MATCHERS`` must tell apart (``check-config`` says so)."""
    if not names:
        return {}
    params = {"active": "true", "silenced": "true", "inhibited": "true", "unprocessed": "true"}
    query = _alert_query(config, alertname_matcher(names), params)
    body = await _fetch(config, config.alerts_url, query, observe=observe)
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise _error(config, f"answered with a body that is not JSON: {exc}") from None
    values: dict[str, set[str]] = {}
    for alert in data if isinstance(data, list) else []:
        labels = alert.get("labels") if isinstance(alert, dict) else None
        for name, value in (labels or {}).items():
            if "cluster" in str(name).lower():
                values.setdefault(str(name), set()).add(str(value))
    return {name: sorted(found) for name, found in sorted(values.items())}


def is_active(alert: dict[str, Any]) -> bool:
    """The API's own word on one alert: ``status.state`` active, silenced and inhibited by
    nothing. The query asks for exactly that, but a proxy in front of Alertmanager or another
    implementation of its API may ignore the query parameters, and a suppressed alert must
    never be acted on: a person silenced it. An alert whose state cannot be read is not."""
    status = alert.get("status")
    if not isinstance(status, dict):
        return False
    return (
        status.get("state") == "active"
        and not status.get("silencedBy")
        and not status.get("inhibitedBy")
    )


def _as_payload(data: Any, *, suppressed_too: bool = False) -> WebhookPayload:
    """The API's alerts, shaped as a webhook delivery so that one parser judges both.

    Every alert returned for ``active=true`` is firing; the API's ``status`` object (its
    suppression state) is not the webhook's status string and is replaced. Only the active
    ones are kept, unless ``suppressed_too``.
    """
    if not isinstance(data, list) or not all(isinstance(a, dict) for a in data):
        raise TypeError("expected a JSON array of alert objects")
    alerts = [{**alert, "status": "firing"} for alert in data]
    try:
        payload = WebhookPayload.model_validate(
            {"version": "4", "status": "firing", "alerts": alerts}
        )
        active = [a for a, raw in zip(alerts, data, strict=True) if is_active(raw)]
        if suppressed_too or len(active) == len(alerts):
            return payload
        return WebhookPayload.model_validate({"version": "4", "status": "firing", "alerts": active})
    except ValidationError as exc:
        # The location and message only: the offending value may be anything.
        first = exc.errors(include_url=False, include_input=False)[0]
        location = ".".join(str(p) for p in first["loc"])
        raise ValueError(f"{location}: {first['msg']}") from None


ACTIVE_ONLY = {"active": "true", "silenced": "false", "inhibited": "false"}


def _alert_query(
    config: AlertmanagerConfig, matcher: str, states: dict[str, str] | None = None
) -> list[tuple[str, str]]:
    """The alert states asked for and the filters: ``matcher`` and this cluster's matchers."""
    filters = [matcher, *(str(m) for m in config.cluster_matchers)]
    return [*(states or ACTIVE_ONLY).items(), *(("filter", f) for f in filters)]


async def _fetch(
    config: AlertmanagerConfig,
    url: str,
    params: list[tuple[str, str]],
    *,
    observe: Observer | None = None,
) -> bytes:
    sent = time.monotonic()
    try:
        return await _exchange(config, url, params)
    finally:
        if observe is not None:
            observe(time.monotonic() - sent)


async def _exchange(config: AlertmanagerConfig, url: str, params: list[tuple[str, str]]) -> bytes:
    headers = {"Accept": "application/json"}
    if config.bearer_token is not None:
        headers["Authorization"] = f"Bearer {config.bearer_token.get_secret_value()}"
    elif config.basic_user is not None and config.basic_password is not None:
        pair = f"{config.basic_user}:{config.basic_password.get_secret_value()}".encode()
        headers["Authorization"] = f"Basic {base64.b64encode(pair).decode()}"
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=config.timeout)) as session,
            session.get(
                url,
                params=params,
                headers=headers,
                ssl=_tls(config),
                # A redirect would carry the credentials to wherever it points.
                allow_redirects=False,
            ) as response,
        ):
            if response.status in {401, 403}:
                raise _error(
                    config,
                    f"refused the credentials (HTTP {response.status}); check "
                    "NODEFENCE_ALERTMANAGER_TOKEN or NODEFENCE_ALERTMANAGER_USER/PASSWORD",
                    url,
                )
            if response.status != 200:
                snippet = (await response.content.read(200)).decode(errors="replace").strip()
                raise _error(config, f"answered HTTP {response.status}: {snippet!r}", url)
            return await _bounded_body(config, response, url)
    except AlertmanagerUnavailableError:
        raise
    except TimeoutError:
        raise _error(config, f"did not answer within {config.timeout:g}s", url) from None
    except (aiohttp.ClientError, ssl.SSLError, OSError) as exc:
        raise _error(config, f"unreachable: {type(exc).__name__}: {exc}", url) from None


async def _bounded_body(
    config: AlertmanagerConfig, response: aiohttp.ClientResponse, url: str
) -> bytes:
    limit = config.max_response_bytes
    if response.content_length is not None and response.content_length > limit:
        raise _error(config, f"answered {response.content_length} bytes, over the {limit}", url)
    body = await response.content.read(limit + 1)
    while len(body) <= limit:
        chunk = await response.content.read(limit + 1 - len(body))
        if not chunk:
            return body
        body += chunk
    raise _error(config, f"answered more than {limit} bytes", url)


def _tls(config: AlertmanagerConfig) -> ssl.SSLContext | bool:
    if not config.url.startswith("https://"):
        return True
    if config.insecure:
        return False
    cafile = str(config.ca_file) if config.ca_file is not None else None
    try:
        return ssl.create_default_context(cafile=cafile)
    except (OSError, ssl.SSLError) as exc:
        raise _error(config, f"CA bundle {cafile} cannot be read: {exc}") from None


def _error(
    config: AlertmanagerConfig, cause: str, url: str | None = None
) -> AlertmanagerUnavailableError:
    message = f"Alertmanager at {url or config.alerts_url} {cause}"
    for secret in config.secrets():
        message = message.replace(secret, "********")
    return AlertmanagerUnavailableError(message)
