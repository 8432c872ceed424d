"""What the safety scenarios on the real backend share: replicas of ``nodefence serve`` (one
per identity, optionally on a skewed clock), the API server's own clock, a node's Lease age on
that clock, the Redfish power-on a test restores a machine with, and the restore itself, so that
every test leaves the shared cluster healthy for the next one.
"""

from __future__ import annotations

import base64
import email.utils
import os
import secrets
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from bench.processes import Processes, eventually, free_port, http
from kubernetes import client
from tests.e2e.harness import OOS, Nodefence

from .conftest import RealBackend
from .test_seed_story import NOT_READY_WITHIN, STEP_WITHIN, oos_taints, post_alert

LEASES = "kube-node-lease"
MIRROR = "nodefence.io/"


def start_replica(
    procs: Processes,
    backend: RealBackend,
    policy: dict[str, Any],
    identity: str,
    *,
    token: str | None = None,
    clock_offset: str | None = None,
) -> Nodefence:
    """One ``nodefence serve`` replica; with ``clock_offset`` (libfaketime's ``-f`` syntax, e.g.
    ``+600s``) its wall clock is that far off while its monotonic clock stays true, as NTP
    trouble leaves a machine."""
    policy_file = procs.workdir / f"policy-{identity}.yaml"
    policy_file.write_text(yaml.safe_dump(policy))
    token = token or secrets.token_urlsafe(24)
    port = free_port()
    argv = [sys.executable, "-m", "nodefence", "serve"]
    env = {
        "PORT": str(port),
        "NODEFENCE_HOST": "127.0.0.1",
        "NODEFENCE_ALERT_TOKEN": token,
        "KUBECONFIG": str(backend.kubeconfig),
        "NODEFENCE_NAMESPACE": "nodefence",
        "NODEFENCE_IDENTITY": identity,
        "NODEFENCE_LOG_FORMAT": "json",
        "NODEFENCE_LOG_LEVEL": "debug",
        "NODEFENCE_POLICY_FILE": str(policy_file),
        "NODEFENCE_BMC_INVENTORY": str(backend.inventory),
        "NODEFENCE_RECONCILE_INTERVAL": "0",
    }
    if clock_offset is not None:
        faketime = shutil.which("faketime")
        assert faketime is not None, "faketime is required (Debian package faketime)"
        argv = [faketime, "-f", clock_offset, *argv]
        env["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
        # The backend's certificates are valid from five minutes before it started, so a clock
        # further behind would refuse them before any Kubernetes semantics come into play.
        env["KUBECONFIG"] = str(unverified_kubeconfig(backend, procs.workdir))
    process = procs.start(f"nodefence-{identity}", argv, env=env)
    url = f"http://127.0.0.1:{port}"
    procs.wait_ready(process, f"{url}/readyz", within=120.0)
    return Nodefence(url, token, process)


def unverified_kubeconfig(backend: RealBackend, workdir: Path) -> Path:
    """The backend's kubeconfig with the server certificate's check off, token unchanged."""
    kubeconfig = yaml.safe_load(backend.kubeconfig.read_text())
    for cluster in kubeconfig["clusters"]:
        cluster["cluster"].pop("certificate-authority-data", None)
        cluster["cluster"].pop("certificate-authority", None)
        cluster["cluster"]["insecure-skip-tls-verify"] = True
    path = workdir / "kubeconfig-unverified"
    path.write_text(yaml.safe_dump(kubeconfig))
    return path


def blocked(decision: dict[str, Any]) -> list[str]:
    return [r["guard"] for r in decision["reasons"] if not r["passed"]]


def server_now(backend: RealBackend) -> datetime:
    """The API server's clock, from the ``Date`` header of a request made now."""
    _, _, headers = client.VersionApi(backend.api).get_code_with_http_info()
    return email.utils.parsedate_to_datetime(headers["Date"])


def lease_age(backend: RealBackend, node: str) -> float:
    """Seconds since the node's Lease was last written, both ends stamped by the API server."""
    lease, _, headers = client.CoordinationV1Api(backend.api).read_namespaced_lease_with_http_info(
        node, LEASES
    )
    written = max(m.time for m in lease.metadata.managed_fields or [])
    return (email.utils.parsedate_to_datetime(headers["Date"]) - written).total_seconds()


def renew_lease(backend: RealBackend, node: str) -> None:
    """Renew the node's Lease as its kubelet's lease controller does, by a write the API server
    stamps."""
    # A MicroTime, which the API server parses only in this exact form.
    renewed = server_now(backend).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    client.CoordinationV1Api(backend.api).patch_namespaced_lease(
        node, LEASES, {"spec": {"renewTime": renewed}}
    )


def bmc(backend: RealBackend, node: str) -> tuple[str, dict[str, str]]:
    entry = yaml.safe_load(Path(backend.inventory).read_text())["nodes"][node]
    basic = base64.b64encode(f"{entry['username']}:{entry['password']}".encode()).decode()
    return f"{entry['address']}{entry['system']}", {"Authorization": f"Basic {basic}"}


def power_on(backend: RealBackend, node: str) -> None:
    system, headers = bmc(backend, node)
    code, raw = http(
        "POST",
        f"{system}/Actions/ComputerSystem.Reset",
        {"ResetType": "On"},
        headers=headers,
    )
    assert code in (200, 202, 204), f"Redfish On {node} -> {code}: {raw!r}"


def nodefence_events(backend: RealBackend, node: str, reason: str) -> int:
    """How many times nodefence reported ``reason`` on the Node, counting repeats the API
    server aggregated into one Event."""
    events = backend.core.list_event_for_all_namespaces(
        field_selector=f"involvedObject.kind=Node,involvedObject.name={node},reason={reason}"
    )
    return sum(
        e.count or 1 for e in events.items if (e.source and e.source.component) == "nodefence"
    )


def wait_not_ready(backend: RealBackend, node: str) -> None:
    eventually(
        lambda: backend.ready(node) == "Unknown",
        within=NOT_READY_WITHIN,
        what=f"{node} NotReady",
    )


def release(backend: RealBackend, node: str) -> None:
    """``nodefence release``: let go of a fence nodefence applied, its record entry included,
    so a fence a failed test left behind does not spend the next test's budget."""
    subprocess.run(
        [sys.executable, "-m", "nodefence", "release", node, "--reason", "test restore", "--yes"],
        env={
            **os.environ,
            "KUBECONFIG": str(backend.kubeconfig),
            "NODEFENCE_NAMESPACE": "nodefence",
        },
        check=False,
        timeout=120,
    )


def restore(backend: RealBackend, node: str, nodefence: Nodefence | None = None) -> None:
    """Leave the node as the next test expects it: machine on, kubelet up, Ready, and no
    out-of-service taint. A taint nodefence applied goes by the resolved alert, through its own
    verified unfence; only if that cannot happen is it removed by hand."""
    system, headers = bmc(backend, node)
    code, raw = http("GET", system, headers=headers)
    if code == 200 and yaml.safe_load(raw)["PowerState"] != "On":
        power_on(backend, node)
    if backend.control(node, "up")["kubelet"] != "up":
        raise AssertionError(f"{node}: kubelet not back")
    eventually(lambda: backend.ready(node) == "True", within=STEP_WITHIN, what=f"{node} Ready")
    if nodefence is not None and oos_taints(backend.core.read_node(node)):

        def unfenced() -> bool:
            post_alert(nodefence, node, "resolved")
            return not oos_taints(backend.core.read_node(node))

        eventually(unfenced, within=STEP_WITHIN, interval=1.0, what=f"{node} unfenced")
    if oos_taints(backend.core.read_node(node)):
        release(backend, node)
    current = backend.core.read_node(node)
    if oos_taints(current):
        kept = [t for t in current.spec.taints or [] if t.key != OOS]
        backend.core.patch_node(node, {"spec": {"taints": kept or None}})
    forget_mirror(backend, node)


def forget_mirror(backend: RealBackend, node: str) -> None:
    """Take nodefence's mirror annotations off the node: an unfence keeps them (when it was
    fenced and unfenced, for people), and the next test of the session expects a node
    nodefence never touched."""
    annotations = backend.core.read_node(node).metadata.annotations or {}
    mirror = [key for key in annotations if key.startswith(MIRROR)]
    if mirror:
        backend.core.patch_node(node, {"metadata": {"annotations": dict.fromkeys(mirror)}})
