"""Power fencing in the manifests: the BMC inventory component, the shipped policy's explicit
choice of proof, the example inventory Secret and the egress a BMC needs.

The component is rendered the way an operator enables it: a copy of deploy/ with the commented
line in the overlay turned on, so the documented step itself is what is tested.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path, PurePosixPath
from typing import Any

import kubernetes_validate
import pytest
import yaml

from nodefence.fencing.drivers.ipmi import IpmiBmc
from nodefence.fencing.drivers.redfish import RedfishBmc
from nodefence.fencing.inventory import load_inventory
from nodefence.policy import load_policy, parse_policy

from .conftest import (
    DEPLOY,
    NAMESPACE,
    OVERLAYS,
    Obj,
    find,
    kustomize,
    kustomize_run,
    parse,
    pod_templates,
    rendered,
    workloads,
)

COMPONENT = "../../components/bmc-inventory"
SECRET = "nodefence-bmc-inventory"
KEY = "inventory.yaml"
ENV = "NODEFENCE_BMC_INVENTORY"
MOUNT = "/etc/nodefence/bmc"
UID = 10001
K8S_VERSION = "1.32"
EXAMPLE = DEPLOY / "bmc-inventory.example.yaml"
POLICY = DEPLOY / "base" / "policy.yaml"
COMMENTED = re.compile(rf"^(\s*)# - {re.escape(COMPONENT)}\s*$", re.MULTILINE)

_enabled: dict[str, list[Obj]] = {}


README = DEPLOY / "README.md"
NETWORKS_EXAMPLE = DEPLOY / "components" / "bmc-inventory" / "egress-networks.example.yaml"
BMC_PORTS = {(443, "TCP"), (8443, "TCP"), (623, "UDP")}
API_PORTS = {(443, "TCP"), (6443, "TCP")}


def readme_enable_commands() -> str:
    """The shell lines of deploy/README.md's "Egress to the BMCs" that copy the networks file
    into an overlay and switch the component on (the editor and kubectl lines left out)."""
    section = README.read_text().split("### Egress to the BMCs", 1)[1].split("\n### ", 1)[0]
    blocks = [b.split("```", 1)[0] for b in section.split("```sh\n")[1:]]
    (block,) = [b for b in blocks if "egress-networks.example.yaml" in b]
    commands, keep = [], False
    for line in block.splitlines():
        if line.startswith(("cp ", "sed ")):
            keep = True
        if keep:
            commands.append(line)
        keep = keep and line.endswith("\\")
    assert any(c.startswith("cp ") for c in commands), block
    assert any(c.startswith("sed ") for c in commands), block
    return "\n".join(commands)


def enable_in(overlay_dir: Path) -> None:
    """Runs the README's lines in an overlay directory, as an operator pastes them."""
    subprocess.run(
        ["bash", "-euo", "pipefail", "-c", readme_enable_commands()],
        cwd=overlay_dir,
        check=True,
        capture_output=True,
        text=True,
    )


@pytest.fixture(scope="module")
def enabled_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of deploy/ in which every overlay has the example networks listed and the
    component line turned on, by the README's own commands."""
    root = tmp_path_factory.mktemp("bmc") / "deploy"
    shutil.copytree(DEPLOY, root)
    for overlay in OVERLAYS:
        kustomization = root / "overlays" / overlay / "kustomization.yaml"
        assert len(COMMENTED.findall(kustomization.read_text())) == 1, overlay
        enable_in(kustomization.parent)
        text = kustomization.read_text()
        assert COMMENTED.findall(text) == [], f"{overlay}: the component line is still off"
        assert f"- {COMPONENT}" in text, overlay
    return root


def example_networks() -> Obj:
    networks: Obj = yaml.safe_load(NETWORKS_EXAMPLE.read_text())
    return networks


def enabled(root: Path, overlay: str) -> list[Obj]:
    if overlay not in _enabled:
        _enabled[overlay] = kustomize(root / "overlays" / overlay)
    return _enabled[overlay]


