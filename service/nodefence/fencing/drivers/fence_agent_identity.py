"""Which machine a fence agent acts on, read from the machine rather than taken from the inventory
(S10).

An agent's parameters say where it goes, not what it finds there: one wrong ``systems_uri`` or
``ip`` and fence_redfish powers off another node's machine while its own ``status`` reads Off.
So the identity is read the way the agent reaches the machine, through the same door:

- fence_redfish: nodefence's own Redfish client GETs the very ComputerSystem the agent acts on
  (``https://ip:ipport`` + ``systems_uri``, basic auth with the same credentials, certificate
  checks off only where the agent's are) and reports its ``UUID``, compared with the Node's
  ``systemUUID`` exactly as for ``driver: redfish``;
- fence_ipmilan and the agents Debian ships as its copies (fence_idrac, fence_ilo3/4/5,
  fence_imm, fence_ipmilanplus): nodefence's IPMI client asks the agent's BMC ``Get System GUID``
  with the same credentials, compared as for ``driver: ipmi``;
- any other agent with ``identity`` stated in the inventory: the agent's own ``list`` action
  (FenceAgentAPI: one ``plug,alias`` line per machine it can act on), run with the same
  parameters on stdin as every other action. The plug must be listed, and the stated identity
  must be the plug or the alias listed with it;
- otherwise the plug itself, against the instance in the Node's providerID
  (``engine.identity.expected_plug``).

An agent none of these applies to names no machine anybody can check: its entry must say
``identity: unchecked`` (:func:`entry_problems`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from pydantic import SecretStr

from nodefence.engine.identity import (
    PLUG_SCHEMES,
    SYSTEM_UUID,
    UNCHECKED,
    Reported,
    agent_name,
    parse_uuid,
)
from nodefence.fencing.drivers.fence_agent_metadata import ParameterValue
from nodefence.fencing.drivers.ipmi import IpmiDriver
from nodefence.fencing.drivers.redfish import RedfishDriver

REDFISH_AGENTS = frozenset({"fence_redfish"})
# fence_ipmilan and the copies Debian installs under other names (the same program, with lanplus
# on by default for some): all drive one BMC over IPMI with ipmitool.
IPMI_AGENTS = frozenset(
    {
        "fence_ipmilan",
        "fence_ipmilanplus",
        "fence_idrac",
        "fence_ilo3",
        "fence_ilo4",
        "fence_ilo5",
        "fence_imm",
    }
)
REDFISH_DEFAULT_PORT = "443"
REDFISH_DEFAULT_ROOT = "/redfish/v1"
IPMI_DEFAULT_PORT = "623"
LIST_SEPARATOR = ","
# A cloud account's list names every instance in it; a few thousand lines fit.
MAX_LIST_BYTES = 1 << 20
_FENCING_TRUE = frozenset({"1", "yes", "on", "true"})
# What agents log beside their answer (the output and the errors share one pipe): Python's
# warnings and fencing.py's log lines, with or without their timestamp.
_LOGGED = re.compile(
    r"^\s*(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ )?"
    r"(WARNING|ERROR|INFO|DEBUG|CRITICAL|Warning|Error|Parse error)\b|\b\w+Warning: "
)

_QUOTED = re.compile(r'^"(.*)"$')


def option(parameters: Mapping[str, ParameterValue], name: str) -> ParameterValue | None:
    """The value of option ``name`` (its canonical name: the inventory has rewritten every
    spelling to it, ``agent_metadata``), as sent to the agent."""
    return parameters.get(name)


def text_option(parameters: Mapping[str, ParameterValue], name: str) -> str:
    """A non-secret option's value as fencing.py reads it from its stdin line (the line's
    trailing blanks and one pair of enclosing quotes dropped); "" when unset."""
    value = option(parameters, name)
    if not isinstance(value, str):
        return ""
    return _QUOTED.sub(r"\1", value.rstrip())


def _secret(parameters: Mapping[str, ParameterValue], name: str) -> SecretStr:
    value = option(parameters, name)
    if isinstance(value, SecretStr):
        return value
    return SecretStr(value or "")


def reads_machine_uuid(agent: str) -> bool:
    """Whether nodefence reads the machine's system UUID through this agent's own BMC."""
    name = agent_name(agent)
    return name in REDFISH_AGENTS or name in IPMI_AGENTS


def redfish_endpoint(parameters: Mapping[str, ParameterValue]) -> tuple[str, str, str]:
    """``(host, port, systems_uri)`` as fence_redfish builds its URL: ``ip`` may carry the port
    (``host:port``), ``ipport`` defaults to 443, ``systems_uri`` is "" when the agent discovers
    the system itself."""
    host = text_option(parameters, "ip")
    port = text_option(parameters, "ipport") or REDFISH_DEFAULT_PORT
    if host.count(":") == 1:
        host, port = host.split(":")
    return host.lower(), port, text_option(parameters, "systems_uri").rstrip("/")


def ipmi_endpoint(parameters: Mapping[str, ParameterValue]) -> tuple[str, str]:
    """``(host, port)`` as fence_ipmilan hands them to ipmitool (``-H ip -p ipport``)."""
    host = text_option(parameters, "ip")
    return host.lower(), text_option(parameters, "ipport") or IPMI_DEFAULT_PORT


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _why_not_readable(agent: str, parameters: Mapping[str, ParameterValue]) -> str:
    """Why nodefence cannot read the machine the way this agent reaches it, or ""."""
    name = agent_name(agent)
    if not text_option(parameters, "ip"):
        return f"{name} is given no ip"
    if option(parameters, "password_script") is not None and option(parameters, "password") is None:
        return f"{name} takes its password from a script, which nodefence does not run"
    if name in REDFISH_AGENTS:
        root = text_option(parameters, "redfish_uri").rstrip("/")
        if not text_option(parameters, "systems_uri") and root not in ("", REDFISH_DEFAULT_ROOT):
            return (
                f"{name} discovers its system under redfish_uri {root}; give it systems_uri so "
                "that nodefence reads the same system"
            )
        return ""
    if text_option(parameters, "target"):
        return (
            f"{name} bridges to the IPMI target {text_option(parameters, 'target')}, whose "
            "system GUID the BMC at ip does not answer for"
        )
    return ""


def uuid_reader(
    agent: str, parameters: Mapping[str, ParameterValue]
) -> RedfishDriver | IpmiDriver | str:
    """nodefence's own client for the BMC the agent drives, or why there is none."""
    why = _why_not_readable(agent, parameters)
    if why:
        return why
    name = agent_name(agent)
    username = text_option(parameters, "username")
    password = _secret(parameters, "password")
    if name in REDFISH_AGENTS:
        host, port, system = redfish_endpoint(parameters)
        # fence_redfish turns certificate checks off for any ssl_insecure it understands; here
        # only a true one does, so a reader is never laxer than the agent.
        insecure = text_option(parameters, "ssl_insecure").lower() in _FENCING_TRUE
        try:
            return RedfishDriver(
                f"https://{_url_host(host)}:{port}",
                username=username,
                password=password,
                system=system or None,
                auth="basic",
                insecure=insecure,
            )
        except ValueError as exc:
            return f"{name}'s ip and ipport are no https address ({exc})"
    host, port = ipmi_endpoint(parameters)
    try:
        number = int(port)
    except ValueError:
        return f"{name}'s ipport {port!r} is not a port number"
    # No Kg: the inventory refuses one for these agents (ipmitool would get it on its command
    # line); a BMC with a Kg is a driver: ipmi entry.
    return IpmiDriver(host, username=username, password=password, port=number)


