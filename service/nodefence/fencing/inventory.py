"""The BMC inventory: which BMC powers which node, and how to talk to it.

It is a YAML file mounted from a Secret (``NODEFENCE_BMC_INVENTORY``)::

    nodes:
      worker1:
        driver: redfish
        address: https://10.0.0.11
        system: /redfish/v1/Systems/1      # optional: discovered when the BMC has one system
        username: fencer
        password: s3cret
        auth: session                      # or basic
        tls: {ca_file: /etc/nodefence/bmc-ca.pem}
      worker2:
        driver: ipmi
        address: 10.0.0.12
        port: 623
        username: fencer
        password: s3cret
      worker3:
        driver: fence-agent                # a ClusterLabs fence agent
        agent: fence_openstack             # on PATH, or an absolute path
        parameters: {plug: 5f0c..., auth-url: https://keystone:5000/v3, password: s3cret}

Many nodes often share one BMC model or one cloud account: ``defaults.<driver>`` holds the
fields (and fence agent ``parameters``) every entry of that driver starts from, or
``defaults.<name>`` those of the entries that say ``use: <name>`` (one per cloud account, say);
an entry's own values win (a parameter under any of its spellings: ``systems-uri`` in an entry
replaces a default's ``systems_uri``), and ``{node}`` in a default's string value is the node's
name::

    defaults:
      fence-agent:
        agent: fence_redfish
        parameters: {username: fencer, password: s3cret, systems_uri: /redfish/v1/Systems/{node}}
      aws-prod: {driver: fence-agent, agent: fence_aws, parameters: {region: eu-west-1}}
    nodes:
      worker4: {driver: fence-agent, parameters: {ip: 10.0.0.14}}
      worker5: {use: aws-prod, parameters: {plug: i-0abc...}}

Before any power action and again with the proof, the machine must be shown to be the node's:
a Redfish system's ``UUID`` or the IPMI system GUID equal to the Node's ``systemUUID`` (for
fence_redfish and fence_ipmilan too, read through the agent's own BMC), another fence agent's
``plug`` equal to the instance in its ``providerID``. ``identity: <value>`` states what the
machine must report instead (for other fence agents: the plug or its alias in the agent's own
``list``); ``identity: unchecked`` says nothing can be read (a PDU outlet), and every decision
and Event made on that node says so. Two nodes resolving to one machine, and an agent nothing can
check without ``identity: unchecked``, are configuration errors (``nodefence.fencing.binding``,
``nodefence.fencing.agent_identity``).

A mistake here would surface only when a node dies, which is the worst moment to learn of it, so
loading is strict: unknown keys, missing fields, an unknown driver or a CA file that is not there
fail at once, with the file and the field named. Passwords are ``SecretStr`` and appear in no
message and no description.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from nodefence import strict_yaml
from nodefence.fencing.agent_identity import IPMI_AGENTS
from nodefence.fencing.agent_metadata import AgentOptions, agent_options
from nodefence.fencing.fence_agent import FenceAgentDriver, ParameterValue, is_secret_key
from nodefence.fencing.ipmi import DEFAULT_PORT, IpmiDriver
from nodefence.fencing.model import PowerDriver
from nodefence.fencing.redfish import RedfishDriver, base_url
from nodefence.fencing.registry import POWER_DRIVERS

MASK = "***"
MAX_INVENTORY_BYTES = 1 << 20


class InventoryError(Exception):
    """The inventory cannot be used; the message names the file and the field, never a secret."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Tls(_Strict):
    ca_file: str | None = None
    # Turning verification off is a per-BMC decision someone wrote down, never a default.
    insecure: bool = False

    @field_validator("ca_file")
    @classmethod
    def _ca_exists(cls, value: str | None) -> str | None:
        if value is not None and not Path(value).is_file():
            raise ValueError(f"CA file {value} does not exist")
        return value


# What the machine must report for this node (a system UUID, an instance id or name), or
# ``unchecked`` where nothing can be read (a PDU outlet); unset: derived from the Node's
# systemUUID or providerID (``nodefence.engine.identity``).
Identity = Annotated[str | None, Field(min_length=1, max_length=256)]


class RedfishBmc(_Strict):
    driver: Literal["redfish"]
    address: str
    system: str | None = None
    username: str = Field(min_length=1)
    password: SecretStr
    auth: Literal["session", "basic"] = "session"
    tls: Tls = Tls()
    identity: Identity = None

    @field_validator("address")
    @classmethod
    def _address(cls, value: str) -> str:
        base_url(value)
        return value