def container(template: Obj) -> Obj:
    (only,) = template["spec"]["containers"]
    result: Obj = only
    return result


def env_of(template: Obj) -> dict[str, str | None]:
    return {e["name"]: e.get("value") for e in container(template).get("env", [])}


def readable_by_nodefence(mode: int, pod_security: dict[str, Any]) -> bool:
    """Whether user 10001 (group 10001) can read a Secret volume's file: the kubelet owns the
    files by root, and gives them to the pod's fsGroup (adding group read) when it has one."""
    if pod_security.get("fsGroup") == UID:
        return bool((mode | 0o440) & 0o040)
    return bool(mode & 0o004)


def test_shipped_overlays_do_not_mount_an_inventory(overlay: str, objs: list[Obj]) -> None:
    """A configured inventory that is missing fails start-up by design, so the overlays as shipped
    neither mount one nor name one; the component is there, commented, to be turned on."""
    overlay_file = DEPLOY / "overlays" / overlay / "kustomization.yaml"
    assert len(COMMENTED.findall(overlay_file.read_text())) == 1
    for label, template in pod_templates(objs):
        assert ENV not in env_of(template), label
        volumes = template["spec"].get("volumes", [])
        assert all(v.get("secret", {}).get("secretName") != SECRET for v in volumes), label


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_component_mounts_the_secret_read_only_where_the_env_points(
    enabled_root: Path, overlay: str
) -> None:
    """In the receiver and in the reconcile CronJob (which completes fences too), the file that
    NODEFENCE_BMC_INVENTORY names comes from the Secret's inventory.yaml key, on a read-only
    mount, with a mode that lets user 10001 read it and nobody write it."""
    templates = dict(pod_templates(enabled(enabled_root, overlay)))
    # The Deployment's replicas reconcile themselves; the Knative overlay has the CronJob.
    expected = (
        {"Deployment/nodefence"}
        if overlay == "deployment"
        else {"Service/nodefence", "CronJob/nodefence-reconcile"}
    )
    assert set(templates) == expected
    for label, template in templates.items():
        path = PurePosixPath(env_of(template)[ENV] or "")
        assert path == PurePosixPath(MOUNT) / KEY, label
        mounts = [m for m in container(template)["volumeMounts"] if m["mountPath"] == MOUNT]
        assert len(mounts) == 1, label
        (mount,) = mounts
        assert mount["readOnly"] is True, label
        assert "subPath" not in mount, label
        volume = next(v for v in template["spec"]["volumes"] if v["name"] == mount["name"])
        secret = volume["secret"]
        assert secret["secretName"] == SECRET, label
        assert secret.get("optional", False) is False, label
        items = secret.get("items")
        if items is None:
            assert path.name == KEY, label
        else:
            assert {"key": KEY, "path": path.name} in items, label
        mode = secret["defaultMode"]
        assert mode & 0o222 == 0, f"{label}: mode {mode:o} is writable"
        pod_security = template["spec"].get("securityContext", {})
        assert readable_by_nodefence(mode, pod_security), f"{label}: mode {mode:o}"
        if pod_security.get("fsGroup") == UID:
            # With the group at hand, others need nothing.
            assert mode & 0o007 == 0, f"{label}: mode {mode:o} is world-readable"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_component_only_adds_the_inventory(enabled_root: Path, overlay: str) -> None:
    """Enabling the component changes nothing but the volume, its mount and the env entry: taking
    those out again gives back the shipped overlay, object for object. It ships no Secret."""
    with_it = enabled(enabled_root, overlay)
    assert find(with_it, "Secret") == []
    stripped = json.loads(json.dumps(with_it))
    for _label, template in pod_templates(stripped):
        spec = template["spec"]
        spec["volumes"] = [v for v in spec["volumes"] if v["name"] != "bmc-inventory"]
        c = container(template)
        c["volumeMounts"] = [m for m in c["volumeMounts"] if m["name"] != "bmc-inventory"]
        c["env"] = [e for e in c["env"] if e["name"] != ENV]
    # And its egress: the BMC policy, and the API server rule's destinations.
    stripped = [o for o in stripped if o["metadata"]["name"] != "nodefence-bmc"]
    base = next(
        o for o in stripped if o["kind"] == "NetworkPolicy" and o["metadata"]["name"] == "nodefence"
    )
    del base["spec"]["egress"][1]["to"]
    assert stripped == rendered(overlay)


