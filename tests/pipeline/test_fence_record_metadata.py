"""The fence record's ConfigMap keeps what others set on it: a write of the record replaces the
whole object (PUT with its resourceVersion), so labels and annotations a backup tool or a GitOps
owner put there must be carried over, with the keys of its data nodefence does not own."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from tests.seeded_cluster import NODE, eventually, firing, start_receiver, terminating_on

from nodefence.engine import record as fence_record
from nodefence_sim.resources import CONFIGMAPS
from nodefence_sim.testing import SimulatorHandle

LABELS = {"backup.example.com/keep": "true", "team": "platform"}
ANNOTATIONS = {"argocd.argoproj.io/compare-options": "IgnoreExtraneous"}


async def kubectl_apply(cluster: SimulatorHandle, manifest: dict[str, Any]) -> None:
    proc = await asyncio.create_subprocess_exec(
        "kubectl",
        "--kubeconfig",
        str(cluster.kubeconfig),
        "create",
        "-f",
        "-",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "HOME": str(cluster.kubeconfig.parent)},
    )
    out, _ = await asyncio.wait_for(proc.communicate(json.dumps(manifest).encode()), 60)
    assert proc.returncode == 0, out.decode()


async def test_a_fence_keeps_the_labels_and_annotations_of_the_record(
    cluster: SimulatorHandle,
) -> None:
    await kubectl_apply(
        cluster,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": fence_record.CONFIGMAP,
                "namespace": "nodefence",
                "labels": LABELS,
                "annotations": ANNOTATIONS,
            },
            "data": {"owner-note": "kept by the platform team"},
        },
    )
    cluster.sim.node_down(NODE, since_seconds=1200)
    await eventually(lambda: terminating_on(cluster, NODE))
    async with start_receiver(cluster) as receiver:
        [decision] = await receiver.alert(firing())
    assert decision["verdict"] == "fence", decision
    configmap = cluster.sim.store.get(CONFIGMAPS, "nodefence", fence_record.CONFIGMAP)
    record, data = fence_record.from_configmap(configmap)
    entry = record.entry(NODE)
    assert entry is not None
    assert entry.phase is fence_record.Phase.FENCED, "the claim and its confirm were written"
    meta = configmap["metadata"]
    assert meta["labels"] == {**LABELS, "app.kubernetes.io/name": "nodefence"}
    assert meta["annotations"] == ANNOTATIONS
    assert data["owner-note"] == "kept by the platform team"
