"""One spelling per machine an inventory entry reaches, so that two entries reaching the same one
are seen to, whatever driver, agent or option names they use (S10).

``redfish`` with ``address: https://10.0.0.11`` and ``system: 1``, and ``fence_redfish`` with
``ip: 10.0.0.11:443`` and ``systems_uri: /redfish/v1/Systems/1/``, power the same machine; so do
``ipmi`` at ``10.0.0.12`` and ``fence_idrac`` with ``ipaddr: 10.0.0.12``, or two entries of one
agent with ``plug`` in one and ``port`` in the other (the inventory has given each option its
canonical name, ``agent_metadata``). What only the BMCs can tell (a host name
and its address, two addresses of one BMC) is left to the UUIDs they report
(``binding.identity_problems``) and the judgement before every power action.
"""

from __future__ import annotations

from nodefence.engine.identity import agent_name
from nodefence.fencing.agent_identity import (
    IPMI_AGENTS,
    REDFISH_AGENTS,
    ipmi_endpoint,
    redfish_endpoint,
    text_option,
)
from nodefence.fencing.fence_agent import TARGET_KEYS
from nodefence.fencing.inventory import FenceAgentBmc, IpmiBmc, RedfishBmc
from nodefence.fencing.redfish import base_url, system_path


def _host(host: str) -> str:
    return host.strip().strip("[]").lower()


def machine_keys(entry: RedfishBmc | IpmiBmc | FenceAgentBmc) -> tuple[str, ...]:
    """The spellings-independent names of the machine ``entry`` acts on (none when the entry
    leaves the machine to discovery, e.g. a Redfish service's only system: the target spelling
    already covers two such entries on one service)."""
    if isinstance(entry, RedfishBmc):
        origin = base_url(entry.address)
        if not entry.system:
            return ()
        return (_redfish(origin.host or "", str(origin.port), system_path(entry.system)),)
    if isinstance(entry, IpmiBmc):
        return (f"ipmi {_host(entry.address)}:{entry.port}",)
    name = agent_name(entry.agent)
    if name in REDFISH_AGENTS:
        host, port, system = redfish_endpoint(entry.parameters)
        return (_redfish(host, port, system),) if system else ()
    if name in IPMI_AGENTS:
        host, port = ipmi_endpoint(entry.parameters)
        target = text_option(entry.parameters, "target")
        return (f"ipmi {_host(host)}:{port}" + (f" target={target}" if target else ""),)
    plug = text_option(entry.parameters, "plug")
    if not plug:
        return ()
    names = sorted(set(TARGET_KEYS) - {"plug"})
    picked = [f"{key}={value}" for key in names if (value := text_option(entry.parameters, key))]
    return (" ".join([f"agent {name}", *picked, f"plug={plug}"]),)


def _redfish(host: str, port: str, system: str) -> str:
    return f"redfish {_host(host)}:{port.strip()} {system.rstrip('/')}"