def test_component_keeps_the_deployment_overlay_valid(enabled_root: Path) -> None:
    for o in enabled(enabled_root, "deployment"):
        kubernetes_validate.validate(o, K8S_VERSION, strict=True)


def test_component_keeps_the_knative_pods_valid(enabled_root: Path) -> None:
    """The Knative Service's revision runs as a pod (probe ports filled in by Knative's
    defaulting); the CronJob is a built-in object."""
    objs = enabled(enabled_root, "knative")
    for label, template in pod_templates(objs):
        if label.startswith("CronJob/"):
            continue
        spec = {
            k: v
            for k, v in json.loads(json.dumps(template["spec"])).items()
            if k not in {"containerConcurrency", "timeoutSeconds"}
        }
        for c in spec["containers"]:
            for probe in ("readinessProbe", "livenessProbe"):
                c[probe]["httpGet"]["port"] = c["ports"][0]["containerPort"]
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "nodefence"}, "spec": spec}
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    for cron in find(objs, "CronJob"):
        kubernetes_validate.validate(cron, K8S_VERSION, strict=True)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_volume_is_mounted_inside_another(enabled_root: Path, overlay: str) -> None:
    """ConfigMap and Secret volumes are read-only, so the container runtime cannot create a
    mount point inside one: a pod with the inventory mounted inside the policy's directory
    would never start. Policy and inventory each get a directory of their own."""
    for objs in (rendered(overlay), enabled(enabled_root, overlay)):
        for label, template in pod_templates(objs):
            paths = [PurePosixPath(m["mountPath"]) for m in container(template)["volumeMounts"]]
            for outer in paths:
                for inner in paths:
                    if inner != outer:
                        assert not inner.is_relative_to(outer), f"{label}: {inner} in {outer}"


def test_receiver_and_reconcile_pods_mount_the_same_inventory(enabled_root: Path) -> None:
    """Either may power a node off or on, so both read the same BMCs."""
    templates = dict(pod_templates(enabled(enabled_root, "knative")))
    dep, cron = templates["Service/nodefence"], templates["CronJob/nodefence-reconcile"]
    assert env_of(dep)[ENV] == env_of(cron)[ENV]
    [mounted] = [m for m in container(dep)["volumeMounts"] if m["name"] == "bmc-inventory"]
    assert mounted in container(cron)["volumeMounts"]
    # The same Secret (its mode differs: Knative admits no pod-level fsGroup).
    secrets = [
        {v["name"]: v["secret"]["secretName"] for v in t["spec"]["volumes"] if "secret" in v}
        for t in (dep, cron)
    ]
    assert secrets[0] == secrets[1] == {"bmc-inventory": SECRET}


def _example_secret() -> Obj:
    docs = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    (secret,) = docs
    result: Obj = secret
    return result


