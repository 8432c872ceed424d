"""Large simulated clusters for benchmarks: N nodes of realistic size and M pods.

A real Node is about 9 KB of JSON, most of it ``status``: 40 cached images with their digests
and sizes, conditions, addresses, capacity and allocatable, nodeInfo. The seed scenario's nodes
are a tenth of that, so a cluster built of them would make every list and watch look ten
times cheaper than it is. Pods are bare, spread evenly over the workers.

Built in memory (a YAML scenario of 5,000 such nodes would take minutes to parse):
``python -m nodefence_sim.scale --nodes 5000 --pods 50000 --port 0 --kubeconfig-out FILE``
serves one as ``nodefence simulate`` does, and prints the same line once listening;
``--backend real`` builds the same cluster on the real control plane (``nodefence_sim.real.scale``).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
from typing import Any

from nodefence_sim.controllers.registry import all_controllers
from nodefence_sim.server import serve_until_signalled
from nodefence_sim.simulation import SimSettings, Simulation

Obj = dict[str, Any]
CONTROL_PLANE = 3
NAMESPACE = "workload"
# The real kubelet's Lease renewal period: the seed's 2 s would be 2,500 writes a second at
# 5,000 nodes, a load no real cluster of that size carries.
LEASE_RENEW_SECONDS = 10.0
# The real kubelet's nodeStatusReportFrequency when its Lease carries the heartbeat (5 minutes;
# it posts status at once on any change).
NODE_STATUS_REPORT_SECONDS = 300.0


def _digest(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()


def node_name(index: int) -> str:
    return f"control{index + 1:02d}" if index < CONTROL_PLANE else f"node-{index:05d}"


def realistic_node(name: str, *, images: int = 40, control_plane: bool = False) -> Obj:
    """A Node as a kubelet registers and reports it, about 9 KB of JSON with 40 images."""
    instance = f"i-{_digest(name)[:17]}"
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "m5.4xlarge",
        "topology.kubernetes.io/region": "eu-west-1",
        "topology.kubernetes.io/zone": f"eu-west-1{'abc'[int(_digest(name), 16) % 3]}",
    }
    if control_plane:
        labels["node-role.kubernetes.io/control-plane"] = ""
    resources = {
        "cpu": "16",
        "ephemeral-storage": "104845292Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": "65842364Ki",
        "pods": "110",
    }
    cached = [
        {
            "names": [
                f"registry.example/t{i % 7}/svc-{i}@sha256:{_digest(name, str(i))}",
                f"registry.example/t{i % 7}/svc-{i}:v1.{i}",
            ],
            "sizeBytes": 10_000_000 + 1_234_567 * i,
        }
        for i in range(images)
    ]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                "csi.volume.kubernetes.io/nodeid": json.dumps({"ebs.csi.aws.com": instance}),
            },
        },
        "spec": {"providerID": f"aws:///eu-west-1a/{instance}"},
        "status": {
            "capacity": dict(resources),
            "allocatable": {**resources, "cpu": "15890m", "memory": "64691388Ki"},
            "images": cached,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        },
    }


def bare_pod(index: int, node: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"app-{index:06d}", "namespace": NAMESPACE, "labels": {"app": "big"}},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "app", "image": "registry.example.com/app:1"}],
        },
    }


def objects(nodes: int, pods: int) -> list[Obj]:
    """``nodes`` Nodes (the first three control plane) and ``pods`` pods over the workers."""
    found: list[Obj] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "nodefence"}},
    ]
    names = [node_name(i) for i in range(nodes)]
    found += [realistic_node(n, control_plane=i < CONTROL_PLANE) for i, n in enumerate(names)]
    workers = names[CONTROL_PLANE:] or names
    found += [bare_pod(i, workers[i % len(workers)]) for i in range(pods)]
    return found


def simulation(
    nodes: int, pods: int, *, down: int = 0, down_since: float = 0.0, **settings: Any
) -> Simulation:
    """A settled cluster, as ``Simulation.from_scenario`` builds one: Ready nodes with fresh
    Leases, running pods, up for a day; the last ``down`` nodes' kubelets died ``down_since``
    seconds ago (an outage, settled once: taken down one by one through the control API, each
    death settles the whole cluster again, minutes for a thousand of 5,000)."""
    sim = Simulation(
        SimSettings(
            lease_renew_seconds=LEASE_RENEW_SECONDS,
            node_status_report_seconds=NODE_STATUS_REPORT_SECONDS,
            **settings,
        )
    )
    sim.controllers.extend(all_controllers(sim))
    sim.load_objects(objects(nodes, pods))
    sim.settle()
    sim.have_run()
    sim.settle()
    sim.kubelets.spread_timers()
    for index in range(max(0, nodes - down), nodes):
        sim.kubelets.down(node_name(index), down_since)
    if down:
        sim.settle()
    return sim


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nodefence_sim.scale", description=__doc__)
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--pods", type=int, default=0)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--kubeconfig-out")
    parser.add_argument("--down", type=int, default=0, help="the last N nodes' kubelets dead")
    parser.add_argument("--down-since", type=float, default=0.0, help="dead for S seconds")
    parser.add_argument("--bmc-inventory-out")
    parser.add_argument(
        "--backend",
        choices=("sim", "real"),
        default="sim",
        help="real: the same cluster on the real control plane, one kwok for every node",
    )
    # Imported here: the real backend imports this module's cluster.
    from nodefence_sim.real import scale as real

    real.add_arguments(parser)
    args = parser.parse_args(argv)
    if args.backend == "real":
        return real.run(args)
    sim = simulation(args.nodes, args.pods, down=args.down, down_since=args.down_since)
    return asyncio.run(
        serve_until_signalled(sim, args.port, args.kubeconfig_out, args.bmc_inventory_out)
    )


if __name__ == "__main__":
    raise SystemExit(main())
