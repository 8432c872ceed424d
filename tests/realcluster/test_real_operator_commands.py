"""Every operator command against the real API server, with and without Knative's API, and
every Event nodefence writes accepted by it.

The real kube-apiserver answers a group it does not serve with a plain-text ``404 page not
found``; a client that parsed that as JSON took it for an outage and ``status``, ``pause``,
``resume`` and ``release`` failed after 20 s on any cluster without Knative. So each command
runs here as the operator runs it (``python -m nodefence ...`` with the backend's kubeconfig),
once without the ``serving.knative.dev`` group and once with a minimal Knative Service CRD
installed (removed again after, so that no other test sees it), and its output and exit code
are the real ones. Where Knative is served, a namespace holding only a labelled Knative Service
is an install; where it is not, that namespace is refused as holding none.

The Events: the real API server refuses (422) an Event in nodefence's namespace whose involved
object names no namespace, which no simulator test saw. Each reason nodefence puts on a Node
(``shell.report.node_event`` and the release command's) is written here through the event
recorder and read back, a repeat counted onto its Event by the recorder's patch; the namespace
Events come from the commands themselves (``pause``, ``resume``, and ``reconcile`` with
Alertmanager unreachable).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bench.processes import eventually, free_port
from kubernetes import client

from nodefence.commands.release import EVENT_REASON as RELEASE_REASON
from nodefence.kube.client import KubeClient, load_api_client
from nodefence.kube.events import NODE_EVENT_NAMESPACE, EventRecorder
from nodefence.shell import report
from nodefence_sim.demo.payloads import node_alert, webhook

from .conftest import RealBackend

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(600)]

NAMESPACE = "nodefence"
# A node no other test of the tier fences: the commands read it as it is.
NODE = "control03"
# A namespace of this module's own, with nothing of nodefence in it but, where Knative is
# served, one labelled Knative Service.
KNATIVE_ONLY = f"knative-only-{uuid.uuid4().hex[:6]}"
CRD = "services.serving.knative.dev"
POLICY = "rules:\n  - name: default\n    fencing:\n      driver: none\n"


def knative_crd() -> dict[str, Any]:
    """Knative Serving's Service kind, as little of it as the API server needs to serve it."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD},
        "spec": {
            "group": "serving.knative.dev",
            "scope": "Namespaced",
            "names": {
                "kind": "Service",
                "listKind": "ServiceList",
                "plural": "services",
                "singular": "service",
                "shortNames": ["ksvc"],
            },
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


def serves_knative(backend: RealBackend) -> bool:
    """Whether discovery lists Knative's API group."""
    groups = client.ApisApi(backend.api).get_api_versions().groups
    return any(
        group.name == "serving.knative.dev" and any(v.version == "v1" for v in group.versions)
        for group in groups
    )


@pytest.fixture(scope="module")
def operator(real_backend: RealBackend, tmp_path_factory: pytest.TempPathFactory) -> Operator:
    workdir = tmp_path_factory.mktemp("operator-commands")
    policy = workdir / "policy.yaml"
    policy.write_text(POLICY)
    payload = workdir / "alert.json"
    payload.write_text(json.dumps(webhook([node_alert(NODE)])))
    return Operator(real_backend, workdir, policy, payload)


class Operator:
    """The ``nodefence`` command line as an operator runs it against the real backend."""

    def __init__(self, backend: RealBackend, workdir: Path, policy: Path, payload: Path) -> None:
        self.backend = backend
        self.workdir = workdir
        self.policy = policy
        self.payload = payload

    def run(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("NODEFENCE_")}
        return subprocess.run(
            [sys.executable, "-m", "nodefence", *args],
            env={
                **base,
                "HOME": str(self.workdir),
                "KUBECONFIG": str(self.backend.kubeconfig),
                "NODEFENCE_NAMESPACE": NAMESPACE,
                "NODEFENCE_POLICY_FILE": str(self.policy),
                "NODEFENCE_LOG_FORMAT": "json",
                **env,
            },
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def ok(self, *args: str, **env: str) -> str:
        done = self.run(*args, **env)
        assert done.returncode == 0, f"nodefence {' '.join(args)}: {done.stderr}"
        return done.stdout


@pytest.fixture(scope="module")
def knative_only(real_backend: RealBackend) -> Iterator[str]:
    core = real_backend.core
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=KNATIVE_ONLY)))
    try:
        yield KNATIVE_ONLY
    finally:
        core.delete_namespace(KNATIVE_ONLY)


