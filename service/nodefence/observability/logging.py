"""structlog set up for one JSON object per line (or a console rendering for people).

Redaction is a processor in the chain rather than a convention at call sites, so a secret
passed by mistake, as a ``SecretStr`` or under a key such as ``token``, is masked before any
renderer sees it. Records from the standard library (aiohttp, kubernetes-asyncio) go through
the same chain.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import re
import sys
from collections.abc import Callable
from typing import Any, Literal, TextIO, cast

import structlog
from pydantic import SecretBytes, SecretStr
from structlog.typing import EventDict, Processor, WrappedLogger

MASK = "********"
_SECRET_KEY = re.compile(r"token|secret|passw|authorization|api[-_]?key|cookie", re.IGNORECASE)


@dataclasses.dataclass
class _Configuration:
    # Bumped by each ``configure_logging``: loggers assembled before it assemble themselves
    # again.
    generation: int = 0


_CONFIGURATION = _Configuration()
_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


# Values of exactly these types hold nothing to mask: most of every line, passed through
# without a look (a subclass takes the full path, so a str subclass is still looked at).
_PLAIN = frozenset({str, int, float, bool, type(None)})


@functools.lru_cache(maxsize=4096)
def _secret_key(key: str) -> bool:
    """Whether ``key`` sounds secret; keys repeat on every line, so each is matched once."""
    return _SECRET_KEY.search(key) is not None


def _redact(value: Any) -> Any:
    if type(value) in _PLAIN:
        return value
    if isinstance(value, SecretStr | SecretBytes):
        return MASK
    if isinstance(value, dict):
        return {
            key: MASK if isinstance(key, str) and _secret_key(key) else _redact(item)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [_redact(item) for item in value]
    return value


def redact_secrets(_: WrappedLogger, __: str, event_dict: EventDict) -> EventDict:
    """Mask secret values and values under secret-sounding keys, at any depth."""
    for key, value in event_dict.items():
        if key != "event" and _secret_key(key):
            event_dict[key] = MASK
        elif type(value) not in _PLAIN:
            event_dict[key] = _redact(value)
    return event_dict


@functools.lru_cache(maxsize=8)
def _encoder(default: Callable[[Any], Any]) -> json.JSONEncoder:
    return json.JSONEncoder(default=default)


def _dumps(value: Any, *, default: Callable[[Any], Any]) -> str:
    """``json.dumps(value, default=default)``, the same text, without building an encoder for
    every line."""
    return _encoder(default).encode(value)


def _shared_processors() -> list[Processor]:
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
        redact_secrets,
    ]


def configure_logging(
    log_format: Literal["json", "console"] = "json",
    level: str = "info",
    *,
    stream: TextIO | None = None,
) -> None:
    """Configure structlog and the standard library root logger to write to ``stream``."""
    _CONFIGURATION.generation += 1
    output = stream if stream is not None else sys.stdout
    numeric_level = _LEVELS.get(level.lower(), logging.INFO)
    renderer: Processor = (
        structlog.processors.JSONRenderer(serializer=_dumps)
        if log_format == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[*_shared_processors(), renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric_level),
        logger_factory=structlog.WriteLoggerFactory(file=output),
        cache_logger_on_first_use=False,
    )

    handler = logging.StreamHandler(output)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=_shared_processors(),
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(numeric_level)
    # aiohttp's access log would duplicate the request line the receiver logs itself.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


class _Logger:
    """A module-level logger that follows a later ``configure_logging`` (level, format,
    stream) instead of keeping the first configuration, without assembling a new bound logger
    for every line as structlog's lazy proxy does: it is assembled again only when the
    configuration changed."""

    __slots__ = ("_bound", "_generation", "_name")

    def __init__(self, name: str) -> None:
        self._name = name
        self._bound: Any = None
        self._generation = -1

    def __getattr__(self, attribute: str) -> Any:
        if self._generation != _CONFIGURATION.generation:
            self._bound = structlog.get_logger(component=self._name).bind()
            self._generation = _CONFIGURATION.generation
        return getattr(self._bound, attribute)


def reset_logging() -> None:
    """structlog's defaults again (a test leaving logging as it found it); loggers follow."""
    _CONFIGURATION.generation += 1
    structlog.reset_defaults()


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    """A logger whose lines carry ``component=name``, so a reader can tell the component apart."""
    return cast(structlog.typing.FilteringBoundLogger, _Logger(name))
