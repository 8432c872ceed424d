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
``nodefence.fencing.drivers.fence_agent_identity``).

A mistake here would surface only when a node dies, which is the worst moment to learn of it, so
loading is strict: unknown keys, missing fields, an unknown driver or a CA file that is not there
fail at once, with the file and the field named. Passwords are ``SecretStr`` and appear in no
message and no description.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Annotated, Any, Union

import yaml
from pydantic import Field, ValidationError, create_model

from nodefence import strict_yaml
from nodefence.engine import drivers
from nodefence.fencing.drivers import entries, entry_model
from nodefence.fencing.model import BmcEntry, PowerDriver, Strict

MAX_INVENTORY_BYTES = 1 << 20


class InventoryError(Exception):
    """The inventory cannot be used; the message names the file and the field, never a secret."""


class Inventory(Strict):
    """Every node's entry, each of its driver's own model (``fencing.registry``)."""

    nodes: dict[str, BmcEntry] = {}

    def driver_for(self, node: str) -> PowerDriver | None:
        """A new driver for ``node``'s BMC (the caller closes it), or ``None`` if the inventory
        does not list the node."""
        entry = self.nodes.get(node)
        return entry.build() if entry is not None else None

    def describe(self) -> dict[str, Any]:
        """The inventory as ``check-config`` shows it: everything but the credentials."""
        return {"nodes": {node: entry.described() for node, entry in sorted(self.nodes.items())}}


@functools.cache
def _model(entries: tuple[type[BmcEntry], ...]) -> type[Inventory]:
    """The inventory read with the registry's entry models, told apart by ``driver``."""
    # The registry's models, known only when it is read; a one-model union is no union.
    union: Any = Union[entries] if len(entries) > 1 else entries[0]  # noqa: UP007
    nodes: Any = dict[str, Annotated[union, Field(discriminator="driver")]]
    model: type[Inventory] = create_model("Inventory", __base__=Inventory, nodes=(nodes, {}))
    return model


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
    if len(parts) > 2 and parts[0] == "nodes" and parts[2] in drivers.power_drivers():
        del parts[2]
    return ".".join(parts) or "(top level)"


def _explain(error: Any) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "required field missing"
    if kind == "union_tag_invalid":
        return f"unknown driver (use {_driver_choices()})"
    if kind == "union_tag_not_found":
        return f"driver missing ({_driver_choices()})"
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
        return _model(entries()).model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{_where(error['loc'])}: {_explain(error)}" for error in exc.errors())
        raise InventoryError(f"{where}: {problems}") from None


def _driver_choices() -> str:
    powering = drivers.power_drivers()
    return ", ".join(powering[:-1]) + f" or {powering[-1]}"


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
        if name in drivers.power_drivers() and shared.get("driver", name) != name:
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
    kind = drivers.DRIVERS.get(str(entry.get("driver")))
    model = entry_model(kind) if kind is not None and kind.powers else None
    canonical = model.canonical_option(entry) if model is not None else None
    if canonical is None:
        return base
    given = {canonical(key) for key in own if isinstance(key, str)} - {None}
    return {
        key: value
        for key, value in base.items()
        if not (isinstance(key, str) and canonical(key) in given)
    }


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