def test_example_inventory_secret_is_valid_and_never_applied(tmp_path: Path) -> None:
    """The example is the Secret the component mounts, its inventory passes the service's own
    strict loader with one Redfish and one IPMI BMC, its credentials are placeholders, and no
    kustomization ships it."""
    secret = _example_secret()
    assert secret["kind"] == "Secret"
    assert secret["metadata"] == {"name": SECRET, "namespace": NAMESPACE}
    assert set(secret["stringData"]) == {KEY}
    inventory_file = tmp_path / KEY
    inventory_file.write_text(secret["stringData"][KEY])
    inventory = load_inventory(inventory_file)
    kinds = sorted(type(b).__name__ for b in inventory.nodes.values())
    assert kinds == [IpmiBmc.__name__, RedfishBmc.__name__]
    for node, bmc in inventory.nodes.items():
        assert bmc.password.get_secret_value().startswith("replace-with-"), node
        assert bmc.username.startswith("replace-with-"), node
        if isinstance(bmc, RedfishBmc):
            # Certificate checks stay on in the example people copy.
            assert bmc.tls.insecure is False, node
    for kustomization in DEPLOY.rglob("kustomization.yaml"):
        # Comments may point people at the example; no entry may load it.
        entries = json.dumps(yaml.safe_load(kustomization.read_text()))
        assert EXAMPLE.name not in entries, kustomization


@pytest.mark.invariant("S10")
def test_shipped_policy_fences_only_with_proof() -> None:
    """The shipped policy makes the S10 choice explicitly: its default rule proves power-off
    through a BMC, and no rule is left to fence on inference alone."""
    policy = load_policy(POLICY)
    default = policy.rule_named("default")
    assert default is not None
    assert default.fencing is not None
    assert default.fencing.driver == "redfish"
    assert default.fencing.action == "off"
    for rule in policy.rules:
        assert rule.fencing is None or rule.fencing.driver != "none", rule.name
        assert rule.fencing is not None or rule.approval == "slack", rule.name


def _alternatives() -> list[str]:
    """The one-line alternatives the shipped policy shows in its comments."""
    lines = re.findall(r"^#\s+((?:fencing|approval):.*)$", POLICY.read_text(), re.MULTILINE)
    return [line.strip() for line in lines]


def test_every_alternative_in_the_shipped_policy_is_a_valid_rule() -> None:
    """Copying a commented alternative in place of the fencing section gives a policy the
    service accepts, with the driver (or approval) it promises; `none` is among them."""
    alternatives = _alternatives()
    chosen = set()
    for line in alternatives:
        rule = {"name": "default", **yaml.safe_load(line)}
        policy = parse_policy({"rules": [rule]}, line)
        parsed = policy.rules[0]
        chosen.add(parsed.fencing.driver if parsed.fencing is not None else parsed.approval)
    assert chosen == {"ipmi", "annotation", "http", "slack", "none"}


