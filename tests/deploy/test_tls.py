"""deploy/components/tls: the webhook over HTTPS with cert-manager's certificate, rendered with
kubectl kustomize onto the Deployment overlay and onto a stack, validated strictly (Kubernetes'
schemas; cert-manager's Certificate CRD in tests/deploy/crds), and the Alertmanager receiver that
goes with it."""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from nodefence.settings import environment_names

from . import crd_schema
from .conftest import DEPLOY, NAMESPACE, REPO, Obj, find, kustomize, one, rendered

K8S_VERSION = "1.32"
COMPONENT = DEPLOY / "components" / "tls"
MOUNT = "/etc/nodefence/tls"
SECRET = "nodefence-tls"
CUSTOM_GROUPS = {"serving.knative.dev", "monitoring.coreos.com", "cert-manager.io"}
AM = DEPLOY / "alertmanager"


def _with_component(root: Path, name: str, base: str) -> Path:
    folder = root / "deploy" / "tls-checks" / name
    folder.mkdir(parents=True)
    (folder / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [f"../../{base}"],
                "components": ["../../components/tls"],
            }
        )
    )
    return folder


@pytest.fixture(scope="module")
def tls_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of deploy/ (and alertrules/, which the stacks include) with two kustomizations
    that add the component: to the Deployment overlay, and to the kube-prometheus stack."""
    root = tmp_path_factory.mktemp("tls")
    shutil.copytree(DEPLOY, root / "deploy")
    shutil.copytree(REPO / "alertrules", root / "alertrules")
    _with_component(root, "deployment", "overlays/deployment")
    _with_component(root, "stack", "stacks/kube-prometheus")
    return root


@pytest.fixture(scope="module")
def deployment(tls_root: Path) -> list[Obj]:
    return kustomize(tls_root / "deploy" / "tls-checks" / "deployment")


@pytest.fixture(scope="module")
def stack(tls_root: Path) -> list[Obj]:
    return kustomize(tls_root / "deploy" / "tls-checks" / "stack")


def _group(obj: Obj) -> str:
    api: str = obj["apiVersion"]
    return api.split("/", maxsplit=1)[0] if "/" in api else ""


def _container(deployment: Obj) -> Obj:
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    result: Obj = only
    return result


def _env(container: Obj) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def test_builtin_objects_stay_valid_for_kubernetes(deployment: list[Obj]) -> None:
    checked = 0
    for obj in deployment:
        if _group(obj) in CUSTOM_GROUPS:
            continue
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        checked += 1
    assert checked >= 8


def test_certificates_pass_strict_validation_against_cert_managers_crd(
    deployment: list[Obj],
) -> None:
    certificates = find(deployment, "Certificate")
    assert {c["metadata"]["name"] for c in certificates} == {"nodefence-ca", "nodefence-tls"}
    for certificate in certificates:
        crd_schema.validate(certificate)


def test_strict_validation_refuses_a_field_the_crd_does_not_name(deployment: list[Obj]) -> None:
    broken = copy.deepcopy(one(deployment, "Certificate", "nodefence-tls"))
    broken["spec"]["dnsName"] = broken["spec"].pop("dnsNames")
    with pytest.raises(jsonschema.ValidationError):
        crd_schema.validate(broken)
    wrong_usage = copy.deepcopy(one(deployment, "Certificate", "nodefence-tls"))
    wrong_usage["spec"]["usages"] = ["server-auth"]
    with pytest.raises(jsonschema.ValidationError):
        crd_schema.validate(wrong_usage)


def test_issuers_form_nodefences_own_ca(deployment: list[Obj]) -> None:
    issuers = {i["metadata"]["name"]: i["spec"] for i in find(deployment, "Issuer")}
    assert issuers == {
        "nodefence-selfsigned": {"selfSigned": {}},
        "nodefence-ca": {"ca": {"secretName": "nodefence-ca"}},
    }
    ca = one(deployment, "Certificate", "nodefence-ca")["spec"]
    assert ca["isCA"] is True
    assert ca["secretName"] == "nodefence-ca"
    assert ca["issuerRef"]["name"] == "nodefence-selfsigned"
    leaf = one(deployment, "Certificate", "nodefence-tls")["spec"]
    assert leaf["issuerRef"] == {
        "name": "nodefence-ca",
        "kind": "Issuer",
        "group": "cert-manager.io",
    }
    assert "isCA" not in leaf
    assert "server auth" in leaf["usages"]
    assert leaf["privateKey"]["rotationPolicy"] == "Always"


def test_every_object_is_in_nodefences_namespace_also_from_a_stack(stack: list[Obj]) -> None:
    for kind in ("Issuer", "Certificate"):
        for obj in find(stack, kind):
            assert obj["metadata"]["namespace"] == NAMESPACE, obj["metadata"]


def test_the_receiver_mounts_the_certificate_and_probes_over_https(
    deployment: list[Obj],
) -> None:
    dep = one(deployment, "Deployment", "nodefence")
    pod = dep["spec"]["template"]["spec"]
    container = _container(dep)
    [volume] = [v for v in pod["volumes"] if v["name"] == "tls"]
    assert volume["secret"] == {"secretName": SECRET, "defaultMode": 0o440}
    assert pod["securityContext"]["fsGroup"] == 10001
    [mount] = [m for m in container["volumeMounts"] if m["name"] == "tls"]
    assert mount == {"name": "tls", "mountPath": MOUNT, "readOnly": True}
    env = _env(container)
    assert env["NODEFENCE_TLS_CERT_FILE"] == f"{MOUNT}/tls.crt"
    assert env["NODEFENCE_TLS_KEY_FILE"] == f"{MOUNT}/tls.key"
    names = set(environment_names())
    assert {"NODEFENCE_TLS_CERT_FILE", "NODEFENCE_TLS_KEY_FILE"} <= names
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        assert container[probe]["httpGet"]["scheme"] == "HTTPS"
        assert container[probe]["httpGet"]["path"] == path


def test_the_component_changes_nothing_else_in_the_receiver(deployment: list[Obj]) -> None:
    plain = one(rendered("deployment"), "Deployment", "nodefence")
    with_tls = copy.deepcopy(one(deployment, "Deployment", "nodefence"))
    pod = with_tls["spec"]["template"]["spec"]
    pod["volumes"] = [v for v in pod["volumes"] if v["name"] != "tls"]
    container = _container(with_tls)
    container["volumeMounts"] = [m for m in container["volumeMounts"] if m["name"] != "tls"]
    container["env"] = [e for e in container["env"] if not e["name"].startswith("NODEFENCE_TLS_")]
    for probe in ("readinessProbe", "livenessProbe"):
        del container[probe]["httpGet"]["scheme"]
    assert with_tls == plain


def test_without_the_component_the_overlays_serve_plain_http() -> None:
    for overlay in ("deployment", "knative"):
        for obj in rendered(overlay):
            assert obj["kind"] not in {"Certificate", "Issuer"}
            text = yaml.safe_dump(obj)
            assert "NODEFENCE_TLS_" not in text
            assert "HTTPS" not in text


def test_the_service_serves_https_on_443_under_a_name_the_certificate_carries(
    deployment: list[Obj],
) -> None:
    service = one(deployment, "Service", "nodefence")
    [port] = service["spec"]["ports"]
    assert port["name"] == "https"
    assert port["port"] == 443
    assert port["targetPort"] == "http"
    names = one(deployment, "Certificate", "nodefence-tls")["spec"]["dnsNames"]
    name = f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    assert name in names
    assert f"{name}.cluster.local" in names


def test_the_stacks_podmonitor_scrapes_over_https_trusting_nodefences_ca(
    stack: list[Obj],
) -> None:
    monitor = one(stack, "PodMonitor", "nodefence")
    endpoint = monitor["spec"]["podMetricsEndpoints"][0]
    assert endpoint["port"] == "http"
    assert endpoint["scheme"] == "https"
    tls = endpoint["tlsConfig"]
    assert tls["ca"]["secret"] == {"name": SECRET, "key": "ca.crt"}
    assert monitor["metadata"]["namespace"] == NAMESPACE
    names = one(stack, "Certificate", "nodefence-tls")["spec"]["dnsNames"]
    assert tls["serverName"] in names


def _example_with_tls_receiver(tmp_path: Path) -> Path:
    example = yaml.safe_load((AM / "alertmanager.example.yaml").read_text())
    receiver = yaml.safe_load((AM / "nodefence-receiver-tls.yaml").read_text())["receiver"]
    example["receivers"] = [
        receiver if r["name"] == "nodefence" else r for r in example["receivers"]
    ]
    path = tmp_path / "alertmanager.yaml"
    path.write_text(yaml.safe_dump(example, sort_keys=False))
    return path


def test_alertmanagers_tls_receiver_trusts_the_ca_under_a_certificate_name(
    deployment: list[Obj], tmp_path: Path
) -> None:
    receiver = yaml.safe_load((AM / "nodefence-receiver-tls.yaml").read_text())["receiver"]
    plain = yaml.safe_load((AM / "nodefence-route.yaml").read_text())["receiver"]
    [webhook] = receiver["webhook_configs"]
    [plain_webhook] = plain["webhook_configs"]
    assert receiver["name"] == plain["name"]
    assert webhook["url"] == "https://nodefence.nodefence.svc/alerts"
    assert plain_webhook["url"] == "http://nodefence.nodefence.svc/alerts"
    # The same webhook otherwise: token, resolves, whole groups.
    for key in ("send_resolved", "max_alerts"):
        assert webhook[key] == plain_webhook[key]
    assert webhook["http_config"]["authorization"] == plain_webhook["http_config"]["authorization"]
    tls = webhook["http_config"]["tls_config"]
    assert tls["ca_file"].endswith("/ca.crt")
    assert "insecure_skip_verify" not in tls
    names = one(deployment, "Certificate", "nodefence-tls")["spec"]["dnsNames"]
    assert tls["server_name"] in names

    amtool = shutil.which("amtool")
    if amtool is None:
        pytest.skip("amtool not installed (Debian package prometheus-alertmanager)")
    out = subprocess.run(
        [amtool, "check-config", str(_example_with_tls_receiver(tmp_path))],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
