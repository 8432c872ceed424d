"""Shared fixtures for the deployment tests: the repository layout and the rendered overlays.

Rendering goes through the real ``kubectl kustomize`` so that what is tested is exactly what an
operator applies.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
OVERLAYS = sorted(p.name for p in (DEPLOY / "overlays").iterdir() if p.is_dir())
NAMESPACE = "nodefence"

Obj = dict[str, Any]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slow: builds a fresh virtualenv with pip (tens of seconds); runs by default"
    )


class _Loader(yaml.SafeLoader):
    """YAML as Kubernetes reads it: a plain `=` (an AlertmanagerConfig matcher's matchType, which
    kubectl prints unquoted) is the string "=", not YAML 1.1's value tag."""


_Loader.add_constructor(
    "tag:yaml.org,2002:value",
    lambda loader, node: loader.construct_scalar(node),  # type: ignore[arg-type]
)


def parse(text: str) -> list[Obj]:
    return [doc for doc in yaml.load_all(text, Loader=_Loader) if doc]


def kustomize_run(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl is required to render the manifests (.ci/run checks for it)")
    return subprocess.run(
        [kubectl, "kustomize", *args, str(path)], capture_output=True, text=True, check=False
    )


def kustomize(path: Path, *args: str) -> list[Obj]:
    """Render a kustomization directory with kubectl and parse the documents."""
    out = kustomize_run(path, *args)
    assert out.returncode == 0, f"kubectl kustomize {path} failed:\n{out.stderr}"
    return parse(out.stdout)


_cache: dict[str, list[Obj]] = {}


def rendered(overlay: str) -> list[Obj]:
    """The overlay's objects, rendered once per test session."""
    if overlay not in _cache:
        _cache[overlay] = kustomize(DEPLOY / "overlays" / overlay)
    return _cache[overlay]


def find(objs: list[Obj], kind: str, name: str | None = None) -> list[Obj]:
    return [
        o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]


def one(objs: list[Obj], kind: str, name: str | None = None) -> Obj:
    found = find(objs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def pod_templates(objs: list[Obj]) -> list[tuple[str, Obj]]:
    """Every pod template (metadata + spec) of the workloads, labelled by kind/name."""
    templates: list[tuple[str, Obj]] = []
    for o in objs:
        label = f"{o['kind']}/{o['metadata']['name']}"
        if o["kind"] == "Deployment":
            templates.append((label, o["spec"]["template"]))
        elif o["kind"] == "CronJob":
            templates.append((label, o["spec"]["jobTemplate"]["spec"]["template"]))
        elif o["kind"] == "Service" and o["apiVersion"].startswith("serving.knative.dev/"):
            templates.append((label, o["spec"]["template"]))
    return templates


def workloads(objs: list[Obj]) -> set[str]:
    """The pods an overlay runs: the Deployment's receivers, which reconcile themselves, or the
    Knative Service's and the reconcile CronJob that passes while they are scaled to zero."""
    knative = any(o["apiVersion"].startswith("serving.knative.dev/") for o in objs)
    if knative:
        return {"Service/nodefence", "CronJob/nodefence-reconcile"}
    return {"Deployment/nodefence"}


@pytest.fixture(params=OVERLAYS)
def overlay(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def objs(overlay: str) -> list[Obj]:
    return rendered(overlay)
