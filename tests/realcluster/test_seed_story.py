"""The seed story on real Kubernetes semantics: a kwok node goes silent, the real
node-lifecycle controller marks it NotReady, nodefence fences it through the node's Redfish BMC
(ForceOff, Off read back), taints it, the stuck StatefulSet pod goes and the real StatefulSet
controller and scheduler run its replacement elsewhere; the BMC powers the machine on with a
new bootID and the resolved alert unfences it. And S1 on a live node: refused, nothing written.

Every wait polls the real objects with a deadline; the windows are generous because the tier
must pass on a busy 2-core machine.
"""

from __future__ import annotations

import base64
import json
import secrets
import time
from collections.abc import Callable
from datetime import datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from bench.processes import Processes, eventually, http
from kubernetes import client
from tests.e2e.harness import OOS, Nodefence, Simulator, start_nodefence

from nodefence.engine import record as fence_record
from nodefence.engine.record import FenceEntry
from nodefence.engine.recovery import STEADY_SECONDS, deployment_of
from nodefence.kube.convert import pod_facts, server_stamped
from nodefence_sim.demo.payloads import node_alert, webhook

from .conftest import GRACE_SECONDS, RealBackend

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(900)]

T = TypeVar("T")
NAMESPACE = "openstack"
STATEFULSET = "mariadb-server"
# Short windows for a test: the lease is stale 15s after kwok's last renewal (it renews every
# 10s), NotReady counts from the first second, and the node is healthy again 5s after it is back.
# Every node of a fresh cluster has just become Ready, which the storm guard would read as a
# storm that just ended; its cooldown is off here.
POLICY = {
    "cluster": {"storm_cooldown_seconds": 0},
    "rules": [
        {
            "name": "real",
            "min_not_ready_seconds": 0,
            # Tests of one session fence the same nodes minutes apart: no flap hold.
            "flap_window_seconds": 0,
            "lease_staleness_seconds": 15,
            "healthy_delay_seconds": 5,
            "fencing": {"driver": "redfish", "action": "reboot", "timeout_seconds": 30},
        }
    ],
}
NOT_READY_WITHIN = GRACE_SECONDS + 90.0
STEP_WITHIN = 120.0


def serve(
    procs: Processes,
    backend: RealBackend,
    policy: dict[str, Any],
    *,
    extra_env: dict[str, str] | None = None,
) -> Nodefence:
    policy_file = procs.workdir / "policy.yaml"
    policy_file.write_text(yaml.safe_dump(policy))
    cluster = Simulator(backend.url, backend.kubeconfig, backend.process)
    return start_nodefence(
        procs,
        cluster,
        secrets.token_urlsafe(24),
        identity="nodefence-realcluster",
        env={
            "NODEFENCE_POLICY_FILE": str(policy_file),
            "NODEFENCE_BMC_INVENTORY": str(backend.inventory),
            "NODEFENCE_RECONCILE_INTERVAL": "0",
            **(extra_env or {}),
        },
    )


def post_alert(nodefence: Nodefence, node: str, status: str) -> dict[str, Any]:
    payload = webhook([node_alert(node, status=status)])
    code, raw = http(
        "POST",
        f"{nodefence.url}/alerts",
        payload,
        headers={"Authorization": f"Bearer {nodefence.token}"},
        timeout=60,
    )
    assert code == 200, f"/alerts -> {code}: {raw!r}"
    decision: dict[str, Any] = yaml.safe_load(raw)["decisions"][0]
    return decision


def power_state(backend: RealBackend, node: str) -> str:
    entry = yaml.safe_load(Path(backend.inventory).read_text())["nodes"][node]
    basic = base64.b64encode(f"{entry['username']}:{entry['password']}".encode()).decode()
    code, raw = http(
        "GET", f"{entry['address']}{entry['system']}", headers={"Authorization": f"Basic {basic}"}
    )
    assert code == 200, f"Redfish {node} -> {code}: {raw!r}"
    return str(yaml.safe_load(raw)["PowerState"])


def timed(steps: list[tuple[str, float]], what: str, probe: Callable[[], T], within: float) -> T:
    started = time.monotonic()
    value = eventually(probe, within=within, interval=0.5, what=what)
    steps.append((what, time.monotonic() - started))
    return value


def oos_taints(node: client.V1Node) -> list[client.V1Taint]:
    return [t for t in node.spec.taints or [] if t.key == OOS]


def fence_entry(core: client.CoreV1Api, node: str) -> FenceEntry:
    configmap = core.read_namespaced_config_map(fence_record.CONFIGMAP, "nodefence")
    held = fence_record.decode(configmap.data, configmap.metadata.resource_version).entry(node)
    assert held is not None, configmap.data
    return held


