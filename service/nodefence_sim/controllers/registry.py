"""Every simulated control loop, in the order one simulation step runs them.

Each module exposes ``controllers(sim) -> list[Controller]``. The kubelets run first so that a
pod bound during a step is seen by the volume controller (which may hold it back) before any
kubelet starts it; the node controllers follow the kubelets so that a fresh Lease is never
mistaken for a silent one. The namespace controller runs before the workload controllers so
that a namespace being deleted refuses their new pods in the pass that marks it.
"""

from __future__ import annotations

from nodefence_sim.controllers import (
    disruption,
    garbage_collector,
    kubelet,
    namespaces,
    node_lifecycle,
    podgc,
    scheduler,
    taint_eviction,
    volumes,
    workloads,
)
from nodefence_sim.simulation import Controller, Simulation


def node_controllers(sim: Simulation) -> list[Controller]:
    """The kubelets and the controllers of node health, taints and pod garbage collection."""
    return [
        *kubelet.controllers(sim),
        *node_lifecycle.controllers(sim),
        *taint_eviction.controllers(sim),
        *podgc.controllers(sim),
    ]


def all_controllers(sim: Simulation) -> list[Controller]:
    return [
        *node_controllers(sim),
        *garbage_collector.controllers(sim),
        *namespaces.controllers(sim),
        *workloads.controllers(sim),
        *scheduler.controllers(sim),
        *volumes.controllers(sim),
        *disruption.controllers(sim),
    ]