@pytest.fixture(scope="module", params=["without Knative", "with Knative"])
def knative(
    request: pytest.FixtureRequest, real_backend: RealBackend, knative_only: str
) -> Iterator[bool]:
    """Whether the API server serves Knative's Services: not at all (the seed cluster), or
    through a CRD installed for these tests, with one labelled Knative Service in
    ``knative_only``, and removed after them."""
    if request.param == "without Knative":
        assert not serves_knative(real_backend), "another test left Knative's CRD installed"
        yield False
        return
    extensions = client.ApiextensionsV1Api(real_backend.api)
    extensions.create_custom_resource_definition(knative_crd())
    try:
        eventually(lambda: serves_knative(real_backend), within=60, what="Knative served")
        client.CustomObjectsApi(real_backend.api).create_namespaced_custom_object(
            "serving.knative.dev",
            "v1",
            knative_only,
            "services",
            {
                "apiVersion": "serving.knative.dev/v1",
                "kind": "Service",
                "metadata": {
                    "name": "nodefence",
                    "labels": {"app.kubernetes.io/name": "nodefence"},
                },
                "spec": {"template": {"spec": {"containers": [{"image": "nodefence"}]}}},
            },
        )
        yield True
    finally:
        extensions.delete_custom_resource_definition(CRD)
        eventually(lambda: not serves_knative(real_backend), within=120, what="Knative gone again")


def test_status_pause_and_resume(operator: Operator, knative: bool) -> None:
    del knative
    status = operator.ok("status")
    assert status.startswith("Pause switch: not paused\n"), status
    assert "Fenced by nodefence:" in status
    paused = operator.ok("pause", "--reason", "real-cluster maintenance")
    assert paused.startswith("nodefence is paused by admin at "), paused
    assert paused.splitlines()[0].endswith(": real-cluster maintenance"), paused
    assert operator.ok("status").startswith("Pause switch: PAUSED by admin at ")
    resumed = operator.ok("resume")
    assert resumed.startswith("resumed by admin; it was paused by admin at "), resumed
    report_json = json.loads(operator.ok("status", "-o", "json"))
    assert report_json["pause"]["paused"] is False, report_json["pause"]
    assert operator.ok("resume") == "nodefence is not paused (nothing written)\n"


def test_explain_plan_reconcile_and_release(operator: Operator, knative: bool) -> None:
    del knative
    explained = operator.ok("explain", NODE)
    assert explained.startswith(f"A firing KubeNodeNotReady alert for node {NODE} at "), explained
    assert "Nothing was written: explain only reads" in explained
    [decision] = json.loads(operator.ok("plan", "--payload", str(operator.payload)))["decisions"]
    assert (decision["node"], decision["dry_run"]) == (NODE, True), decision
    assert decision["verdict"] in ("noop", "skip"), decision
    assert "decisions" in json.loads(operator.ok("reconcile"))
    released = operator.run("release", NODE, "--reason", "real-cluster check")
    assert released.returncode == 1, released.stderr
    assert released.stderr.startswith(f"nodefence: nodefence holds no fence of node {NODE} "), (
        released.stderr
    )


def test_check_config_and_check_fencing(operator: Operator, knative: bool) -> None:
    del knative
    report_json = json.loads(operator.ok("check-config", NODEFENCE_ALERT_TOKEN="check-config"))
    kubernetes = report_json["reachability"]["kubernetes"]
    assert (kubernetes["reachable"], kubernetes["version"]) == (True, "v1.36.3"), kubernetes
    assert {"nodefence-fences", "nodefence-control"} <= set(kubernetes["namespace"][NAMESPACE])
    fencing = operator.ok(
        "check-fencing", NODE, NODEFENCE_BMC_INVENTORY=str(operator.backend.inventory)
    )
    assert re.search(rf"^{NODE}\s+redfish\s+(on|off)\s", fencing, re.MULTILINE), fencing
    assert "ok: 1 of 1 nodes answered" in fencing


