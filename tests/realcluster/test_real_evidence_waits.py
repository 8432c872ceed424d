"""Waits that know the evidence, on real controllers, with no alert at all (Alertmanager
unreachable) and the receiver's reconcile pass an hour away: only its Node watch and wake-ups
can act. A machine that loses power (its BMC reads Off, its kwok gone) is fenced as soon as the
real node-lifecycle controller marks it NotReady, not after the rule's 5-minute NotReady minimum
and the fallback's 5-minute wait for an alert; a machine that hangs (its BMC reads On) is held
by both, the refusal saying which evidence kept the wait.

Both windows are judged on the API server's clock, so what is asserted is the rule: a fence
before the minimum stands on a reading of Off; nothing about how fast the machine ran.
"""

from __future__ import annotations

import copy
import json
from datetime import datetime
from typing import Any

import pytest
from bench.processes import Processes, eventually, free_port, http

from .conftest import RealBackend
from .safety_support import bmc, nodefence_events, restore, wait_not_ready
from .test_real_fallback import entry_of, not_ready_since
from .test_seed_story import POLICY, STEP_WITHIN, oos_taints, power_state, serve

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(900)]

NODE = "compute02"
MINIMUM = 300


def shipped_waits() -> dict[str, Any]:
    """The test cluster's windows with the shipped waits: 5 minutes NotReady, 5 for an alert."""
    policy = copy.deepcopy(POLICY)
    policy["cluster"]["fallback_after_seconds"] = MINIMUM
    policy["rules"][0]["min_not_ready_seconds"] = MINIMUM
    return policy


def power_off(backend: RealBackend, node: str) -> None:
    """The machine loses power, nodefence aside: a ForceOff at its BMC (which stops its kwok)."""
    system, headers = bmc(backend, node)
    code, raw = http(
        "POST", f"{system}/Actions/ComputerSystem.Reset", {"ResetType": "ForceOff"}, headers=headers
    )
    assert code in (200, 202, 204), f"Redfish ForceOff {node} -> {code}: {raw!r}"


def watching(procs: Processes, backend: RealBackend) -> Any:
    return serve(
        procs,
        backend,
        shipped_waits(),
        extra_env={
            "NODEFENCE_RECONCILE_INTERVAL": "3600",
            "NODEFENCE_ALERTMANAGER_URL": f"http://127.0.0.1:{free_port()}",
        },
    )


def logged(nodefence: Any) -> list[dict[str, Any]]:
    code, raw = http(
        "GET",
        f"{nodefence.url}/decisions?node={NODE}",
        headers={"Authorization": f"Bearer {nodefence.token}"},
    )
    assert code == 200, raw
    decisions: list[dict[str, Any]] = json.loads(raw)["decisions"]
    return decisions


def moment(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.mark.invariant("S10")
def test_a_machine_that_loses_power_is_fenced_without_the_waits(
    procs: Processes, real_backend: RealBackend
) -> None:
    nodefence = watching(procs, real_backend)
    try:
        eventually(lambda: real_backend.ready(NODE) == "True", within=STEP_WITHIN, what="Ready")
        power_off(real_backend, NODE)
        assert power_state(real_backend, NODE) == "Off"
        wait_not_ready(real_backend, NODE)
        since = not_ready_since(real_backend, NODE)
        held = eventually(
            lambda: (
                (e := entry_of(real_backend, NODE)) is not None and e.get("phase") == "fenced" and e
            ),
            within=STEP_WITHIN,
            interval=1.0,
            what="the watch's fence",
        )
        assert held["alertname"] == "no alert (fallback)", held
        assert "reported Off" in held["proof"], held
        assert oos_taints(real_backend.core.read_node(NODE))
        # Before the 5-minute minimum on the API server's clock: only the reading allows that.
        early = (moment(held["claimedAt"]) - since).total_seconds()
        print(f"fenced {early:.1f}s after NotReady (waits of {MINIMUM}s waived)")
        assert early < MINIMUM, (since, held["claimedAt"])
        fence = eventually(
            lambda: [d for d in logged(nodefence) if d["verdict"] == "fence"],
            within=STEP_WITHIN,
            what="the fence decision",
        )[0]
        said = {r["guard"]: r["message"] for r in fence["reasons"]}
        assert "minimum is waived" in said["not-ready-duration"], said
        assert "machine Off (read-only" in said["not-ready-duration"], said
        assert "no longer" in said["alert-wait"], said
    finally:
        restore(real_backend, NODE, nodefence)


@pytest.mark.invariant("S1")
def test_a_hung_machine_keeps_the_waits_and_is_never_powered_off_early(
    procs: Processes, real_backend: RealBackend
) -> None:
    refused_before = nodefence_events(real_backend, NODE, "FenceRefused")
    nodefence = watching(procs, real_backend)
    try:
        eventually(lambda: real_backend.ready(NODE) == "True", within=STEP_WITHIN, what="Ready")
        assert real_backend.control(NODE, "down")["kubelet"] == "down"
        wait_not_ready(real_backend, NODE)

        def kept() -> list[str]:
            return [
                r["message"]
                for d in logged(nodefence)
                for r in d["reasons"]
                if r["guard"] == "not-ready-duration" and not r["passed"]
            ]

        [message, *_] = eventually(kept, within=STEP_WITHIN, what="the watch's refusal")
        assert "machine On: a hang, a partition or a kubelet that stopped" in message
        assert entry_of(real_backend, NODE) is None
        assert not oos_taints(real_backend.core.read_node(NODE))
        assert power_state(real_backend, NODE) == "On"
        eventually(
            lambda: nodefence_events(real_backend, NODE, "FenceRefused") > refused_before,
            within=STEP_WITHIN,
            what="the refusal's Event on the Node",
        )
    finally:
        restore(real_backend, NODE, nodefence)
