"""S9 on a real API server: a Node deleted and registered again under the same name is a new
object (a new UID, stamped by the API server), and it inherits no decision nodefence made on
the old one.

The hardest form of it: nodefence has fenced the old object, the node is re-created during the
fence, and the old object's out-of-service taint (with its ``timeAdded``, the stamp nodefence
recorded) and mirror annotations are restored onto the new one, as a restore from a backup
manifest would. Everything but the UID then matches nodefence's record; the resolved alert must
still not remove the taint, and nodefence lets go of the old object's entry instead.
"""

from __future__ import annotations

from typing import Any

import pytest
from bench.processes import Processes, eventually
from kubernetes import client
from tests.e2e.harness import OOS

from .conftest import RealBackend
from .test_real_admin_taint import POLICY, actions
from .test_seed_story import NOT_READY_WITHIN, STEP_WITHIN, oos_taints, post_alert, serve

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(300)]

NODE = "compute02"
MIRROR = "nodefence.io/"


def mirror_annotations(node: client.V1Node) -> dict[str, str]:
    return {k: v for k, v in (node.metadata.annotations or {}).items() if k.startswith(MIRROR)}


@pytest.mark.invariant("S9", "S12")
def test_s9_a_node_recreated_during_a_fence_inherits_nothing(
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

        def fenced() -> dict[str, Any] | None:
            decision = post_alert(nodefence, NODE, "firing")
            return decision if decision["verdict"] == "fence" else None

        eventually(fenced, within=STEP_WITHIN, interval=1.0, what="nodefence's fence")
        old = core.read_node(NODE)
        [taint] = oos_taints(old)
        annotations = mirror_annotations(old)
        assert annotations, "the fence mirrors itself on the node"

        state = real_backend.control(NODE, "recreate")
        assert state["uid"] != old.metadata.uid
        eventually(
            lambda: real_backend.ready(NODE) == "True", within=STEP_WITHIN, what="new node Ready"
        )
        restored = real_backend.api.sanitize_for_serialization(taint)
        core.patch_node(
            NODE, {"metadata": {"annotations": annotations}, "spec": {"taints": [restored]}}
        )
        new = core.read_node(NODE)
        assert new.metadata.uid == state["uid"]
        assert [(t.key, t.time_added) for t in oos_taints(new)] == [(OOS, taint.time_added)]

        def let_go() -> bool:
            decision = post_alert(nodefence, NODE, "resolved")
            assert "unfence" not in actions(decision), decision
            assert decision["verdict"] != "unfence", decision
            released = [r for r in decision.get("results") or [] if r["action"] == "release"]
            assert all("re-created" in r["detail"] for r in released), released
            return bool(released)

        eventually(let_go, within=STEP_WITHIN, interval=1.0, what="the old entry let go")
        assert len(oos_taints(core.read_node(NODE))) == 1, "a taint nodefence did not apply stays"
        again = post_alert(nodefence, NODE, "resolved")
        assert "unfence" not in actions(again), again
        firing = post_alert(nodefence, NODE, "firing")
        assert firing["verdict"] != "fence", firing
        assert len(oos_taints(core.read_node(NODE))) == 1
    finally:
        current = core.read_node(NODE)
        others = [
            real_backend.api.sanitize_for_serialization(t)
            for t in current.spec.taints or []
            if t.key != OOS
        ]
        unmirrored = dict.fromkeys(mirror_annotations(current))
        core.patch_node(NODE, {"metadata": {"annotations": unmirrored}, "spec": {"taints": others}})
        real_backend.control(NODE, "up")
        eventually(
            lambda: real_backend.ready(NODE) == "True", within=STEP_WITHIN, what=f"{NODE} Ready"
        )
