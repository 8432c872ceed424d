"""The fallback on real controllers: Alertmanager is stopped, or unreachable by address, so no
alert ever reaches nodefence; a kwok node goes silent, the real node-lifecycle controller marks
it NotReady, and ``nodefence serve``'s own reconcile pass fences it once it has been NotReady for
``cluster.fallback_after_seconds``, through its Redfish BMC (ForceOff, Off read back), saying in
its decision and Event that no alert arrived and why.

How long after the window the fence came depends on the reconcile period and on a busy
machine's scheduling, so it is printed, never asserted; what is asserted is the safety side:
never before the window, on the API server's clock.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml
from bench.processes import Process, Processes, eventually, free_port
from kubernetes import client

from .conftest import RealBackend
from .safety_support import http, nodefence_events, restore, wait_not_ready
from .test_seed_story import POLICY, STEP_WITHIN, oos_taints, power_state, serve

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(900)]

NODE = "compute01"
FALLBACK_SECONDS = 20
RECONCILE_SECONDS = 3


def fallback_policy() -> dict[str, Any]:
    policy = copy.deepcopy(POLICY)
    policy["cluster"]["fallback_after_seconds"] = FALLBACK_SECONDS
    return policy


def entry_of(backend: RealBackend, node: str) -> dict[str, Any] | None:
    try:
        held = backend.core.read_namespaced_config_map("nodefence-fences", "nodefence")
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise
    text = (held.data or {}).get(f"fence.{node}")
    return json.loads(text) if text else None


def not_ready_since(backend: RealBackend, name: str) -> datetime:
    node = backend.core.read_node(name)
    (ready,) = [c for c in node.status.conditions or [] if c.type == "Ready"]
    assert ready.status != "True"
    moment: datetime = ready.last_transition_time
    return moment


def fenced_without_alert(backend: RealBackend, alertmanager_url: str, procs: Processes) -> None:
    fenced_before = nodefence_events(backend, NODE, "NodeFenced")
    nodefence = serve(
        procs,
        backend,
        fallback_policy(),
        extra_env={
            "NODEFENCE_RECONCILE_INTERVAL": str(RECONCILE_SECONDS),
            "NODEFENCE_ALERTMANAGER_URL": alertmanager_url,
        },
    )
    try:
        eventually(lambda: backend.ready(NODE) == "True", within=STEP_WITHIN, what="Ready")
        assert backend.control(NODE, "down")["kubelet"] == "down"
        wait_not_ready(backend, NODE)
        since = not_ready_since(backend, NODE)
        held = eventually(
            lambda: (e := entry_of(backend, NODE)) is not None and e.get("phase") == "fenced" and e,
            within=STEP_WITHIN + FALLBACK_SECONDS,
            interval=1.0,
            what="the fallback's fence",
        )
        assert held["alertname"] == "no alert (fallback)", held
        assert "reported Off" in held["proof"], held
        assert oos_taints(backend.core.read_node(NODE))
        # Never before the window, both ends stamped on the API server's clock.
        claimed = datetime.fromisoformat(held["claimedAt"].replace("Z", "+00:00"))
        late = (claimed - since).total_seconds() - FALLBACK_SECONDS
        print(f"fallback fence {late:.1f}s after its window (reconcile every {RECONCILE_SECONDS}s)")
        assert late >= 0, (since, claimed)
        # The Event follows the record's confirmation: waited for, not assumed.
        eventually(
            lambda: nodefence_events(backend, NODE, "NodeFenced") == fenced_before + 1,
            within=STEP_WITHIN,
            what="the NodeFenced Event",
        )
        events = backend.core.list_event_for_all_namespaces(
            field_selector=f"involvedObject.name={NODE},reason=NodeFenced"
        )
        newest = max(events.items, key=lambda e: e.last_timestamp or e.event_time)
        assert newest.message.startswith("no alert arrived: Alertmanager is unreachable"), (
            newest.message
        )
    finally:
        restore(backend, NODE, nodefence)


def start_alertmanager(procs: Processes) -> tuple[str, Process]:
    """A real Alertmanager on loopback, answering; the caller may stop it."""
    workdir = procs.workdir / "alertmanager"
    workdir.mkdir()
    config = workdir / "alertmanager.yml"
    config.write_text(
        yaml.safe_dump({"route": {"receiver": "null"}, "receivers": [{"name": "null"}]})
    )
    url = f"http://127.0.0.1:{free_port()}"
    process = procs.start(
        "alertmanager",
        [
            "prometheus-alertmanager",
            f"--config.file={config}",
            f"--storage.path={workdir / 'data'}",
            f"--web.listen-address={url.removeprefix('http://')}",
            "--cluster.listen-address=",
        ],
        cwd=workdir,
    )
    procs.wait_ready(process, f"{url}/-/ready")
    return url, process


def test_fenced_by_the_fallback_with_alertmanager_stopped(
    procs: Processes, real_backend: RealBackend
) -> None:
    # A real Alertmanager, stopped before nodefence ever asks it (it died with its node).
    url, process = start_alertmanager(procs)
    process.stop()
    fenced_without_alert(real_backend, url, procs)


def test_fenced_by_the_fallback_with_alertmanager_unreachable_by_address(
    procs: Processes, real_backend: RealBackend
) -> None:
    fenced_without_alert(real_backend, f"http://127.0.0.1:{free_port()}", procs)


def _alertmanager_api(url: str, path: str, body: Any) -> Any:
    code, raw = http("POST", f"{url}{path}", body)
    assert code == 200, f"POST {path} -> {code}: {raw!r}"
    return json.loads(raw) if raw else None


def _refusals_naming(backend: RealBackend, text: str) -> list[str]:
    events = backend.core.list_event_for_all_namespaces(
        field_selector=f"involvedObject.kind=Node,involvedObject.name={NODE},reason=FenceRefused"
    )
    return [e.message for e in events.items if text in (e.message or "")]


def test_a_silence_holds_the_fallback_on_real_controllers_through_alertmanager_outage(
    procs: Processes, real_backend: RealBackend
) -> None:
    """A shared Alertmanager: this cluster is prod-a. Its on-call silenced compute01 for a
    repair; prod-b's compute01 alert fires. The real node-lifecycle controller marks compute01
    NotReady; nodefence's passes hold it by the silence, named in a Normal Event, and keep
    holding it once Alertmanager is stopped; the machine is never powered off."""
    url, process = start_alertmanager(procs)
    now = datetime.now(UTC)
    _alertmanager_api(
        url,
        "/api/v2/alerts",
        [
            {
                "labels": {"alertname": "KubeNodeNotReady", "node": NODE, "cluster": "prod-b"},
                "startsAt": (now - timedelta(minutes=10)).isoformat(),
                "endsAt": (now + timedelta(hours=1)).isoformat(),
            }
        ],
    )
    silence_id = _alertmanager_api(
        url,
        "/api/v2/silences",
        {
            "matchers": [
                {"name": "cluster", "value": "prod-a", "isRegex": False, "isEqual": True},
                {"name": "node", "value": NODE, "isRegex": False, "isEqual": True},
            ],
            "startsAt": now.isoformat(),
            "endsAt": (now + timedelta(hours=1)).isoformat(),
            "createdBy": "on-call",
            "comment": "hardware repair, leave it alone",
        },
    )["silenceID"]
    nodefence = serve(
        procs,
        real_backend,
        fallback_policy(),
        extra_env={
            "NODEFENCE_RECONCILE_INTERVAL": str(RECONCILE_SECONDS),
            "NODEFENCE_ALERTMANAGER_URL": url,
            "NODEFENCE_ALERTMANAGER_MATCHERS": 'cluster="prod-a"',
        },
    )
    try:
        eventually(lambda: real_backend.ready(NODE) == "True", within=STEP_WITHIN, what="Ready")
        assert real_backend.control(NODE, "down")["kubelet"] == "down"
        wait_not_ready(real_backend, NODE)
        [held] = eventually(
            lambda: _refusals_naming(real_backend, silence_id),
            within=STEP_WITHIN + FALLBACK_SECONDS,
            interval=1.0,
            what="the silence's refusal",
        )
        assert held.startswith("no alert arrived"), held
        assert "hardware repair, leave it alone" in held, held
        process.stop()
        eventually(
            lambda: _refusals_naming(real_backend, "cannot be asked now"),
            within=STEP_WITHIN,
            interval=1.0,
            what="the silence held while Alertmanager is down",
        )
        assert entry_of(real_backend, NODE) is None
        assert not oos_taints(real_backend.core.read_node(NODE))
        assert power_state(real_backend, NODE) == "On"
        eventually(
            lambda: _pods_ready(real_backend, NODE) is False,
            within=STEP_WITHIN,
            what="the node lifecycle controller marking the node's pods not ready",
        )
    finally:
        restore(real_backend, NODE, nodefence)
    # Its kubelet back, the node's pods (its DaemonSets') are reported Ready again, as a real
    # kubelet does: the simulator's kwok stage pod-ready-again.
    eventually(
        lambda: _pods_ready(real_backend, NODE), within=STEP_WITHIN, what="the pods Ready again"
    )


def _pods_ready(backend: RealBackend, node: str) -> bool | None:
    """Whether every live pod on ``node`` is Ready; None while one is still to be marked."""
    pods = backend.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
    live = [p for p in pods if p.metadata.deletion_timestamp is None]
    if not live:
        return None
    ready = [
        {c.type: c.status for c in p.status.conditions or []}.get("Ready") == "True" for p in live
    ]
    return all(ready) if all(ready) or not any(ready) else None