def steady_elsewhere(backend: RealBackend, held: FenceEntry) -> tuple[datetime, int] | None:
    """When every pod the fence remembers has a replacement Running on another node, unchanged
    for the steady time on the API server's clock (the ``Date`` of the list that showed them):
    the latest of their server-stamped changes and how many they are; None before."""
    reply = backend.core.list_namespaced_pod(NAMESPACE, _preload_content=False)
    now = parsedate_to_datetime(reply.headers["Date"])
    assert held.silent_since is not None
    since = held.silent_since.replace(microsecond=0)
    fresh = [
        p
        for p in map(pod_facts, json.loads(reply.data)["items"])
        if p.node_name not in ("", held.node)
        and p.phase == "Running"
        and not p.terminating
        and p.created is not None
        and p.created >= since
        and p.changed is not None
    ]
    moments: list[datetime] = []
    for want in held.held.statefulset_pods():
        name = f"{want.owner}-{want.ordinal}"
        found = [p.changed for p in fresh if (p.namespace, p.name) == (want.namespace, name)]
        if not found or found[0] is None:
            return None
        moments.append(found[0])
    for (namespace, deployment), count in held.held.deployments().items():
        running = sorted(
            p.changed
            for p in fresh
            if p.changed is not None and p.namespace == namespace and deployment_of(p) == deployment
        )
        if len(running) < count:
            return None
        moments.extend(running[:count])
    last = max(moments)
    return (last, len(moments)) if (now - last).total_seconds() > STEADY_SECONDS else None


def recovery_metric(nodefence: Nodefence, sample: str) -> float:
    code, raw = http("GET", f"{nodefence.url}/metrics")
    assert code == 200
    line = next(line for line in raw.decode().splitlines() if line.startswith(sample + " "))
    return float(line.split()[1])


