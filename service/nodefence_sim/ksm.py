"""``GET /metrics`` in kube-state-metrics format, so a real Prometheus can evaluate the
kube-prometheus node alerts against the simulated cluster.

Only the series those alerts and a fencing dashboard use are served, with kube-state-metrics
v2's names, help texts and label sets: ``KubeNodeNotReady`` reads
``kube_node_status_condition{condition="Ready",status="true"} == 0`` and ``KubeNodeUnreachable``
reads ``kube_node_spec_taint{key="node.kubernetes.io/unreachable",effect="NoSchedule"} == 1``.
The ``job`` label those expressions also match comes from the scrape configuration.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from aiohttp import web

from nodefence_sim.resources import NODES, PODS
from nodefence_sim.simulation import Simulation
from nodefence_sim.store import parse_time

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
POD_PHASES = ("Pending", "Succeeded", "Failed", "Unknown", "Running")
CONDITION_STATUSES = (("true", "True"), ("false", "False"), ("unknown", "Unknown"))

Sample = tuple[Mapping[str, str], float]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _family(name: str, help_text: str, samples: Iterable[Sample]) -> list[str]:
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
    for labels, value in samples:
        rendered = ",".join(f'{key}="{_escape(str(val))}"' for key, val in labels.items())
        number = repr(float(value)) if value != int(value) else str(int(value))
        lines.append(f"{name}{{{rendered}}} {number}")
    return lines


def _node_samples(nodes: Sequence[Mapping[str, Any]]) -> dict[str, list[Sample]]:
    info: list[Sample] = []
    unschedulable: list[Sample] = []
    taints: list[Sample] = []
    conditions: list[Sample] = []
    for node in nodes:
        name = str(node["metadata"]["name"])
        spec = node.get("spec") or {}
        status = node.get("status") or {}
        node_info = status.get("nodeInfo") or {}
        internal_ip = next(
            (
                a.get("address", "")
                for a in status.get("addresses") or []
                if a.get("type") == "InternalIP"
            ),
            "",
        )
        info.append(
            (
                {
                    "node": name,
                    "kernel_version": node_info.get("kernelVersion", ""),
                    "os_image": node_info.get("osImage", ""),
                    "container_runtime_version": node_info.get("containerRuntimeVersion", ""),
                    "kubelet_version": node_info.get("kubeletVersion", ""),
                    "kubeproxy_version": node_info.get("kubeProxyVersion", ""),
                    "provider_id": spec.get("providerID", ""),
                    "pod_cidr": spec.get("podCIDR", ""),
                    "system_uuid": node_info.get("systemUUID", ""),
                    "internal_ip": internal_ip,
                },
                1,
            )
        )
        unschedulable.append(({"node": name}, 1 if spec.get("unschedulable") else 0))
        for taint in spec.get("taints") or []:
            taints.append(
                (
                    {
                        "node": name,
                        "key": taint.get("key", ""),
                        "value": taint.get("value", ""),
                        "effect": taint.get("effect", ""),
                    },
                    1,
                )
            )
        for condition in status.get("conditions") or []:
            for label, value in CONDITION_STATUSES:
                conditions.append(
                    (
                        {"node": name, "condition": condition.get("type", ""), "status": label},
                        1 if condition.get("status") == value else 0,
                    )
                )
    return {
        "info": info,
        "unschedulable": unschedulable,
        "taints": taints,
        "conditions": conditions,
    }


def _pod_samples(pods: Sequence[Mapping[str, Any]]) -> dict[str, list[Sample]]:
    info: list[Sample] = []
    deletion: list[Sample] = []
    phases: list[Sample] = []
    for pod in pods:
        meta = pod["metadata"]
        spec = pod.get("spec") or {}
        status = pod.get("status") or {}
        ident = {"namespace": meta.get("namespace", ""), "pod": meta["name"], "uid": meta["uid"]}
        owner = next((r for r in meta.get("ownerReferences") or [] if r.get("controller")), None)
        info.append(
            (
                {
                    **ident,
                    "host_ip": status.get("hostIP", ""),
                    "pod_ip": status.get("podIP", ""),
                    "node": spec.get("nodeName", ""),
                    "created_by_kind": owner.get("kind", "<none>") if owner else "<none>",
                    "created_by_name": owner.get("name", "<none>") if owner else "<none>",
                    "priority_class": spec.get("priorityClassName", ""),
                    "host_network": "true" if spec.get("hostNetwork") else "false",
                },
                1,
            )
        )
        deleted_at = parse_time(meta.get("deletionTimestamp"))
        if deleted_at is not None:
            deletion.append((ident, deleted_at.timestamp()))
        phase = status.get("phase")
        if phase:
            for candidate in POD_PHASES:
                phases.append(({**ident, "phase": candidate}, 1 if phase == candidate else 0))
    return {"info": info, "deletion": deletion, "phases": phases}


def render(sim: Simulation) -> str:
    """The exposition text for the cluster as it is now."""
    return render_objects(sim.store.items(NODES), sim.store.items(PODS))


def render_objects(nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]) -> str:
    """The exposition text for these Node and Pod objects, from whichever API server listed
    them (the real backend serves the same series from its own lists)."""
    node = _node_samples(sorted(nodes, key=lambda n: str(n["metadata"]["name"])))
    pod = _pod_samples(
        sorted(
            pods,
            key=lambda p: (str(p["metadata"].get("namespace")), str(p["metadata"]["name"])),
        )
    )
    lines = [
        *_family("kube_node_info", "Information about a cluster node.", node["info"]),
        *_family(
            "kube_node_spec_unschedulable",
            "Whether a node can schedule new pods.",
            node["unschedulable"],
        ),
        *_family("kube_node_spec_taint", "The taint of a cluster node.", node["taints"]),
        *_family(
            "kube_node_status_condition", "The condition of a cluster node.", node["conditions"]
        ),
        *_family("kube_pod_info", "Information about pod.", pod["info"]),
        *_family("kube_pod_deletion_timestamp", "Unix deletion timestamp", pod["deletion"]),
        *_family("kube_pod_status_phase", "The pods current phase.", pod["phases"]),
    ]
    return "\n".join(lines) + "\n"


def add_metrics_route(app: web.Application, sim: Simulation) -> None:
    async def metrics(_request: web.Request) -> web.Response:
        return web.Response(body=render(sim).encode(), headers={"Content-Type": CONTENT_TYPE})

    app.router.add_get("/metrics", metrics)
