"""The whole alert chain on real controllers: the real node-lifecycle controller marks a silent
kwok node Unknown; Prometheus scrapes the kube-state-metrics series the real backend renders
from the real API server's lists and fires the shipped ``NodefenceNodeNotReady`` rule;
Alertmanager, with the shipped route and receiver, delivers it to ``nodefence serve``, which
fences through the node's Redfish BMC; the machine comes back with a new bootID, the alert
resolves, and nodefence's own reconcile pass unfences the node. No alert is posted by the test.
"""

from __future__ import annotations

from typing import Any

import pytest
from bench.processes import Processes, eventually, get_json
from tests.e2e.harness import Simulator, start_alertmanager, start_prometheus, write_token_file

from .conftest import RealBackend
from .test_seed_story import NOT_READY_WITHIN, POLICY, STEP_WITHIN, oos_taints, serve

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(900)]

NODE = "compute02"
TRIGGER = "NodefenceNodeNotReady"


def test_the_alert_reaches_nodefence_through_prometheus_and_alertmanager(
    procs: Processes, real_backend: RealBackend
) -> None:
    core = real_backend.core
    eventually(lambda: real_backend.ready(NODE) == "True", within=STEP_WITHIN, what="Ready")
    boot_before = core.read_node(NODE).status.node_info.boot_id
    nodefence = serve(
        procs,
        real_backend,
        POLICY,
        # The unfence comes from nodefence's own pass, not from a posted resolved alert.
        extra_env={"NODEFENCE_RECONCILE_INTERVAL": "3"},
    )
    token_file = write_token_file(procs.workdir, nodefence.token)
    alertmanager = start_alertmanager(procs, "alertmanager", nodefence, token_file)
    scraped = Simulator(real_backend.url, real_backend.kubeconfig, real_backend.process)
    prometheus = start_prometheus(procs, scraped, nodefence, [alertmanager.url])

    def ready_series() -> bool:
        query = (
            f"{prometheus.url}/api/v1/query?query=kube_node_status_condition"
            f"%7Bnode%3D%22{NODE}%22%2Ccondition%3D%22Ready%22%2Cstatus%3D%22true%22%7D"
        )
        result: list[dict[str, Any]] = get_json(query)["data"]["result"]
        return bool(result) and result[0]["value"][1] == "1"

    eventually(ready_series, within=STEP_WITHIN, what="the node's Ready series scraped")

    assert real_backend.control(NODE, "down")["kubelet"] == "down"
    eventually(
        lambda: prometheus.firing(TRIGGER, NODE),
        within=NOT_READY_WITHIN,
        what=f"{TRIGGER} firing for {NODE}",
    )
    tainted = eventually(
        lambda: oos_taints(core.read_node(NODE)), within=STEP_WITHIN, what="the taint"
    )
    assert [(t.value, t.effect) for t in tainted] == [("nodeshutdown", "NoExecute")]
    sent, failed = alertmanager.webhook_counts()
    assert sent >= 1, "the fence came from Alertmanager's delivery"
    assert failed == 0

    def rebooted() -> bool:
        node = core.read_node(NODE)
        is_ready = any(
            c.type == "Ready" and c.status == "True" for c in node.status.conditions or []
        )
        return is_ready and node.status.node_info.boot_id != boot_before

    eventually(rebooted, within=STEP_WITHIN, what="powered on with a new bootID")
    eventually(
        lambda: not prometheus.firing(TRIGGER, NODE), within=STEP_WITHIN, what="alert resolved"
    )
    eventually(lambda: not oos_taints(core.read_node(NODE)), within=STEP_WITHIN, what="the untaint")