def test_an_install_is_found_by_its_knative_service_only_where_knative_is_served(
    operator: Operator, knative: bool, knative_only: str
) -> None:
    done = operator.run("status", NODEFENCE_NAMESPACE=knative_only)
    if knative:
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("Pause switch: not paused\n"), done.stdout
    else:
        assert done.returncode == 1, done.stdout
        assert done.stderr.startswith(
            f"nodefence: nodefence is not installed in namespace {knative_only}: "
        ), done.stderr
    assert "JSONDecodeError" not in done.stderr


def namespace_events(backend: RealBackend, reason: str) -> list[client.CoreV1Event]:
    listed = backend.core.list_namespaced_event(NAMESPACE, field_selector=f"reason={reason}")
    return list(listed.items)


def test_the_commands_namespace_events_are_written(operator: Operator) -> None:
    backend = operator.backend
    before = {
        reason: len(namespace_events(backend, reason))
        for reason in ("NodefencePaused", "NodefenceResumed", "AlertmanagerUnreachable")
    }
    operator.ok("pause", "--reason", "events on the real API server")
    operator.ok("resume")
    # Alertmanager unreachable: the reconcile pass says so with a Warning Event.
    operator.ok("reconcile", NODEFENCE_ALERTMANAGER_URL=f"http://127.0.0.1:{free_port()}")
    for reason, count in before.items():
        events = namespace_events(backend, reason)
        assert len(events) == count + 1, (reason, events)
        involved = events[-1].involved_object
        assert (involved.kind, involved.namespace) == ("ConfigMap", NAMESPACE), involved
    [unreachable] = namespace_events(backend, "AlertmanagerUnreachable")[-1:]
    assert (unreachable.type, unreachable.involved_object.name) == ("Warning", "nodefence-fences")


def node_event_reasons() -> set[str]:
    """Every reason ``shell.report.node_event`` can give a Node's Event, read from its source
    so that a reason added there is tested here too, and the release command's."""
    found = set(
        re.findall(r'"([A-Z][a-z]+(?:[A-Z][a-z]+)+)"', inspect.getsource(report.node_event))
    )
    assert {"NodeFenced", "FenceRefused", "UnfenceRefused", "PodsPurged"} <= found, found
    return found | {RELEASE_REASON}


def test_every_node_event_reason_is_accepted(real_backend: RealBackend) -> None:
    node = real_backend.core.read_node(NODE)
    uid = node.metadata.uid
    reasons = sorted(node_event_reasons())
    marker = f"real-cluster check {uuid.uuid4().hex[:8]}"

    async def record() -> tuple[list[bool], bool]:
        kube = KubeClient(await load_api_client(str(real_backend.kubeconfig)))
        try:
            events = EventRecorder(kube, "nodefence-realcluster", suppression_seconds=0)
            written = [
                await events.node_event(
                    node=NODE, node_uid=uid, reason=reason, message=f"{reason}: {marker}"
                )
                for reason in reasons
            ]
            # A refusal repeated: counted onto the Event its first occurrence created.
            for _ in range(2):
                repeated = await events.node_event(
                    node=NODE,
                    node_uid=uid,
                    reason="FenceRefused",
                    message=f"repeat: {marker}",
                    dedupe_key="ready",
                    warning=True,
                )
            return written, repeated
        finally:
            await kube.close()

    written, repeated = asyncio.run(record())
    assert all(written), dict(zip(reasons, written, strict=True))
    assert repeated
    listed = real_backend.core.list_namespaced_event(
        NODE_EVENT_NAMESPACE, field_selector=f"involvedObject.name={NODE}"
    ).items
    ours = [e for e in listed if marker in (e.message or "")]
    assert sorted(e.reason for e in ours if e.message.startswith(e.reason)) == reasons
    for event in ours:
        involved = event.involved_object
        assert (involved.kind, involved.uid, involved.namespace) == ("Node", uid, None), involved
    [counted] = [e for e in ours if e.message.startswith("repeat: ")]
    assert (counted.reason, counted.count, counted.type) == ("FenceRefused", 2, "Warning")
