"""The real kubectl 1.32 against the simulator: the commands of the runbook nodefence automates
and the ones an operator uses to watch it, without ``--validate=false`` or other workarounds."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path

import pytest

from nodefence_sim.resources import NODES, PODS
from nodefence_sim.testing import SimulatorHandle

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]

OUT_OF_SERVICE = "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"


async def kubectl(handle: SimulatorHandle, *args: str, stdin: str | None = None) -> tuple[int, str]:
    """Run kubectl without blocking the loop that serves it; returns (exit code, output)."""
    proc = await asyncio.create_subprocess_exec(
        "kubectl",
        "--kubeconfig",
        str(handle.kubeconfig),
        *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "HOME": str(handle.kubeconfig.parent)},
    )
    out, _ = await asyncio.wait_for(proc.communicate(stdin.encode() if stdin else None), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


def _pod(name: str, node: str | None = None, **meta: object) -> dict[str, object]:
    spec: dict[str, object] = {"containers": [{"name": "app", "image": "busybox"}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, **meta}, "spec": spec}


async def test_get_wide_json_and_selectors(sim_api: SimulatorHandle) -> None:
    store = sim_api.sim.store
    store.create(PODS, "default", _pod("web-0", "worker1", labels={"app": "web"}))
    store.create(PODS, "default", _pod("db-0", "control02", labels={"app": "db"}))
    rc, out = await kubectl(sim_api, "get", "nodes", "-o", "wide")
    assert rc == 0, out
    header, *rows = out.splitlines()
    assert header.split()[:5] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert "INTERNAL-IP" in header
    assert "CONTAINER-RUNTIME" in header
    by_name = {r.split()[0]: r.split() for r in rows}
    assert by_name["control02"][1:3] == ["NotReady", "control-plane"]
    assert by_name["worker1"][1:3] == ["Ready", "worker"]

    rc, out = await kubectl(sim_api, "get", "pods", "-o", "wide")
    assert rc == 0, out
    assert out.splitlines()[0].split() == [
        "NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED", "NODE",
        "READINESS", "GATES",
    ]  # fmt: skip
    rc, out = await kubectl(sim_api, "get", "pods", "-l", "app in (web,cache)", "-o", "name")
    assert (rc, out.split()) == (0, ["pod/web-0"])
    rc, out = await kubectl(
        sim_api, "get", "pods", "-A", "--field-selector", "spec.nodeName=control02", "-o", "json"
    )
    assert rc == 0, out
    assert [p["metadata"]["name"] for p in json.loads(out)["items"]] == ["db-0"]


async def test_create_from_manifest_with_default_validation(
    sim_api: SimulatorHandle, tmp_path: Path
) -> None:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: created\nspec:\n"
        "  containers:\n  - name: app\n    image: busybox\n"
    )
    rc, out = await kubectl(sim_api, "create", "-f", str(manifest))
    assert rc == 0, out
    assert "pod/created created" in out
    assert sim_api.sim.store.peek(PODS, "default", "created") is not None


async def test_taint_and_untaint_out_of_service(sim_api: SimulatorHandle) -> None:
    rc, out = await kubectl(sim_api, "taint", "node", "control02", OUT_OF_SERVICE)
    assert rc == 0, out
    taints = sim_api.sim.store.get(NODES, None, "control02")["spec"]["taints"]
    assert taints == [
        {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}
    ]
    rc, out = await kubectl(sim_api, "taint", "node", "control02", OUT_OF_SERVICE + "-")
    assert rc == 0, out
    assert not sim_api.sim.store.get(NODES, None, "control02")["spec"].get("taints")


async def test_cordon_and_describe_node(sim_api: SimulatorHandle) -> None:
    sim_api.sim.store.create(PODS, "default", _pod("on-ctl", "control02"))
    rc, out = await kubectl(sim_api, "cordon", "control02")
    assert rc == 0, out
    rc, out = await kubectl(sim_api, "get", "node", "control02", "--no-headers")
    assert out.split()[1] == "NotReady,SchedulingDisabled"
    rc, out = await kubectl(sim_api, "describe", "node", "control02")
    assert rc == 0, out
    assert "Unschedulable:      true" in out
    assert "on-ctl" in out


async def test_force_delete_then_strip_finalizers(sim_api: SimulatorHandle) -> None:
    store = sim_api.sim.store
    store.create(PODS, "default", _pod("stuck", "control02", finalizers=["example.com/hold"]))
    store.create(PODS, "default", _pod("plain", "control02"))
    rc, out = await kubectl(sim_api, "delete", "pod", "plain", "--grace-period=0", "--force")
    assert rc == 0, out
    assert store.peek(PODS, "default", "plain") is None
    rc, out = await kubectl(
        sim_api, "delete", "pod", "stuck", "--grace-period=0", "--force", "--wait=false"
    )
    assert rc == 0, out
    rc, out = await kubectl(sim_api, "get", "pod", "stuck", "--no-headers")
    assert out.split()[2] == "Terminating"
    rc, out = await kubectl(
        sim_api, "patch", "pod", "stuck", "-p", '{"metadata":{"finalizers":null}}'
    )
    assert rc == 0, out
    assert store.peek(PODS, "default", "stuck") is None


async def test_delete_waits_for_removal(sim_api: SimulatorHandle) -> None:
    sim_api.sim.store.create(PODS, "default", _pod("unscheduled"))
    rc, out = await kubectl(sim_api, "delete", "pod", "unscheduled")
    assert rc == 0, out
    assert 'pod "unscheduled" deleted' in out
    assert sim_api.sim.store.peek(PODS, "default", "unscheduled") is None


async def test_replace_with_stale_resource_version_conflicts(
    sim_api: SimulatorHandle, tmp_path: Path
) -> None:
    rc, out = await kubectl(sim_api, "get", "node", "worker1", "-o", "json")
    stale = tmp_path / "node.json"
    stale.write_text(out)
    rc, out = await kubectl(sim_api, "label", "node", "worker1", "touched=yes")
    assert rc == 0, out
    rc, out = await kubectl(sim_api, "replace", "-f", str(stale))
    assert rc != 0
    assert "Conflict" in out
    assert "the object has been modified" in out


async def test_get_watch_shows_new_objects(sim_api: SimulatorHandle) -> None:
    proc = await asyncio.create_subprocess_exec(
        "kubectl", "--kubeconfig", str(sim_api.kubeconfig), "get", "pods", "-w",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        deadline = asyncio.get_running_loop().time() + 60
        while sim_api.faults.count(verb="watch") == 0:
            assert asyncio.get_running_loop().time() < deadline, "kubectl never watched"
            await asyncio.sleep(0.05)
        sim_api.sim.store.create(PODS, "default", _pod("late-arrival"))
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        while b"late-arrival" not in line:
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
        assert line.split()[:2] == [b"late-arrival", b"0/1"], line
    finally:
        proc.terminate()
        await proc.wait()


async def test_kubectl_writes_are_recorded_under_its_field_manager(
    sim_api: SimulatorHandle,
) -> None:
    rc, out = await kubectl(sim_api, "label", "node", "worker1", "zone=a")
    assert rc == 0, out
    rc, out = await kubectl(
        sim_api, "get", "node", "worker1", "-o", "json", "--show-managed-fields"
    )
    assert rc == 0, out
    entries = json.loads(out)["metadata"]["managedFields"]
    label = next(e for e in entries if e["manager"] == "kubectl-label")
    assert label["operation"] == "Update"
    assert label["fieldsV1"] == {"f:metadata": {"f:labels": {"f:zone": {}}}}
    assert label["time"].endswith("Z")