async def read_machine_uuid(
    agent: str,
    parameters: Mapping[str, ParameterValue],
    source: str,
    timeout: float,  # noqa: ASYNC109
) -> Reported:
    """The system UUID of the machine behind the agent's BMC, read by nodefence's own client;
    empty with the reason when it cannot be read."""
    reader = uuid_reader(agent, parameters)
    how = "Redfish system UUID" if agent_name(agent) in REDFISH_AGENTS else "IPMI system GUID"
    if isinstance(reader, str):
        return Reported("", source, basis=SYSTEM_UUID, agent=agent, detail=reader)
    try:
        said = await reader.identity(timeout)
    finally:
        await reader.close()
    # The cause first and without the address, which ``source`` already names: the record
    # keeps a bounded detail (``engine.caps``), and a long URL must not push the cause out.
    detail = f"{how} not read: {said.detail}" if said.detail else ""
    return Reported(said.value, source, basis=SYSTEM_UUID, agent=agent, detail=detail)


def parse_list(text: str, separator: str = LIST_SEPARATOR) -> dict[str, str]:
    """The ``plug -> alias`` pairs of a ``list`` action's output (``plug<sep>alias`` lines);
    lines without the separator (warnings, ``N/A``) name no machine."""
    listed: dict[str, str] = {}
    for line in text.splitlines():
        if _LOGGED.search(line):
            continue
        plug, sep, alias = line.strip().partition(separator)
        if sep and plug.strip():
            listed.setdefault(plug.strip(), alias.strip())
    return listed


def entry_problems(
    node: str, agent: str, parameters: Mapping[str, ParameterValue], identity: str | None
) -> list[str]:
    """Configuration errors of one fence-agent entry that no read can mend: an agent nothing can
    check that does not say ``identity: unchecked``, an identity that cannot be compared, and a
    plug naming several machines."""
    name = agent_name(agent)
    stated = (identity or "").strip()
    problems: list[str] = []
    plug = text_option(parameters, "plug")
    several = text_option(parameters, "plug_separator") or LIST_SEPARATOR
    if plug and several in plug and name not in REDFISH_AGENTS | IPMI_AGENTS:
        problems.append(
            f"configuration error: node {node}: plug {plug!r} names several machines (the "
            f"agent acts on each plug between its {several!r}); give each node its own entry"
        )
    if stated.lower() == UNCHECKED:
        return problems
    if reads_machine_uuid(agent):
        why = _why_not_readable(agent, parameters)
        if why:
            problems.append(
                f"configuration error: node {node}: nodefence cannot read which machine {name} "
                f"acts on ({why}); fix the parameters, or say identity: unchecked"
            )
        if stated and parse_uuid(stated) is None:
            problems.append(
                f"configuration error: node {node}: identity {stated!r} is not a UUID, and "
                f"{name}'s BMC reports the machine's UUID"
            )
        return problems
    if stated:
        if not plug:
            problems.append(
                f"configuration error: node {node}: identity {stated!r} is checked against "
                f"{name}'s list for its plug, and the entry gives no plug"
            )
        return problems
    if PLUG_SCHEMES.get(name) is None:
        problems.append(
            f"configuration error: node {node}: nothing shows which machine {name} acts on: "
            f"no providerID names its plug and nodefence reads no identity through it; set "
            "identity to the plug or the name its list action shows for it, or say identity: "
            "unchecked"
        )
    elif not plug:
        problems.append(
            f"configuration error: node {node}: {name} is given no plug, so it names no machine "
            "to compare with the Node's providerID; set plug"
        )
    return problems
