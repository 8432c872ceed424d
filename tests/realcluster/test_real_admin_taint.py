"""S4 with an administrator's real ``kubectl taint``: authorship is what the real API server
recorded (``metadata.managedFields``, the taint's ``timeAdded``), not what the taint looks like,
because an admin running the runbook writes exactly the taint nodefence writes.

One outage of one node, two claims on it:
- before a claim: the admin has tainted the silent node by hand; the firing alert must not adopt
  the taint and nothing nodefence writes may own ``spec.taints``;
- after nodefence's fence: the admin takes the taint over (removes and re-applies it, as the
  runbook does); once the node is back, the resolved alert must let go of the fence and leave
  the admin's taint on.

The taint's effect is ``NoSchedule`` here so that the real taint-eviction controller does not
move the shared cluster's pods off the node; authorship does not depend on the effect.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from bench.processes import Processes, eventually
from kubernetes import client
from tests.e2e.harness import OOS

from .conftest import RealBackend
from .test_seed_story import NOT_READY_WITHIN, STEP_WITHIN, oos_taints, post_alert, serve

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(300)]

NODE = "compute01"
MIRROR = "nodefence.io/"
EFFECT = "NoSchedule"
KUBECTL = Path(sys.executable).parent / "kubectl"
POLICY: dict[str, Any] = {
    "cluster": {"storm_cooldown_seconds": 0},
    "rules": [
        {
            "name": "real",
            "min_not_ready_seconds": 0,
            # Tests of one session fence the same nodes minutes apart: no flap hold.
            "flap_window_seconds": 0,
            "lease_staleness_seconds": 15,
            "healthy_delay_seconds": 5,
            "taint_effect": EFFECT,
            "fencing": {"driver": "none"},
        }
    ],
}


UNREACHABLE = "node.kubernetes.io/unreachable"


def kubectl(backend: RealBackend, *args: str) -> str:
    done = subprocess.run(
        [str(KUBECTL), f"--kubeconfig={backend.kubeconfig}", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
    return done.stdout


def admin_taints(backend: RealBackend) -> None:
    kubectl(backend, "taint", "nodes", NODE, f"{OOS}=nodeshutdown:{EFFECT}")


def admin_untaints(backend: RealBackend) -> None:
    kubectl(backend, "taint", "nodes", NODE, f"{OOS}:{EFFECT}-")


def taints_written_by(node: client.V1Node) -> set[str]:
    """The field managers that own any of ``spec.taints``, as the API server recorded them."""
    return {
        m.manager
        for m in node.metadata.managed_fields or []
        if "f:taints" in ((m.fields_v1 or {}).get("f:spec") or {})
    }


def actions(decision: dict[str, Any]) -> list[str]:
    """What the decision planned and what was carried out (a release found on the way is
    reported among the results of a decision that, re-evaluated, plans nothing)."""
    planned = [str(a["type"]) for a in decision.get("actions") or []]
    return planned + [str(r["action"]) for r in decision.get("results") or []]


@pytest.mark.invariant("S4")
def test_s4_an_admins_kubectl_taint_is_never_adopted_or_removed(
    procs: Processes, real_backend: RealBackend
) -> None:
    core = real_backend.core
    nodefence = serve(procs, real_backend, POLICY)
    real_backend.control(NODE, "down")
    try:
        eventually(
            lambda: real_backend.ready(NODE) == "Unknown",
            within=NOT_READY_WITHIN,
            what=f"{NODE} NotReady",
        )
        # spec.taints is an atomic list: its manager is whoever wrote it last. The node-lifecycle
        # controller adds its unreachable taints (NoSchedule, then NoExecute) to a node it finds
        # silent; the admin's taint comes after them, as it would at 3 a.m.
        eventually(
            lambda: (
                {t.effect for t in core.read_node(NODE).spec.taints or [] if t.key == UNREACHABLE}
                == {"NoSchedule", "NoExecute"}
            ),
            within=STEP_WITHIN,
            what="the node-lifecycle controller's unreachable taints",
        )
        # Before a claim: the admin's taint is on; the firing alert leaves it alone.
        admin_taints(real_backend)
        assert taints_written_by(core.read_node(NODE)) == {"kubectl-taint"}
        before = post_alert(nodefence, NODE, "firing")
        assert before["verdict"] == "noop", before
        assert not {"fence", "claim", "confirm"} & set(actions(before)), before
        node = core.read_node(NODE)
        assert taints_written_by(node) == {"kubectl-taint"}
        assert len(oos_taints(node)) == 1
        assert not [k for k in node.metadata.annotations or {} if k.startswith(MIRROR)]

        # The admin lifts it; nodefence fences on its own evidence.
        admin_untaints(real_backend)

        def fenced() -> dict[str, Any] | None:
            decision = post_alert(nodefence, NODE, "firing")
            return decision if decision["verdict"] == "fence" else None

        eventually(fenced, within=STEP_WITHIN, interval=1.0, what="nodefence's fence")

        def tainted() -> client.V1Node | None:
            current = core.read_node(NODE)
            return current if oos_taints(current) else None

        node = eventually(tainted, within=STEP_WITHIN, what="nodefence's taint")
        assert "nodefence" in taints_written_by(node)
        ours = oos_taints(node)[0].time_added

        # After the fence: the admin takes the taint over, as the runbook writes it.
        admin_untaints(real_backend)
        admin_taints(real_backend)
        node = core.read_node(NODE)
        assert taints_written_by(node) == {"kubectl-taint"}
        [theirs] = oos_taints(node)
        assert theirs.time_added != ours

        real_backend.control(NODE, "up")
        eventually(
            lambda: real_backend.ready(NODE) == "True", within=STEP_WITHIN, what=f"{NODE} Ready"
        )

        def let_go() -> bool:
            decision = post_alert(nodefence, NODE, "resolved")
            assert "unfence" not in actions(decision), decision
            return "release" in actions(decision)

        eventually(let_go, within=STEP_WITHIN, interval=1.0, what="the fence let go")
        node = core.read_node(NODE)
        assert [(t.value, t.effect) for t in oos_taints(node)] == [("nodeshutdown", EFFECT)]
        assert oos_taints(node)[0].time_added == theirs.time_added
        # The node-lifecycle controller removed its unreachable taint when the node came back,
        # which makes it the last writer of the whole ``spec.taints`` list: managedFields name
        # the last writer of the list, not of each taint.
        assert "nodefence" not in taints_written_by(node)
        again = post_alert(nodefence, NODE, "resolved")
        assert "unfence" not in actions(again), again
        assert len(oos_taints(core.read_node(NODE))) == 1
    finally:
        if oos_taints(core.read_node(NODE)):
            admin_untaints(real_backend)
        # Letting go of a taken-over fence keeps its mirror annotations, the record of what
        # nodefence did for people; the next test expects a node nodefence never touched.
        mirror = [
            k for k in core.read_node(NODE).metadata.annotations or {} if k.startswith(MIRROR)
        ]
        if mirror:
            core.patch_node(NODE, {"metadata": {"annotations": dict.fromkeys(mirror)}})
        real_backend.control(NODE, "up")
        eventually(
            lambda: real_backend.ready(NODE) == "True", within=STEP_WITHIN, what=f"{NODE} Ready"
        )