def _check_config(tmp_path: Path, **extra: str) -> dict[str, Any]:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "NODEFENCE_AUTH_DISABLED": "true",
        "NODEFENCE_POLICY_FILE": str(POLICY),
        **extra,
    }
    out = subprocess.run(
        [sys.executable, "-m", "nodefence", "check-config", "--offline"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    report: dict[str, Any] = json.loads(out.stdout)
    report["_stdout"] = out.stdout
    return report


def test_check_config_says_the_shipped_policy_lacks_an_inventory(tmp_path: Path) -> None:
    """Without the component, check-config still accepts the policy and says plainly that the
    rule has no BMC to ask, which is what the README tells people to look for."""
    report = _check_config(tmp_path)
    assert report["bmc_inventory"] is None
    assert "redfish" in report["fencing"]["default"]
    assert "NO BMC INVENTORY SET" in report["fencing"]["default"]


# The example inventory has a Redfish and an IPMI node: each needs a rule of its own driver,
# chosen by a node label, as the example's comment says.
BY_BMC_POLICY = """\
rules:
- name: redfish-nodes
  match: {node_selector: "nodefence.io/bmc=redfish"}
  fencing: {driver: redfish, action: "off"}
- name: ipmi-nodes
  match: {node_selector: "nodefence.io/bmc=ipmi"}
  fencing: {driver: ipmi, action: "off"}
"""


def test_check_config_shows_the_example_inventory_masked(tmp_path: Path) -> None:
    inventory_file = tmp_path / KEY
    inventory_file.write_text(_example_secret()["stringData"][KEY])
    policy = tmp_path / "policy.yaml"
    policy.write_text(BY_BMC_POLICY)
    report = _check_config(
        tmp_path, NODEFENCE_BMC_INVENTORY=str(inventory_file), NODEFENCE_POLICY_FILE=str(policy)
    )
    assert "BMC inventory loaded" in report["fencing"]["redfish-nodes"]
    assert "BMC inventory loaded" in report["fencing"]["ipmi-nodes"]
    nodes = report["bmc_inventory"]["nodes"]
    assert {n["driver"] for n in nodes.values()} == {"redfish", "ipmi"}
    assert all(n["password"] == "***" for n in nodes.values())
    assert "replace-with-the-bmc-password" not in report["_stdout"]


def test_check_config_refuses_the_example_inventory_under_one_redfish_rule(tmp_path: Path) -> None:
    """The shipped policy powers every node through Redfish; an IPMI entry under it would be
    powered by no driver it names, so check-config stops and says which entry disagrees."""
    inventory_file = tmp_path / KEY
    inventory_file.write_text(_example_secret()["stringData"][KEY])
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "NODEFENCE_AUTH_DISABLED": "true",
        "NODEFENCE_POLICY_FILE": str(POLICY),
        "NODEFENCE_BMC_INVENTORY": str(inventory_file),
    }
    out = subprocess.run(
        [sys.executable, "-m", "nodefence", "check-config"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=60,
    )
    assert out.returncode == 2
    assert "worker2 is driver ipmi" in out.stderr
    assert "replace-with-the-bmc-password" not in out.stdout + out.stderr


def test_check_config_says_where_a_written_proof_is_read(tmp_path: Path) -> None:
    """The annotation driver's proof lives in nodefence's namespace, not on the Node."""
    written = tmp_path / "policy.yaml"
    written.write_text("rules:\n- name: agent\n  fencing: {driver: annotation}\n")
    report = _check_config(
        tmp_path, NODEFENCE_POLICY_FILE=str(written), NODEFENCE_NAMESPACE="fencing-ns"
    )
    said = report["fencing"]["agent"]
    assert "ConfigMap fencing-ns/nodefence-power.<node>" in said
    assert "the Node's own annotations are not read" in said


def _egress_rules_for(objs: list[Obj], template: Obj) -> list[Obj]:
    labels = template["metadata"]["labels"].items()
    rules: list[Obj] = []
    for np in find(objs, "NetworkPolicy"):
        spec = np["spec"]
        if "Egress" in spec["policyTypes"] and spec["podSelector"]["matchLabels"].items() <= labels:
            rules.extend(spec.get("egress", []))
    return rules


def _reachable(objs: list[Obj], template: Obj) -> dict[tuple[int, str], list[Obj] | None]:
    """Per port, the destinations a pod may reach on it (None: any address)."""
    reach: dict[tuple[int, str], list[Obj] | None] = {}
    for rule in _egress_rules_for(objs, template):
        for p in rule["ports"]:
            key = (p["port"], p["protocol"])
            if "to" not in rule:
                reach[key] = None
            elif key not in reach or reach[key] is not None:
                reach[key] = [*(reach.get(key) or []), *rule["to"]]
    return reach


def test_shipped_overlays_reach_no_bmc(objs: list[Obj]) -> None:
    """Without the inventory no pod may reach a BMC port (IPMI's UDP 623, Redfish's 8443); the
    API server's 443/6443 stay open to any address until its addresses are listed."""
    for label, template in pod_templates(objs):
        reach = _reachable(objs, template)
        assert (623, "UDP") not in reach, label
        assert (8443, "TCP") not in reach, label
        assert reach[(443, "TCP")] is None, label
        assert reach[(6443, "TCP")] is None, label
        assert {k for k, v in reach.items() if v is None} == API_PORTS, label


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_component_limits_egress_to_the_listed_networks(enabled_root: Path, overlay: str) -> None:
    """With the inventory, every pod that fences reaches the BMC ports on exactly the listed
    networks, the API server's ports on exactly its listed addresses, and no port of any
    address: no HTTPS server but these."""
    objs = enabled(enabled_root, overlay)
    networks = example_networks()
    assert find(objs, "EgressNetworks") == [], "local-config: never applied"
    templates = pod_templates(objs)
    assert {label for label, _ in templates} == workloads(objs)
    for label, template in templates:
        reach = _reachable(objs, template)
        assert all(v is not None for v in reach.values()), (label, reach)
        for port in BMC_PORTS - API_PORTS:
            assert reach[port] == networks["bmc"], (label, port)
        for port in API_PORTS - BMC_PORTS:
            assert reach[port] == networks["apiServer"], (label, port)
        https = [json.dumps(peer, sort_keys=True) for peer in reach[(443, "TCP")] or []]
        listed = networks["bmc"] + networks["apiServer"]
        assert sorted(https) == sorted(json.dumps(peer, sort_keys=True) for peer in listed)
    (bmc,) = find(objs, "NetworkPolicy", "nodefence-bmc")
    (rule,) = bmc["spec"]["egress"]
    assert {(p["port"], p["protocol"]) for p in rule["ports"]} == BMC_PORTS
    assert rule["to"] == networks["bmc"]


def _overlay_with(tmp_path: Path, networks: str | None) -> subprocess.CompletedProcess[str]:
    """An overlay of the operator's on the Deployment overlay with the component, and the
    networks file as given (None: none)."""
    root = tmp_path / "deploy"
    shutil.copytree(DEPLOY, root)
    mine = root / "overlays" / "mine"
    mine.mkdir()
    resources = ["../deployment"]
    if networks is not None:
        (mine / "egress-networks.yaml").write_text(networks)
        resources.append("egress-networks.yaml")
    (mine / "kustomization.yaml").write_text(
        yaml.safe_dump({"resources": resources, "components": [COMPONENT]})
    )
    return kustomize_run(mine)


def test_component_does_not_render_without_the_networks(tmp_path: Path) -> None:
    out = _overlay_with(tmp_path, None)
    assert out.returncode != 0, out.stdout
    assert "nothing selected by EgressNetworks" in out.stderr, out.stderr
    assert "nodefence-egress-networks" in out.stderr, out.stderr


@pytest.mark.parametrize("emptied", ["bmc", "apiServer"])
def test_component_does_not_render_with_an_empty_list(tmp_path: Path, emptied: str) -> None:
    """An empty `to` would allow every address: an empty list fails the render instead."""
    networks = example_networks()
    networks[emptied] = []
    out = _overlay_with(tmp_path, yaml.safe_dump(networks))
    assert out.returncode != 0, out.stdout
    assert f"fieldPath `{emptied}.0.ipBlock.cidr` is missing" in out.stderr, out.stderr


def test_component_renders_the_operators_networks(tmp_path: Path) -> None:
    networks = example_networks()
    networks["bmc"] = [
        {"ipBlock": {"cidr": "172.30.0.0/24"}},
        {"ipBlock": {"cidr": "172.31.0.0/16", "except": ["172.31.9.0/24"]}},
    ]
    networks["apiServer"] = [{"ipBlock": {"cidr": "172.29.0.10/32"}}]
    out = _overlay_with(tmp_path, yaml.safe_dump(networks))
    assert out.returncode == 0, out.stderr
    objs = parse(out.stdout)
    (bmc,) = find(objs, "NetworkPolicy", "nodefence-bmc")
    assert bmc["spec"]["egress"][0]["to"] == networks["bmc"]
    (base,) = find(objs, "NetworkPolicy", "nodefence")
    assert base["spec"]["egress"][1]["to"] == networks["apiServer"]
    for o in find(objs, "NetworkPolicy"):
        kubernetes_validate.validate(o, K8S_VERSION, strict=True)
