"""Scenario files: the cluster a simulation starts with.

A scenario is either a mapping with a ``simulation:`` section (``SimSettings`` fields) and an
``objects:`` list of Kubernetes objects, or a plain (multi-document) YAML file of objects as
``kubectl apply -f`` would take it. ``seed`` names the built-in scenario of the seed runbook.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from nodefence_sim.resources import BY_KIND, NAMESPACES, ResourceType
from nodefence_sim.store import Obj

SCENARIO_KEYS = frozenset({"simulation", "objects", "description"})
ALWAYS_PRESENT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")

# Lower first: what others refer to exists before them (namespaces before their contents,
# nodes and their leases before pods bound to them, claims before the workloads using them).
_CREATION_RANK = {
    "Namespace": 0,
    "Node": 1,
    "Lease": 2,
    "PersistentVolume": 3,
    "PersistentVolumeClaim": 4,
    "ConfigMap": 5,
    "StatefulSet": 6,
    "Deployment": 6,
    "ReplicaSet": 7,
    "DaemonSet": 6,
    "Pod": 8,
    "VolumeAttachment": 9,
    "Event": 10,
}


class ScenarioError(ValueError):
    """A scenario file that does not describe a cluster."""


@dataclass(frozen=True)
class Scenario:
    name: str
    settings: dict[str, Any] = field(default_factory=dict)
    objects: list[Obj] = field(default_factory=list)


def builtin_names() -> list[str]:
    folder = resources.files("nodefence_sim").joinpath("scenarios")
    return sorted(
        entry.name.removesuffix(".yaml")
        for entry in folder.iterdir()
        if entry.name.endswith(".yaml")
    )


def load_scenario(name_or_path: str) -> Scenario:
    """A built-in scenario by name (``seed``) or a YAML file by path."""
    if re.fullmatch(r"[a-z0-9][a-z0-9_-]*", name_or_path) and name_or_path in builtin_names():
        text = (
            resources.files("nodefence_sim")
            .joinpath("scenarios", f"{name_or_path}.yaml")
            .read_text(encoding="utf-8")
        )
        return parse_scenario(text, name_or_path)
    path = Path(name_or_path)
    if not path.is_file():
        raise FileNotFoundError(
            f"scenario {name_or_path!r} is neither a file nor a built-in scenario "
            f"({', '.join(builtin_names())})"
        )
    return parse_scenario(path.read_text(encoding="utf-8"), str(path))


def parse_scenario(text: str, name: str = "scenario") -> Scenario:
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{name}: not valid YAML: {exc}") from exc
    if (
        len(documents) == 1
        and isinstance(documents[0], Mapping)
        and "kind" not in documents[0]
        and set(documents[0]) & {"simulation", "objects"}
    ):
        document = documents[0]
        unknown = sorted(set(document) - SCENARIO_KEYS)
        if unknown:
            raise ScenarioError(f"{name}: unknown scenario keys: {', '.join(map(str, unknown))}")
        settings = document.get("simulation") or {}
        if not isinstance(settings, Mapping):
            raise ScenarioError(f"{name}: 'simulation' must be a mapping")
        raw_objects = document.get("objects") or []
        if not isinstance(raw_objects, list):
            raise ScenarioError(f"{name}: 'objects' must be a list")
        return Scenario(name, dict(settings), _objects(raw_objects, name))
    return Scenario(name, {}, _objects(documents, name))


def _objects(documents: Iterable[Any], name: str) -> list[Obj]:
    found: list[Obj] = []
    for document in documents:
        if not isinstance(document, Mapping):
            raise ScenarioError(f"{name}: every object must be a mapping, got {document!r}")
        if document.get("kind") == "List":
            found.extend(_objects(document.get("items") or [], name))
            continue
        kind = document.get("kind")
        if kind not in BY_KIND:
            raise ScenarioError(f"{name}: unsupported kind {kind!r}")
        meta = document.get("metadata")
        if not isinstance(meta, Mapping) or not (meta.get("name") or meta.get("generateName")):
            raise ScenarioError(f"{name}: a {kind} without metadata.name")
        found.append(copy.deepcopy(dict(document)))
    return found


def creation_order(objects: Iterable[Obj]) -> list[tuple[ResourceType, Obj]]:
    """The objects in creation order, preceded by the namespaces they use but do not declare
    (a real cluster has the system namespaces; a scenario should not have to list them)."""
    ordered = sorted(objects, key=lambda o: _CREATION_RANK.get(str(o.get("kind")), 8))
    declared = {o["metadata"]["name"] for o in ordered if o.get("kind") == "Namespace"}
    used = set(ALWAYS_PRESENT_NAMESPACES)
    for obj in ordered:
        rt = BY_KIND[str(obj["kind"])]
        if rt.namespaced:
            used.add(obj["metadata"].get("namespace") or "default")
    implicit: list[Obj] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
        for ns in sorted(used - declared)
    ]
    result: list[tuple[ResourceType, Obj]] = []
    for obj in implicit + ordered:
        rt = BY_KIND[str(obj["kind"])]
        if rt.key == NAMESPACES.key:
            namespace = copy.deepcopy(obj)
            namespace.setdefault("spec", {"finalizers": ["kubernetes"]})
            namespace.setdefault("status", {"phase": "Active"})
            result.append((rt, namespace))
        else:
            result.append((rt, obj))
    return result
