"""The Helm chart and the Kustomize manifests install the same nodefence: for each setup, the
chart's objects (release ``nodefence`` in namespace ``nodefence``) are the objects Kustomize
renders, with the same RBAC rules, pod specs (containers, probes, security contexts, volumes,
placement), services, network policies and monitoring objects, whatever deploy/base and its
overlays and components hold when the test runs.

What legitimately differs is left out of the comparison: the labels Helm adds to identify a
release, the checksum annotation that rolls the pods on a policy change where Kustomize hashes
the policy ConfigMap's name instead, the Namespace (``helm install --namespace`` owns it), the
whitespace of CEL expressions, and comments.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import DEPLOY, Obj, kustomize
from .test_helm import EXAMPLES, chart, helm_home

__all__ = ["helm_home"]

# Labels a Helm release adds that a Kustomize render has no counterpart for.
RELEASE_LABELS = {
    "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/version",
    "app.kubernetes.io/part-of",
    "helm.sh/chart",
}
HASHED_NAME = re.compile(r"^(nodefence-policy)-[a-z0-9]{10}$")


def normalize(value: Any) -> Any:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            kept = item
            if key in {"labels", "matchLabels", "selector"} and isinstance(item, dict):
                kept = {k: v for k, v in item.items() if k not in RELEASE_LABELS}
            if key == "annotations" and isinstance(item, dict):
                kept = {k: v for k, v in item.items() if not k.startswith("checksum/")}
                if not kept:
                    continue
            if key == "expression" and isinstance(kept, str):
                # CEL: whitespace between tokens means nothing, and Kustomize re-folds a
                # multi-line expression with an extra blank line.
                kept = " ".join(kept.split())
            out[key] = normalize(kept)
        return out
    if isinstance(value, list):
        return [normalize(v) for v in value]
    if isinstance(value, str):
        found = HASHED_NAME.match(value)
        return found.group(1) if found else value
    return value


def key_of(obj: Obj) -> tuple[str, str]:
    name: str = normalize(obj["metadata"]["name"])
    return obj["kind"], name


def by_key(objs: list[Obj]) -> dict[tuple[str, str], Obj]:
    keyed: dict[tuple[str, str], Obj] = {}
    for obj in objs:
        if obj["kind"] == "Namespace":
            continue
        key = key_of(obj)
        assert key not in keyed, f"two objects {key}"
        keyed[key] = normalize(obj)
    return keyed


def body(obj: Obj) -> Obj:
    """Everything but the metadata, which is compared apart."""
    return {k: v for k, v in obj.items() if k != "metadata"}


def render_kustomization(
    tmp_path: Path, resources: list[str], components: list[str] | None = None
) -> list[Obj]:
    """A throwaway kustomization of the shipped overlays and components (paths relative to
    deploy/), as an operator's own overlay would list them."""
    up = Path(os.path.relpath(DEPLOY, tmp_path))
    lines = ["apiVersion: kustomize.config.k8s.io/v1beta1", "kind: Kustomization", "resources:"]
    lines += [f"  - {up / r}" for r in resources]
    if components:
        lines.append("components:")
        lines += [f"  - {up / c}" for c in components]
    if components and "components/bmc-inventory" in components:
        # The component renders only with the networks listed, as the operator's overlay does.
        shutil.copy(NETWORKS_EXAMPLE, tmp_path / "egress-networks.yaml")
        lines.insert(3, "  - egress-networks.yaml")
    (tmp_path / "kustomization.yaml").write_text("\n".join(lines) + "\n")
    return kustomize(tmp_path)


NETWORKS_EXAMPLE = DEPLOY / "components" / "bmc-inventory" / "egress-networks.example.yaml"


def listed_networks() -> str:
    """The example's networks as the chart's values (--set)."""
    example = yaml.safe_load(NETWORKS_EXAMPLE.read_text())
    bmc = ",".join(peer["ipBlock"]["cidr"] for peer in example["bmc"])
    api = ",".join(peer["ipBlock"]["cidr"] for peer in example["apiServer"])
    return f"networkPolicy.bmcNetworks={{{bmc}}},networkPolicy.apiServerCIDRs={{{api}}}"


EXAMPLE = {p.stem: p for p in EXAMPLES}

