"""A fence agent's own description of its options, and the one name nodefence gives each (S10).

fencing.py reads ``systems_uri`` and ``systems-uri``, ``plug`` and ``port``, ``ip`` and
``ipaddr`` as one option, and of two lines naming it, the last one wins. Had nodefence looked
up another spelling than the agent's, it would check one machine while the agent powered off
another. So the spellings come from the agent itself (its ``action=metadata``: every parameter,
the ``deprecated`` spelling each newer one ``obsoletes``, the long option in ``getopt``), each
inventory entry is rewritten to one name per option (the long option with ``_`` for ``-``, as
the agent's newer spelling reads), and an option given twice or one the agent does not know is
a configuration error. What nodefence checks and what it sends on stdin are then the same lines.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from pydantic import SecretStr

# What an agent gets in its environment (when it describes itself and when it runs): enough to
# find its helpers, nothing of ours.
SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
METADATA_TIMEOUT_SECONDS = 30.0
MAX_METADATA_BYTES = 1 << 20
_PARAMETER = re.compile(r"<parameter\s+name=\"([^\"]+)\"([^>]*)>\s*<getopt\s+mixed=\"([^\"]*)\"")
_LONG_OPTION = re.compile(r"--([A-Za-z0-9][A-Za-z0-9_-]*)")
# The agent's environment when it describes itself: the same bare one it runs with.
_ENVIRONMENT = {"PATH": SAFE_PATH, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}

# A parameter's value as the inventory holds it: a credential's is a ``SecretStr``.
ParameterValue = str | SecretStr
V = TypeVar("V")


class MetadataError(ValueError):
    """The agent's options cannot be known; the message says why, with no parameter value."""


@dataclass(frozen=True)
class AgentOptions:
    """The options one agent reads on stdin: fencing.py's key of each (``ipaddr``, ``port``,
    ``login``) and the long option it maps stdin names through (``ip``, ``plug``,
    ``username``)."""

    agent: str
    long_options: Mapping[str, str]

    def key(self, name: str) -> str | None:
        """The option fencing.py's stdin parser files the line ``name=...`` under, or ``None``
        for a name it ignores: the long option with ``-`` and ``_`` taken for each other,
        otherwise the key itself."""
        by_long = {long: key for key, long in self.long_options.items()}
        if name.replace("-", "_") in by_long:
            return by_long[name.replace("-", "_")]
        if name.replace("_", "-") in by_long:
            return by_long[name.replace("_", "-")]
        return name if name in self.long_options else None

    def canonical(self, name: str) -> str | None:
        """The one name nodefence uses for the option ``name`` spells: the agent's newer
        spelling (its long option with ``_``), which the agent reads as the same option."""
        key = self.key(name)
        if key is None:
            return None
        long = self.long_options[key]
        for candidate in (long.replace("-", "_"), long, key):
            if self.key(candidate) == key:
                return candidate
        return key

    def normalise(self, parameters: Mapping[str, V]) -> dict[str, V]:
        """``parameters`` under their canonical names, in their order. Two spellings of one
        option, or a name the agent ignores, raise a :class:`ValueError` naming the keys (never
        a value)."""
        name = os.path.basename(self.agent)
        unknown = [key for key in parameters if self.canonical(key) is None]
        if unknown:
            raise ValueError(
                f"{name} has no option {', '.join(sorted(unknown))} (its metadata "
                "lists every option it reads; it would ignore the line)"
            )
        spelt: dict[str, list[str]] = {}
        for key in parameters:
            spelt.setdefault(str(self.canonical(key)), []).append(key)
        twice = [keys for keys in spelt.values() if len(keys) > 1]
        if twice:
            named = "; ".join(
                f"{' and '.join(keys)} are one option ({self.canonical(keys[0])})" for keys in twice
            )
            raise ValueError(
                f"{named} of {name}, which would act on the last line given; give each option once"
            )
        return {str(self.canonical(key)): value for key, value in parameters.items()}


def parse_metadata(agent: str, text: str) -> AgentOptions:
    """The options in an agent's ``action=metadata`` XML. A newer spelling (``obsoletes``)
    names no option of its own: it is the long option of the deprecated key it replaces."""
    if "</parameters>" not in text:
        raise MetadataError(f"fence agent {agent}: its metadata lists no parameters")
    long_options: dict[str, str] = {}
    for name, attributes, mixed in _PARAMETER.findall(text):
        if "obsoletes=" in attributes:
            continue
        long = _LONG_OPTION.search(html.unescape(mixed))
        if long is None:
            raise MetadataError(f"fence agent {agent}: parameter {name} has no long option")
        long_options[name] = long.group(1)
    if not long_options:
        raise MetadataError(f"fence agent {agent}: its metadata lists no parameters")
    return AgentOptions(agent, long_options)


# One description per agent path for the process, a failure too: a hung agent costs its
# timeout once, not once per entry.
_CACHE: dict[str, AgentOptions | MetadataError] = {}


def agent_options(agent: str, timeout: float = METADATA_TIMEOUT_SECONDS) -> AgentOptions:
    """The options of the agent at ``agent`` (an absolute path), read once per path: the agent
    is run with ``action=metadata`` on stdin, as every other action, and killed at ``timeout``."""
    known = _CACHE.get(agent)
    if known is None:
        known = _CACHE[agent] = _read(agent, timeout)
    if isinstance(known, MetadataError):
        raise known
    return known


def _read(agent: str, timeout: float) -> AgentOptions | MetadataError:
    try:
        done = subprocess.run(
            [agent],
            input=b"action=metadata\n",
            capture_output=True,
            timeout=timeout,
            env=_ENVIRONMENT,
            check=False,
            start_new_session=True,
        )
    except subprocess.TimeoutExpired:
        return MetadataError(f"fence agent {agent}: action=metadata did not finish in {timeout:g}s")
    except OSError as exc:
        return MetadataError(f"fence agent {agent}: cannot run it: {exc.strerror}")
    text = done.stdout[:MAX_METADATA_BYTES].decode("utf-8", errors="replace")
    if "</parameters>" not in text:
        return MetadataError(
            f"fence agent {agent}: action=metadata printed no option list (exit "
            f"{done.returncode}); nodefence runs only agents that describe their options"
        )
    try:
        return parse_metadata(agent, text)
    except MetadataError as exc:
        return exc
