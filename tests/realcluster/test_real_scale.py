"""A large cluster on the real control plane (``python -m nodefence_sim.scale --backend real``,
what the storm and scale benchmarks measure against): every node held by one kwok
(``loader.load_shared``), the last ones' kubelets dead together once the cluster is up and
NotReady before it serves, and a node brought back through the control surface Ready again.

It starts a control plane of its own (40 nodes, not the session's seed cluster), so it proves
what a benchmark relies on: that one kwok process carries every node's Lease, and that taking
its label away is a kubelet that dies (its Lease stops, the node-lifecycle controller marks the
node, nothing else is written).
"""

from __future__ import annotations

import json
import re
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from bench.processes import Processes, eventually, http, tail
from kubernetes import client, config

from nodefence_sim.real.components import KUBELET_LABEL
from nodefence_sim.scale import node_name

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(900)]

NODES, PODS, DOWN = 40, 37, 4
GRACE_SECONDS = 20
LISTENING = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")
START_WITHIN = 600.0


def _kwoks_of(parent: int) -> list[str]:
    """The command lines of the kwok processes ``parent`` started."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            argv = (stat.parent / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if int(fields[1]) == parent and b"kwok" in argv[1:2]:
            found.append(" ".join(a.decode() for a in argv if a))
    return found


def _ready(node: Any) -> str | None:
    return next((c.status for c in node.status.conditions or [] if c.type == "Ready"), None)


def test_one_kwok_holds_every_node_and_the_last_ones_die_together(
    procs: Processes, tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    process = procs.start(
        "scale-real",
        [
            sys.executable,
            "-m",
            "nodefence_sim.scale",
            "--backend",
            "real",
            "--nodes",
            str(NODES),
            "--pods",
            str(PODS),
            "--down",
            str(DOWN),
            "--node-monitor-grace-period",
            f"{GRACE_SECONDS}s",
            "--kubeconfig-out",
            str(kubeconfig),
        ],
    )

    def listening() -> str:
        if not process.alive():
            raise AssertionError(f"scale --backend real exited:\n{tail(process.output())}")
        found = LISTENING.search(process.output())
        return found.group(1) if found and kubeconfig.exists() else ""

    url = eventually(listening, within=START_WITHIN, interval=1.0, what="real scale cluster up")
    assert f"loaded {NODES} nodes and {PODS} pods" in process.output()
    kwoks = _kwoks_of(process.popen.pid)
    assert len(kwoks) == 1, kwoks
    assert f"--manage-nodes-with-label-selector={KUBELET_LABEL}=up" in kwoks[0]

    api = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        core = client.CoreV1Api(api)
        nodes = {n.metadata.name: n for n in core.list_node().items}
        dead = {node_name(i) for i in range(NODES - DOWN, NODES)}
        assert len(nodes) == NODES
        assert {name for name, n in nodes.items() if _ready(n) != "True"} == dead
        # Pods on different nodes got addresses of their own nodes' CIDRs.
        pods = core.list_namespaced_pod("workload").items
        assert len(pods) == PODS
        live = [p for p in pods if p.spec.node_name not in dead]
        assert all(p.status.phase == "Running" for p in live)
        assert len({p.status.pod_ip for p in live}) == len(live)

        leases = client.CoordinationV1Api(api)

        def renewed(name: str) -> datetime:
            lease = leases.read_namespaced_lease(name, "kube-node-lease")
            return lease.spec.renew_time  # type: ignore[no-any-return]

        victim = node_name(NODES - 1)
        stopped = renewed(victim)
        alive = node_name(NODES - DOWN - 1)
        first = renewed(alive)
        # The live node's Lease is renewed again; the dead one's stays where it stopped.
        eventually(lambda: renewed(alive) > first, within=60, interval=1.0, what="a renewal")
        assert renewed(victim) == stopped

        def control(action: str) -> dict[str, Any]:
            status, raw = http("POST", f"{url}/sim/v1/nodes/{victim}/{action}", {})
            assert status == 200, f"{action} -> {status}: {raw!r}"
            state: dict[str, Any] = json.loads(raw)
            return state

        assert json.loads(http("GET", f"{url}/sim/v1/nodes/{victim}")[1])["kubelet"] == "down"
        assert control("up")["kubelet"] == "up"
        eventually(
            lambda: _ready(core.read_node(victim)) == "True",
            within=120,
            interval=1.0,
            what=f"{victim} Ready again",
        )
        assert renewed(victim) > stopped
    finally:
        api.close()