SETUPS = {
    "deployment": ([], ["overlays/deployment"], []),
    "deployment-bmc-inventory": (
        ["--set", "bmcInventory.enabled=true", "--set", listed_networks()],
        ["overlays/deployment"],
        ["components/bmc-inventory"],
    ),
    "deployment-bmc-inventory-slack": (
        [
            "--set",
            "bmcInventory.enabled=true,networkPolicy.slackEgress=true",
            "--set",
            listed_networks(),
        ],
        ["overlays/deployment"],
        ["components/bmc-inventory", "components/slack-egress"],
    ),
    "deployment-optional-grants": (
        ["--set", "rbac.finalizerStripping=true,rbac.volumeAttachmentCleanup=true"],
        ["overlays/deployment"],
        ["components/finalizer-stripping", "components/volume-attachment-cleanup"],
    ),
    "deployment-tls": (["--set", "tls.enabled=true"], ["overlays/deployment"], ["components/tls"]),
    "kube-prometheus-tls": (
        ["-f", str(EXAMPLE["kube-prometheus"]), "--set", "tls.enabled=true"],
        ["stacks/kube-prometheus"],
        ["components/tls"],
    ),
    "deployment-without-admission-policies": (
        ["--set", "admissionPolicies.enabled=false"],
        ["overlays/deployment"],
        ["components/without-admission-policies"],
    ),
    "knative": (["--set", "mode=knative"], ["overlays/knative"], []),
    "knative-placement-bmc-inventory": (
        [
            "--set",
            "mode=knative,knative.placement=true,knative.minScale=2,bmcInventory.enabled=true",
            "--set",
            listed_networks(),
        ],
        ["overlays/knative"],
        ["components/knative-placement", "components/bmc-inventory"],
    ),
    "kube-prometheus": (
        ["-f", str(EXAMPLE["kube-prometheus"])],
        ["stacks/kube-prometheus"],
        [],
    ),
    "kube-prometheus-stack": (
        ["-f", str(EXAMPLE["kube-prometheus-stack"])],
        ["stacks/kube-prometheus-stack"],
        [],
    ),
}


# Once a setup for the module: its tests only read the two renderings.
@pytest.fixture(scope="module", params=sorted(SETUPS))
def both(
    request: pytest.FixtureRequest, helm_home: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[tuple[str, str], Obj], dict[tuple[str, str], Obj]]:
    args, resources, components = SETUPS[request.param]
    for path in resources + components:
        assert (DEPLOY / path).is_dir(), f"deploy/{path} is gone: update SETUPS"
    overlay = tmp_path_factory.mktemp("overlay")
    theirs = by_key(render_kustomization(overlay, resources, components))
    ours = by_key(chart(helm_home, *args))
    return ours, theirs


def test_the_chart_renders_the_same_objects(
    both: tuple[dict[tuple[str, str], Obj], dict[tuple[str, str], Obj]],
) -> None:
    ours, theirs = both
    assert sorted(ours) == sorted(theirs)


def test_each_object_has_the_same_content(
    both: tuple[dict[tuple[str, str], Obj], dict[tuple[str, str], Obj]],
) -> None:
    ours, theirs = both
    for key in sorted(ours.keys() & theirs.keys()):
        assert body(ours[key]) == body(theirs[key]), key
        mine, kustomized = ours[key]["metadata"], theirs[key]["metadata"]
        # Every label and annotation Kustomize sets (the stacks select by them), the chart sets.
        for field in ("labels", "annotations"):
            expected = kustomized.get(field, {})
            assert expected.items() <= mine.get(field, {}).items(), (key, field)
        # An object Kustomize places outside nodefence's namespace, the chart places there too.
        if kustomized.get("namespace", "nodefence") != "nodefence":
            assert mine.get("namespace") == kustomized["namespace"], key


def test_the_comparison_sees_a_difference(helm_home: Path) -> None:
    """A chart whose container differed from the overlay's would fail the test above."""
    ours = by_key(chart(helm_home, "--set", "resources.limits.memory=1Gi"))
    theirs = by_key(kustomize(DEPLOY / "overlays" / "deployment"))
    key = ("Deployment", "nodefence")
    assert body(ours[key]) != body(theirs[key])
    assert normalize({"metadata": {"labels": {"app.kubernetes.io/instance": "x", "a": "b"}}}) == {
        "metadata": {"labels": {"a": "b"}}
    }
