"""The schema facts structured-merge-diff needs, and paths in its ``fieldsV1`` notation.

Who owns a field, what an apply merges and what a conflict names all depend on how the schema
types each field: a struct (its fields are owned one by one), a map (its keys are owned, each
as an item), an atomic value (owned and replaced whole), a list keyed by some of its elements'
fields (``x-kubernetes-list-type: map``: each element owned under ``k:{...}``) or a set of
scalars (``list-type: set``: each element under ``v:...``). Lists are atomic unless the
Kubernetes OpenAPI says otherwise. The tables below carry those annotations for the fields of
the served kinds, found by the names of the fields that lead to them.

A path is a tuple of ``f:name``/``k:{...}``/``v:...`` elements; a path ending in ``"."`` names
the map or list element itself rather than what it holds (the ``.: {}`` of ``fieldsV1``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

Path = tuple[str, ...]
Names = tuple[str, ...]
SELF = "."

_CONTAINER_LISTS = frozenset({"containers", "initContainers", "ephemeralContainers"})
# Lists keyed by the same fields wherever the field name occurs.
_LIST_MAP_KEYS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(_CONTAINER_LISTS, ("name",)),
    "volumes": ("name",),
    "env": ("name",),
    "imagePullSecrets": ("name",),
    "schedulingGates": ("name",),
    "volumeMounts": ("mountPath",),
    "volumeDevices": ("devicePath",),
    "conditions": ("type",),
    "ownerReferences": ("uid",),
    "hostAliases": ("ip",),
    "podIPs": ("ip",),
    "hostIPs": ("ip",),
    "topologySpreadConstraints": ("topologyKey", "whenUnsatisfiable"),
}
# Key fields the schema defaults, so an element may leave them out.
_KEY_DEFAULTS: dict[str, Any] = {"protocol": "TCP"}
# Maps of scalars whose keys are owned one by one.
_MAP_FIELDS = frozenset(
    {
        "labels",
        "annotations",
        "nodeSelector",
        "matchLabels",
        "data",
        "binaryData",
        "stringData",
        "capacity",
        "allocatable",
        "requests",
        "limits",
        "hard",
        "used",
        "parameters",
        "overhead",
    }
)
# Structs the types mark ``+structType=atomic``: label selectors, references and key selectors.
_ATOMIC_STRUCTS = frozenset(
    {
        "selector",
        "podSelector",
        "namespaceSelector",
        "labelSelector",
        "roleRef",
        "secretKeyRef",
        "configMapKeyRef",
        "fieldRef",
        "resourceFieldRef",
        "requiredDuringSchedulingIgnoredDuringExecution",
    }
)
# Kinds whose ``spec.selector`` is a plain map of labels rather than a LabelSelector.
_MAP_SELECTOR_KINDS = frozenset({"Service", "ReplicationController"})
# Elements of these keyed lists are atomic structs (LocalObjectReference).
_ATOMIC_ELEMENTS = frozenset({"imagePullSecrets"})


def list_keys(kind: str, names: Names) -> tuple[str, ...] | None:
    """The merge keys of the list at ``names`` (field names from the root), or ``None`` when
    the list is not keyed."""
    name = names[-1]
    if name == "ports":
        if len(names) >= 2 and names[-2] in _CONTAINER_LISTS:
            return ("containerPort", "protocol")
        if kind == "Service" and names == ("spec", "ports"):
            return ("port", "protocol")
        return None
    if name == "addresses":
        return ("type",) if names == ("status", "addresses") else None
    return _LIST_MAP_KEYS.get(name)


def is_set(kind: str, names: Names) -> bool:
    """Whether the list at ``names`` is a set of scalars."""
    del kind
    return names == ("metadata", "finalizers")


def is_map(kind: str, names: Names) -> bool:
    """Whether the object at ``names`` is a map, whose keys are owned as items."""
    if names == ("spec", "selector"):
        return kind in _MAP_SELECTOR_KINDS
    return names[-1] in _MAP_FIELDS


def is_atomic(kind: str, names: Names) -> bool:
    """Whether the object at ``names`` is replaced and owned whole."""
    if names == ("spec", "selector") and kind in _MAP_SELECTOR_KINDS:
        return False
    return names[-1] in _ATOMIC_STRUCTS


def atomic_elements(names: Names) -> bool:
    """Whether the elements of the keyed list at ``names`` are owned whole."""
    return names[-1] in _ATOMIC_ELEMENTS


class MissingKeyError(ValueError):
    """A keyed list's element without one of the keys (and no default for it)."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def key_values(item: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """The values of ``keys`` in ``item``, defaulted where the schema defaults them."""
    values: dict[str, Any] = {}
    for key in keys:
        if key in item:
            values[key] = item[key]
        elif key in _KEY_DEFAULTS:
            values[key] = _KEY_DEFAULTS[key]
        else:
            raise MissingKeyError(key)
    return values


def key_element(item: Mapping[str, Any], keys: tuple[str, ...]) -> str:
    """The ``k:{...}`` element of a keyed list's element (keys sorted, as the server sorts
    them)."""
    values = key_values(item, keys)
    return "k:" + json.dumps(dict(sorted(values.items())), separators=(",", ":"))


def value_element(value: Any) -> str:
    return "v:" + json.dumps(value, separators=(",", ":"))


def field_element(name: str) -> str:
    return f"f:{name}"


def path_string(path: Path) -> str:
    """A path as structured-merge-diff prints it in conflicts: ``.spec.containers[name="c"]
    .image``, ``.metadata.finalizers[="x"]``."""
    out = []
    for element in path:
        if element == SELF:
            continue
        prefix, _, rest = element.partition(":")
        if prefix == "f":
            out.append("." + rest)
        elif prefix == "k":
            keys = json.loads(rest)
            out.append(
                "["
                + ",".join(f"{k}={json.dumps(v, separators=(',', ':'))}" for k, v in keys.items())
                + "]"
            )
        elif prefix == "v":
            out.append(f"[={rest}]")
        else:
            out.append(element)
    return "".join(out)