class IpmiBmc(_Strict):
    driver: Literal["ipmi"]
    address: str = Field(min_length=1)
    port: int = Field(DEFAULT_PORT, ge=1, le=65535)
    username: str = Field(min_length=1)
    password: SecretStr
    # The BMC key (Kg) of an IPMI v2 BMC that has one, hexadecimal; nodefence's own IPMI client
    # uses it in memory, never on a command line.
    kg: SecretStr | None = None
    identity: Identity = None

    @field_validator("kg")
    @classmethod
    def _hexadecimal(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            try:
                bytes.fromhex(value.get_secret_value())
            except ValueError:
                raise ValueError("kg must be hexadecimal (as ipmitool's -y takes it)") from None
        return value


_PARAMETER_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
# By canonical name: nodefence chooses the action; the debug and verbose options would make an
# agent write its exchange (with the credentials) to a file or the output, and port_as_ip would
# make it act on the address in plug instead of the ip nodefence reads the machine through.
_RESERVED_PARAMETERS = frozenset({"action", "debug_file", "verbose", "verbose_level", "port_as_ip"})
MAX_PARAMETERS_BYTES = 16 * 1024


class FenceAgentBmc(_Strict):
    """A ClusterLabs fence agent and the ``key=value`` lines it reads on stdin, each option under
    its canonical name (``agent_metadata``), so that what nodefence checks is what the agent
    reads. Values whose key names a credential (``password``, ``secret_key``, ...) are
    ``SecretStr``."""

    driver: Literal["fence-agent"]
    agent: str = Field(min_length=1)
    parameters: dict[str, ParameterValue] = {}
    identity: Identity = None

    @field_validator("agent")
    @classmethod
    def _agent_runs(cls, value: str) -> str:
        return resolve_agent(value)

    @field_validator("parameters", mode="before")
    @classmethod
    def _parameters(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            raise ValueError("parameters must be a mapping of the agent's keys to strings")  # noqa: TRY004 - pydantic reports ValueError
        checked: dict[str, ParameterValue] = {}
        size = 0
        for key, item in value.items():
            if not isinstance(key, str) or not _PARAMETER_KEY.match(key):
                raise ValueError(f"parameter name {key!r} is not a fence agent option name")
            secret = is_secret_key(key)
            text = item.get_secret_value() if isinstance(item, SecretStr) else item
            if not isinstance(text, str):
                shown = "a value" if secret else repr(item)
                raise ValueError(f"parameter {key}: values are strings (quote {shown})")  # noqa: TRY004 - pydantic reports ValueError
            if any(c in text for c in "\n\r\0"):
                # A line break would smuggle another key (action=...) into the agent's input.
                raise ValueError(f"parameter {key}: a value may not contain a line break")
            size += len(key) + len(text) + 2
            checked[key] = SecretStr(text) if secret else text
        if size > MAX_PARAMETERS_BYTES:
            raise ValueError(f"parameters longer than {MAX_PARAMETERS_BYTES} bytes")
        return checked

    @field_validator("parameters")
    @classmethod
    def _canonical(
        cls, value: dict[str, ParameterValue], info: ValidationInfo
    ) -> dict[str, ParameterValue]:
        agent = info.data.get("agent")
        if not isinstance(agent, str):
            # The agent's own error is reported; its options cannot be known.
            return value
        canonical = agent_options(agent).normalise(value)
        reserved = sorted(
            f"{key} ({name})" if key != name else key
            for key, name in zip(value, canonical, strict=True)
            if name in _RESERVED_PARAMETERS
        )
        if reserved:
            raise ValueError(
                f"parameter {', '.join(reserved)} is not allowed (nodefence sets the action "
                "and reads the machine at ip; the agent's debug output would carry credentials)"
            )
        if "hexadecimal_kg" in canonical and os.path.basename(agent) in IPMI_AGENTS:
            raise ValueError(
                f"{os.path.basename(agent)} passes hexadecimal_kg to ipmitool as -y on its "
                "command line, readable by every process on the host for the whole run; give "
                "this node driver: ipmi with kg (nodefence's own IPMI client keeps it in memory)"
            )
        return {
            key: SecretStr(item) if isinstance(item, str) and is_secret_key(key) else item
            for key, item in canonical.items()
        }


def resolve_agent(agent: str) -> str:
    """The agent's absolute path: a configuration error now rather than during an outage."""
    if os.path.isabs(agent):
        if not (os.path.isfile(agent) and os.access(agent, os.X_OK)):
            raise ValueError(f"fence agent {agent} does not exist or is not executable")
        return agent
    if "/" in agent:
        raise ValueError(f"fence agent {agent!r}: give a name on PATH or an absolute path")
    found = shutil.which(agent, path=_agent_path())
    if found is None:
        raise ValueError(
            f"fence agent {agent} is not installed (not on PATH; Debian package fence-agents)"
        )
    return found


def _agent_path() -> str:
    # Debian installs the agents in /usr/sbin, which a non-root PATH often lacks.
    return os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/local/sbin"])


Bmc = Annotated[RedfishBmc | IpmiBmc | FenceAgentBmc, Field(discriminator="driver")]


class Inventory(_Strict):
    nodes: dict[str, Bmc] = {}

    def driver_for(self, node: str) -> PowerDriver | None:
        """A new driver for ``node``'s BMC (the caller closes it), or ``None`` if the inventory
        does not list the node."""
        bmc = self.nodes.get(node)
        if isinstance(bmc, RedfishBmc):
            return RedfishDriver(
                bmc.address,
                username=bmc.username,
                password=bmc.password,
                system=bmc.system,
                auth=bmc.auth,
                ca_file=bmc.tls.ca_file,
                insecure=bmc.tls.insecure,
            )
        if isinstance(bmc, IpmiBmc):
            return IpmiDriver(
                bmc.address,
                username=bmc.username,
                password=bmc.password,
                port=bmc.port,
                kg=bmc.kg,
            )
        if isinstance(bmc, FenceAgentBmc):
            return FenceAgentDriver(bmc.agent, bmc.parameters, identity=bmc.identity)
        return None

    def describe(self) -> dict[str, Any]:
        """The inventory as ``check-config`` shows it: everything but the passwords."""
        described: dict[str, Any] = {}
        for node, bmc in sorted(self.nodes.items()):
            entry = bmc.model_dump(mode="json", exclude={"password"})
            if isinstance(bmc, FenceAgentBmc):
                entry["parameters"] = {
                    key: MASK if isinstance(value, SecretStr) else value
                    for key, value in bmc.parameters.items()
                }
            else:
                entry["password"] = MASK
            described[node] = entry
        return {"nodes": described}


def _lost_entry(message: str) -> str:
    """For a node given twice, what that usually means: a copied entry not renamed, which leaves
    the node it was copied for with no entry, while the one kept may point at that other node's
    machine."""
    if not re.match(r"^nodes\.[^.\s]+ is given twice", message):
        return ""
    return (
        " (an entry copied for another node and not renamed? That node would have no entry, "
        "and this one would power off whichever machine the last copy names)"
    )


def _where(loc: tuple[int | str, ...]) -> str:
    # The discriminated union adds the driver name as a path step (nodes.<node>.<driver>.field);
    # people think in keys.
    parts = [str(p) for p in loc]
    if len(parts) > 2 and parts[0] == "nodes" and parts[2] in POWER_DRIVERS:
        del parts[2]
    return ".".join(parts) or "(top level)"


def _explain(error: Any) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "required field missing"
    if kind == "union_tag_invalid":
        return f"unknown driver (use {_DRIVER_CHOICES})"
    if kind == "union_tag_not_found":
        return f"driver missing ({_DRIVER_CHOICES})"
    # Pydantic's own messages quote the input only for the types listed above, which never
    # see a password; these carry the rule that failed.
    return str(error["msg"]).removeprefix("Value error, ")


def load_inventory(path: str | Path) -> Inventory:
    """Read and validate the inventory at ``path``."""
    where = Path(path)
    try:
        with where.open("rb") as handle:
            raw = handle.read(MAX_INVENTORY_BYTES + 1)
    except OSError as exc:
        raise InventoryError(f"{where}: cannot read the BMC inventory: {exc.strerror}") from None
    if len(raw) > MAX_INVENTORY_BYTES:
        raise InventoryError(f"{where}: larger than {MAX_INVENTORY_BYTES} bytes")
    try:
        data = strict_yaml.load(raw)
    except strict_yaml.DuplicateKeyError as exc:
        raise InventoryError(f"{where}: {exc}{_lost_entry(exc.message)}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        # The parser's own text can quote the offending line, which may hold a password.
        raise InventoryError(f"{where}: not valid YAML{at}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InventoryError(f"{where}: the BMC inventory must be a mapping with a 'nodes' key")
    try:
        data = with_defaults(data)
    except ValueError as exc:
        raise InventoryError(f"{where}: {exc}") from None
    try:
        return Inventory.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{_where(error['loc'])}: {_explain(error)}" for error in exc.errors())
        raise InventoryError(f"{where}: {problems}") from None


_DRIVERS = POWER_DRIVERS
_DRIVER_CHOICES = ", ".join(POWER_DRIVERS[:-1]) + f" or {POWER_DRIVERS[-1]}"
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


def with_defaults(data: dict[str, Any]) -> dict[str, Any]:
    """Shared fields merged under the entries (an entry's own fields and ``parameters`` win),
    with ``{node}`` in the shared strings replaced by the node's name. An entry takes
    ``defaults.<its use:>`` when it names one, otherwise ``defaults.<its driver>``; a named
    default may set the driver. A default no entry takes is an error (a misspelt name would
    otherwise leave every entry without its credentials)."""
    data = dict(data)
    defaults = data.pop("defaults", None)
    if defaults is None:
        defaults = {}
    if not isinstance(defaults, dict):
        raise ValueError("defaults: must map a name to the fields its entries share")  # noqa: TRY004 - pydantic reports ValueError
    for name, shared in defaults.items():
        if not isinstance(shared, dict):
            raise ValueError(f"defaults.{name}: must be a mapping of fields")  # noqa: TRY004 - pydantic reports ValueError
        if name in _DRIVERS and shared.get("driver", name) != name:
            raise ValueError(f"defaults.{name}.driver: the defaults of a driver are its own")
        _check_placeholders(shared, f"defaults.{name}")
    nodes = data.get("nodes")
    if not isinstance(nodes, dict):
        return data
    used: set[str] = set()
    merged: dict[Any, Any] = {}
    for node, given in nodes.items():
        if not isinstance(given, dict):
            merged[node] = given
            continue
        entry = {k: v for k, v in given.items() if k != "use"}
        name = given.get("use")
        if name is not None and name not in defaults:
            raise ValueError(f"nodes.{node}.use: no defaults named {name!r}")
        shared = defaults.get(name if name is not None else entry.get("driver"))
        if not isinstance(shared, dict):
            merged[node] = entry
            continue
        used.add(str(name if name is not None else entry.get("driver")))
        combined = {**_fill(shared, str(node)), **entry}
        own = entry.get("parameters")
        base = _fill(shared.get("parameters"), str(node))
        if isinstance(base, dict) and (own is None or isinstance(own, dict)):
            combined["parameters"] = {**_not_overridden(base, own or {}, combined), **(own or {})}
        merged[node] = combined
    for name in defaults:
        if name not in used:
            raise ValueError(
                f"defaults.{name}: no entry uses it (an entry takes defaults.<its driver>, or "
                "the defaults it names with use:)"
            )
    data["nodes"] = merged
    return data


def _not_overridden(
    base: dict[Any, Any], own: dict[Any, Any], entry: dict[Any, Any]
) -> dict[Any, Any]:
    """The default parameters an entry does not give under any spelling: an entry's
    ``systems-uri`` replaces the default's ``systems_uri`` rather than standing beside it."""
    options = _options_of(entry)
    if options is None:
        return base
    given = {options.canonical(key) for key in own if isinstance(key, str)} - {None}
    return {
        key: value
        for key, value in base.items()
        if not (isinstance(key, str) and options.canonical(key) in given)
    }


def _options_of(entry: dict[Any, Any]) -> AgentOptions | None:
    """A fence-agent entry's agent options, or ``None`` where validation will name what is
    wrong with its driver or agent."""
    agent = entry.get("agent")
    if entry.get("driver") != "fence-agent" or not isinstance(agent, str):
        return None
    try:
        return agent_options(resolve_agent(agent))
    except ValueError:
        return None


def _check_placeholders(value: Any, where: str) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _check_placeholders(item, f"{where}.{key}")
    elif isinstance(value, str):
        for name in _PLACEHOLDER.findall(value):
            if name != "node":
                raise ValueError(f"{where}: unknown placeholder {{{name}}} (only {{node}})")


def _fill(value: Any, node: str) -> Any:
    if isinstance(value, dict):
        return {key: _fill(item, node) for key, item in value.items()}
    if isinstance(value, str):
        return value.replace("{node}", node)
    return value
