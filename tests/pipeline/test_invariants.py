"""The safety invariants end to end: real receivers over HTTP against the simulated cluster.

Property tests of the pure engine (tests/engine) prove the decisions; these prove that the
writes that reach the cluster keep the invariants too, across replicas and deliveries.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.seeded_cluster import (
    NO_HEALTHY_DELAY,
    NODE,
    OOS,
    eventually,
    firing,
    inference,
    node,
    node_events,
    oos_taints,
    resolved,
    start_receiver,
    terminating_on,
    writes_since,
)

from nodefence.actions.executor import Executor, Outcome
from nodefence.engine import mirror
from nodefence.engine.model import PurgePodAction
from nodefence.kube.client import Deadline, KubeClient, load_api_client
from nodefence_sim.resources import NODES, PODS
from nodefence_sim.testing import SimulatorHandle

INFERENCE_POLICY = Path(__file__).parents[1] / "reliability" / "inference-policy.yaml"


def successful_node_patches(cluster: SimulatorHandle, cursor: int, name: str) -> int:
    return sum(
        1
        for r in cluster.faults.requests(cursor)
        if r.verb == "update" and r.path == f"/api/v1/nodes/{name}" and r.status == 200
    )


def admin_taint(cluster: SimulatorHandle, name: str) -> None:
    """What `kubectl taint node N node.kubernetes.io/out-of-service=nodeshutdown:NoExecute`
    leaves: the taint and no nodefence mirror annotations."""
    obj = copy.deepcopy(node(cluster, name))
    obj["spec"].setdefault("taints", []).append(
        {"key": OOS, "value": "nodeshutdown", "effect": "NoExecute"}
    )
    cluster.sim.store.update(NODES, None, name, obj, check_rv=False)


@pytest.mark.invariant("S7")
async def test_s7_concurrent_duplicate_deliveries_fence_once(cluster: SimulatorHandle) -> None:
    cluster.sim.node_down(NODE, since_seconds=1200)
    async with (
        start_receiver(cluster, identity="replica-a") as a,
        start_receiver(cluster, identity="replica-b") as b,
    ):
        cursor = cluster.faults.cursor
        payload = firing()
        results = await asyncio.gather(
            a.alert(payload), b.alert(payload), a.alert(payload), b.alert(payload)
        )
        verdicts = sorted(d["verdict"] for [d] in results)
        assert verdicts.count("fence") >= 1, verdicts
        assert len(oos_taints(cluster, NODE)) == 1
        assert successful_node_patches(cluster, cursor, NODE) == 1
        fenced_events = [e for e in node_events(cluster, NODE) if e["reason"] == "NodeFenced"]
        assert len(fenced_events) == 1
        await eventually(lambda: not terminating_on(cluster, NODE))


@pytest.mark.invariant("S7")
async def test_s7_reordered_resolved_before_firing_does_not_unfence_a_dead_node(
    cluster: SimulatorHandle,
) -> None:
    cluster.sim.node_down(NODE, since_seconds=1200)
    async with start_receiver(cluster) as receiver:
        [early] = await receiver.alert(resolved())
        assert early["verdict"] == "noop"
        [fence] = await receiver.alert(firing())
        assert fence["verdict"] == "fence"
        [late] = await receiver.alert(resolved())
        assert late["verdict"] == "deferred"
        assert oos_taints(cluster, NODE)


@pytest.mark.invariant("S3")
async def test_s3_budget_holds_across_three_replicas(cluster: SimulatorHandle) -> None:
    for name in ("compute01", "compute02"):
        cluster.sim.node_down(name, since_seconds=1200)
    async with (
        start_receiver(cluster, identity="r1") as r1,
        start_receiver(cluster, identity="r2") as r2,
        start_receiver(cluster, identity="r3") as r3,
    ):
        results = await asyncio.gather(
            r1.alert(firing("compute01")),
            r2.alert(firing("compute02")),
            r3.alert(firing("compute01")),
            r3.alert(firing("compute02")),
        )
        fenced = [n for n in ("compute01", "compute02") if oos_taints(cluster, n)]
        assert len(fenced) == 1, results
        refused = [d for [d] in results if d["verdict"] == "noop"]
        assert any(
            not r["passed"] and r["guard"] == "fence-budget" for d in refused for r in d["reasons"]
        )


@pytest.mark.invariant("S4")
async def test_s4_admin_taint_is_never_taken_over_or_removed(cluster: SimulatorHandle) -> None:
    cluster.sim.node_down(NODE, since_seconds=1200)
    admin_taint(cluster, NODE)
    async with start_receiver(cluster) as receiver:
        [fire] = await receiver.alert(firing())
        assert fire["verdict"] == "noop"
        assert mirror.FENCED_BY not in (node(cluster, NODE)["metadata"].get("annotations") or {})
        cluster.sim.node_up(NODE, since_seconds=3600, reboot=True)
        [res] = await receiver.alert(resolved())
        assert res["verdict"] == "noop"
        status, body = await receiver.post("/reconcile", {})
        assert status == 200, body
        assert len(oos_taints(cluster, NODE)) == 1


@pytest.mark.invariant("S8")
async def test_s8_dry_run_makes_zero_writes(cluster: SimulatorHandle) -> None:
    cluster.sim.node_down(NODE, since_seconds=1200)
    async with start_receiver(cluster, policy=inference({"dry_run": True})) as receiver:
        cursor = cluster.faults.cursor
        [decision] = await receiver.alert(firing())
        assert decision["verdict"] == "fence"
        assert decision["dry_run"] is True
        assert decision["actions"], "a dry run still says what it would do"
        cluster.sim.node_up(NODE, since_seconds=3600)
        await receiver.alert(resolved())
        await receiver.post("/reconcile", {})
        assert writes_since(cluster, cursor) == []
        assert not oos_taints(cluster, NODE)


@pytest.mark.invariant("S8")
async def test_s8_plan_command_makes_zero_writes(cluster: SimulatorHandle, tmp_path: Path) -> None:
    cluster.sim.node_down(NODE, since_seconds=1200)
    payload = tmp_path / "alert.json"
    payload.write_text(json.dumps(firing()))
    env = {
        **os.environ,
        "KUBECONFIG": str(cluster.kubeconfig),
        "NODEFENCE_NAMESPACE": "nodefence",
        "NODEFENCE_POLICY_FILE": str(INFERENCE_POLICY),
    }
    env.pop("NODEFENCE_ALERT_TOKEN", None)
    cursor = cluster.faults.cursor
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "nodefence",
        "plan",
        "--payload",
        str(payload),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    [decision] = json.loads(out)["decisions"]
    assert decision["verdict"] == "fence"
    assert decision["dry_run"] is True
    assert cluster.faults.count(since=cursor) > 0, "plan must read the live cluster"
    assert writes_since(cluster, cursor) == []
    assert not oos_taints(cluster, NODE)


@pytest.mark.invariant("S9")
async def test_s9_recreated_node_inherits_no_decision(cluster: SimulatorHandle) -> None:
    cluster.sim.node_down(NODE, since_seconds=1200)
    async with start_receiver(cluster, follow=True) as receiver:
        [fence] = await receiver.alert(firing())
        assert fence["verdict"] == "fence"
        old = node(cluster, NODE)
        cluster.sim.recreate_node(NODE)
        # Restored from a backup manifest: the old mirror annotations and taint come back on a
        # new object.
        restored = copy.deepcopy(node(cluster, NODE))
        assert restored["metadata"]["uid"] != old["metadata"]["uid"]
        restored["metadata"]["annotations"] = old["metadata"]["annotations"]
        restored["spec"]["taints"] = old["spec"]["taints"]
        cluster.sim.store.update(NODES, None, NODE, restored, check_rv=False)

        [res] = await receiver.alert(resolved())
        assert res["verdict"] == "noop", res
        assert oos_taints(cluster, NODE), "a taint nodefence did not apply to this node stays"
        # The stale mirror gives nodefence no hold on the new node object, but the taint on it
        # is an out-of-service taint on the cluster like any other and spends the budget (S3),
        # as the watch-fed node index of a serving receiver counts it.
        async with receiver.session.get(receiver.url + "/readyz") as ready:
            assert ready.status == 200
        index = receiver.pipeline.reader.nodes
        assert index is not None

        def counted() -> bool:
            fresh = index.fresh()
            return fresh is not None and NODE in fresh.facts.out_of_service

        await eventually(counted)
        cluster.sim.node_down("compute01", since_seconds=1200)
        [other] = await receiver.alert(firing("compute01"))
        assert other["verdict"] == "noop", other
        [budget] = [r for r in other["reasons"] if r["guard"] == "fence-budget"]
        assert not budget["passed"]
        assert NODE in budget["message"]
        assert not oos_taints(cluster, "compute01")


@pytest.mark.invariant("S6")
async def test_s6_pod_replaced_under_the_same_name_is_not_deleted(
    cluster: SimulatorHandle,
) -> None:
    cluster.sim.node_down(NODE, since_seconds=1200)
    [stuck, *_] = terminating_on(cluster, NODE)
    namespace, name = stuck["metadata"]["namespace"], stuck["metadata"]["name"]
    stale_uid = "00000000-0000-0000-0000-000000000000"
    kube = KubeClient(await load_api_client(str(cluster.kubeconfig)))
    try:
        result = await Executor(kube).purge_pod(
            PurgePodAction(namespace, name, stale_uid, NODE), Deadline(5)
        )
    finally:
        await kube.close()
    assert result.outcome is Outcome.SKIPPED
    assert cluster.sim.store.peek(PODS, namespace, name) is not None


@pytest.mark.invariant("S7")
async def test_s7_duplicate_resolve_after_unfence_is_a_quiet_noop(
    cluster: SimulatorHandle,
) -> None:
    cluster.sim.node_down(NODE, since_seconds=1200)
    async with start_receiver(cluster, policy=inference(NO_HEALTHY_DELAY)) as receiver:
        await receiver.alert(firing())
        await eventually(lambda: not terminating_on(cluster, NODE))
        cluster.sim.node_up(NODE, since_seconds=600, reboot=True)
        [unfence] = await receiver.alert(resolved())
        assert unfence["verdict"] == "unfence"
        cursor = cluster.faults.cursor
        [again] = await receiver.alert(resolved())
        assert again["verdict"] == "noop"
        assert writes_since(cluster, cursor) == []


async def test_repeated_refusal_is_recorded_once(cluster: SimulatorHandle) -> None:
    async with start_receiver(cluster) as receiver:
        [first] = await receiver.alert(firing())
        assert first["verdict"] == "noop"
        cursor = cluster.faults.cursor
        [second] = await receiver.alert(firing())
        assert second["verdict"] == "noop"
        assert writes_since(cluster, cursor) == []
        refusals = [e for e in node_events(cluster, NODE) if e["reason"] == "FenceRefused"]
        assert len(refusals) == 1


async def _nodefence(cluster: SimulatorHandle, *args: str) -> str:
    env = {
        **os.environ,
        "KUBECONFIG": str(cluster.kubeconfig),
        "NODEFENCE_NAMESPACE": "nodefence",
        "NODEFENCE_POLICY_FILE": str(INFERENCE_POLICY),
    }
    env.pop("NODEFENCE_ALERT_TOKEN", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "nodefence",
        *args,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def test_status_reads_what_nodefence_holds_from_the_fence_record(
    cluster: SimulatorHandle,
) -> None:
    """``nodefence status`` answers from the record, not from the node: forged mirror
    annotations on another node do not make it a fenced one."""
    cluster.sim.node_down(NODE, since_seconds=1200)
    async with start_receiver(cluster) as receiver:
        [fence] = await receiver.alert(firing())
    assert fence["verdict"] == "fence"
    forged = node(cluster, "compute02")
    forged["metadata"].setdefault("annotations", {})[mirror.FENCED_BY] = mirror.FENCED_BY_VALUE
    cluster.sim.store.update(NODES, None, "compute02", forged)
    status = json.loads(await _nodefence(cluster, "status", "-o", "json"))
    [held] = status["fenced"]
    assert held["node"] == NODE
    assert held["nodeUID"] == node(cluster, NODE)["metadata"]["uid"]
    assert held["rule"] == "default"
    assert held["proof"].startswith("no proof")
    assert held["taintEffect"] == "NoExecute"
    assert status["halfWritten"] == []
    text = await _nodefence(cluster, "status")
    assert f"{NODE}  since {held['since']}" in text
    assert "compute02" not in text
