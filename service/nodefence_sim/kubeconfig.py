"""A kubeconfig pointing kubectl and kubernetes-asyncio at a simulator (no credentials: the
simulator serves plain HTTP on loopback and does not authenticate)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

CLUSTER = "nodefence-sim"


def kubeconfig(url: str, namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CLUSTER, "cluster": {"server": url}}],
        "users": [{"name": CLUSTER, "user": {}}],
        "contexts": [
            {
                "name": CLUSTER,
                "context": {"cluster": CLUSTER, "user": CLUSTER, "namespace": namespace},
            }
        ],
        "current-context": CLUSTER,
        "preferences": {},
    }


def write_kubeconfig(path: str | os.PathLike[str], url: str) -> Path:
    """Write the kubeconfig atomically, so a reader polling for the file never sees half of it."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    partial.write_text(yaml.safe_dump(kubeconfig(url), sort_keys=False))
    partial.replace(target)
    return target
