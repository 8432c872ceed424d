"""Strict validation of custom resources against the schemas of their CRDs (tests/deploy/crds).

The API server prunes the fields a structural schema does not name and `kubectl apply
--validate=strict` refuses them; here every object schema that neither names
`additionalProperties` nor preserves unknown fields is closed, so a misspelt or misplaced field
fails as it would there.
"""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

CRDS = Path(__file__).resolve().parent / "crds"

Schema = dict[str, Any]


def _closed(schema: Schema) -> Schema:
    out = copy.deepcopy(schema)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if (
                "properties" in node
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")
            ):
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(out)
    return out


@cache
def _schemas() -> dict[tuple[str, str, str], Schema]:
    found: dict[tuple[str, str, str], Schema] = {}
    for path in sorted(CRDS.glob("*.yaml")):
        for crd in yaml.safe_load_all(path.read_text()):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            spec = crd["spec"]
            for version in spec["versions"]:
                key = (spec["group"], version["name"], spec["names"]["kind"])
                found[key] = _closed(version["schema"]["openAPIV3Schema"])
    return found


def has_schema(obj: dict[str, Any]) -> bool:
    group, _, version = obj["apiVersion"].rpartition("/")
    return (group, version, obj["kind"]) in _schemas()


def validate(obj: dict[str, Any]) -> None:
    """Raise jsonschema.ValidationError unless obj is valid for its CRD, unknown fields
    included."""
    group, _, version = obj["apiVersion"].rpartition("/")
    key = (group, version, obj["kind"])
    schemas = _schemas()
    assert key in schemas, f"no CRD for {obj['apiVersion']} {obj['kind']} in {CRDS}"
    jsonschema.Draft7Validator(schemas[key]).validate(obj)
