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

A mistake here would surface only when a node dies, which is the worst moment to learn of it, so
loading is strict: unknown keys, missing fields, an unknown driver or a CA file that is not there
fail at once, with the file and the field named. Passwords are ``SecretStr`` and appear in no
message and no description.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from nodefence.fencing.ipmi import DEFAULT_PORT, IpmiDriver
from nodefence.fencing.model import PowerDriver
from nodefence.fencing.redfish import RedfishDriver, base_url

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


class RedfishBmc(_Strict):
    driver: Literal["redfish"]
    address: str
    system: str | None = None
    username: str = Field(min_length=1)
    password: SecretStr
    auth: Literal["session", "basic"] = "session"
    tls: Tls = Tls()

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


Bmc = Annotated[RedfishBmc | IpmiBmc, Field(discriminator="driver")]


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
                bmc.address, username=bmc.username, password=bmc.password, port=bmc.port
            )
        return None

    def describe(self) -> dict[str, Any]:
        """The inventory as ``check-config`` shows it: everything but the passwords."""
        described: dict[str, Any] = {}
        for node, bmc in sorted(self.nodes.items()):
            entry = bmc.model_dump(mode="json", exclude={"password"})
            entry["password"] = MASK
            described[node] = entry
        return {"nodes": described}


def _where(loc: tuple[int | str, ...]) -> str:
    # The discriminated union adds the driver name as a path step (nodes.<node>.<driver>.field);
    # people think in keys.
    parts = [str(p) for p in loc]
    if len(parts) > 2 and parts[0] == "nodes" and parts[2] in ("redfish", "ipmi"):
        del parts[2]
    return ".".join(parts) or "(top level)"


def _explain(error: Any) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "required field missing"
    if kind == "union_tag_invalid":
        return "unknown driver (use redfish or ipmi)"
    if kind == "union_tag_not_found":
        return "driver missing (redfish or ipmi)"
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
        data = yaml.safe_load(raw)
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
        return Inventory.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{_where(error['loc'])}: {_explain(error)}" for error in exc.errors())
        raise InventoryError(f"{where}: {problems}") from None