@pytest.mark.invariant("S10")
def test_seed_story_on_real_controllers(procs: Processes, real_backend: RealBackend) -> None:
    core, steps = real_backend.core, []
    pods = core.list_namespaced_pod(
        NAMESPACE, label_selector="application=mariadb,component=server"
    )
    victim = next(p for p in pods.items if p.status.phase == "Running")
    node, pod_name, pod_uid = victim.spec.node_name, victim.metadata.name, victim.metadata.uid
    boot_before = core.read_node(node).status.node_info.boot_id
    nodefence = serve(procs, real_backend, POLICY)

    assert real_backend.control(node, "down")["kubelet"] == "down"
    timed(
        steps, f"{node} NotReady", lambda: real_backend.ready(node) == "Unknown", NOT_READY_WITHIN
    )
    # The node's last sign of life: its Lease's last renewal, as the API server stamped it.
    lease = core.api_client.sanitize_for_serialization(
        client.CoordinationV1Api(real_backend.api).read_namespaced_lease(node, "kube-node-lease")
    )
    silent = server_stamped(lease)
    assert silent is not None
    # The seed's stuck pod: deleted while its kubelet is gone, it stays Terminating.
    core.delete_namespaced_pod(pod_name, NAMESPACE)
    stuck = core.read_namespaced_pod(pod_name, NAMESPACE)
    assert stuck.metadata.deletion_timestamp is not None
    assert stuck.metadata.uid == pod_uid
    assert power_state(real_backend, node) == "On", "a silent kubelet leaves the machine on"

    def fenced() -> dict[str, Any] | None:
        decision = post_alert(nodefence, node, "firing")
        return decision if decision["verdict"] == "fence" else None

    decision = timed(steps, "fence decision", fenced, STEP_WITHIN)
    assert decision["node"] == node
    proof = [r["message"] for r in decision["reasons"] if r["guard"] == "power-off" and r["passed"]]
    assert any("reports the machine is Off" in m for m in proof), decision["reasons"]
    tainted = timed(
        steps, "out-of-service taint", lambda: oos_taints(core.read_node(node)), STEP_WITHIN
    )
    assert [(t.value, t.effect) for t in tainted] == [("nodeshutdown", "NoExecute")]

    def purged() -> bool:
        try:
            current = core.read_namespaced_pod(pod_name, NAMESPACE)
        except client.ApiException as exc:
            return exc.status == 404
        return current.metadata.uid != pod_uid

    timed(steps, "stuck pod purged", purged, STEP_WITHIN)

    def replaced() -> client.V1Pod | None:
        try:
            current = core.read_namespaced_pod(pod_name, NAMESPACE)
        except client.ApiException:
            return None
        fresh = current.metadata.uid != pod_uid and current.status.phase == "Running"
        return current if fresh and current.spec.node_name != node else None

    replacement = timed(steps, "StatefulSet pod Running elsewhere", replaced, STEP_WITHIN)
    assert replacement.spec.node_name != node

    # The incident's recovery, measured by nodefence's reconcile pass once every pod the node
    # held runs elsewhere and has held still for the steady time on the API server's clock.
    held = fence_entry(core, node)
    assert held.silent_since == silent, "the Lease's last renewal as the API server stamped it"
    assert held.fenced_at is not None
    # At least the stuck StatefulSet pod, by its StatefulSet and ordinal.
    assert pod_name in {f"{p.owner}-{p.ordinal}" for p in held.held.statefulset_pods()}
    last, count = timed(
        steps,
        "every held pod steady elsewhere",
        lambda: steady_elsewhere(real_backend, held),
        STEP_WITHIN,
    )
    code, raw = http(
        "POST",
        f"{nodefence.url}/reconcile",
        {},
        headers={"Authorization": f"Bearer {nodefence.token}"},
        timeout=60,
    )
    assert code == 200, raw
    # Earlier tests of the session may have left other nodes' recoveries to measure.
    [measured] = [
        a
        for d in yaml.safe_load(raw)["decisions"]
        if d["node"] == node
        for a in d["actions"]
        if a["type"] == "record-recovery"
    ]
    after = fence_entry(core, node)
    assert after.recovered_at == last
    seconds = (last - silent).total_seconds()
    fenced_after = (held.fenced_at - silent).total_seconds()
    assert measured["seconds"] == seconds
    # The replacements came after the fence (the taint evicted the pods they replace).
    assert seconds >= fenced_after
    assert recovery_metric(nodefence, "nodefence_recovery_seconds_count") == 1
    assert recovery_metric(nodefence, "nodefence_recovery_seconds_sum") == seconds
    # This incident's Event: earlier tests of the session may have fenced this node and
    # measured its recovery too.
    [event] = [
        e
        for e in core.list_namespaced_event(
            "default", field_selector=f"involvedObject.name={node}"
        ).items
        if e.reason == "NodeRecovered" and e.metadata.creation_timestamp >= held.fenced_at
    ]
    assert event.type == "Normal"
    kinds = " and ".join(held.held.kinds())
    assert event.message.startswith(
        f"{kinds} pods running elsewhere {seconds:.0f} s after the node went silent; fenced at "
        f"{fenced_after:.0f} s on BMC proof ({count} pod(s);"
    ), event.message
    print(f"recovery: {event.message}")

    def rebooted() -> bool:
        current = core.read_node(node)
        conditions = current.status.conditions or []
        is_ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
        return is_ready and current.status.node_info.boot_id != boot_before

    timed(steps, "powered on, Ready with a new bootID", rebooted, STEP_WITHIN)
    assert power_state(real_backend, node) == "On"

    def unfenced() -> bool:
        post_alert(nodefence, node, "resolved")
        return not oos_taints(core.read_node(node))

    timed(steps, "verified untaint on resolve", unfenced, STEP_WITHIN)
    print("\n".join(f"{what}: {seconds:.1f}s" for what, seconds in steps))


@pytest.mark.invariant("S1")
def test_s1_live_node_refused_with_nothing_written(
    procs: Processes, real_backend: RealBackend
) -> None:
    core = real_backend.core
    node = "compute01"
    eventually(lambda: real_backend.ready(node) == "True", within=STEP_WITHIN, what=f"{node} Ready")
    before = core.read_node(node)
    pods_before = {
        p.metadata.uid: p.metadata.deletion_timestamp
        for p in core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
    }
    nodefence = serve(procs, real_backend, POLICY)

    decision = post_alert(nodefence, node, "firing")

    assert decision["verdict"] in ("skip", "noop"), decision
    after = core.read_node(node)
    assert after.metadata.uid == before.metadata.uid
    assert not oos_taints(after)
    assert (after.spec.taints or []) == (before.spec.taints or [])
    assert not [k for k in after.metadata.annotations or {} if k.startswith("nodefence.io/")]
    # The API server records every writer of the Node: nodefence is not among them.
    managers = {m.manager for m in after.metadata.managed_fields or []}
    assert "nodefence" not in managers, managers
    pods_after = {
        p.metadata.uid: p.metadata.deletion_timestamp
        for p in core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
    }
    assert pods_after == pods_before
    assert power_state(real_backend, node) == "On"
    code, raw = http("GET", f"{real_backend.url}/sim/v1/nodes/{node}")
    assert code == 200
    assert yaml.safe_load(raw)["kubelet"] == "up"
