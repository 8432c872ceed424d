"""What "Ready" and "takes workloads" mean, defined once for every part that counts or judges
nodes: the guards (S1, the ready fraction, control-plane quorum), the converter from Node JSON
and the watch-fed node index. Two definitions that drift apart would let the cached counts and
the live ones disagree about the same cluster.

The input is what each of them can produce cheaply: the node's Ready condition as parsed
(``kube.convert.ready_condition``), whether the node is cordoned, and whether it carries an
out-of-service taint.
"""

from __future__ import annotations

from nodefence.engine.model import Condition, NodeFacts

READY_TRUE = "True"


def is_ready(ready: Condition | None) -> bool:
    """Ready only when the condition says exactly ``True``: a missing condition, ``Unknown``
    (the node lifecycle controller's word for a silent kubelet) and ``False`` all count as
    NotReady, as the scheduler and the node lifecycle controller count them."""
    return ready is not None and ready.status == READY_TRUE


def takes_workloads(ready: Condition | None, *, unschedulable: bool, out_of_service: bool) -> bool:
    """Ready, schedulable and not out of service: a node that can carry what a fence moves."""
    return is_ready(ready) and not unschedulable and not out_of_service


def node_is_ready(node: NodeFacts) -> bool:
    return is_ready(node.ready)


def node_takes_workloads(node: NodeFacts) -> bool:
    return takes_workloads(
        node.ready,
        unschedulable=node.unschedulable,
        out_of_service=node.out_of_service_taint is not None,
    )
