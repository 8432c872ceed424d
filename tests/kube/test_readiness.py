"""Ready and "takes workloads" mean one thing wherever a node is counted or judged: the watch-fed
index's summary of a Node, the converter's facts that the guards read, and the plain reading of
the Node JSON in the test oracle all agree, for any mix of Ready status, cordon and taints."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from nodefence.engine.model import OUT_OF_SERVICE_KEY, Condition
from nodefence.engine.readiness import (
    is_ready,
    node_is_ready,
    node_takes_workloads,
    takes_workloads,
)
from nodefence.kube.convert import is_ready as json_is_ready
from nodefence.kube.convert import node_facts
from nodefence.kube.node_index import summarize

from .oracle import cluster_facts

STATUSES = st.sampled_from(["True", "False", "Unknown", "true", "", None])
TAINT_KEYS = st.sampled_from(
    [OUT_OF_SERVICE_KEY, "node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"]
)


@st.composite
def nodes(draw: st.DrawFn) -> dict[str, Any]:
    conditions: list[dict[str, Any]] = []
    status = draw(STATUSES)
    if status is not None:
        conditions.append({"type": "Ready", "status": status})
    if draw(st.booleans()):
        conditions.insert(0, {"type": "MemoryPressure", "status": "True"})
    spec: dict[str, Any] = {
        "taints": [
            {"key": key, "effect": "NoExecute"} for key in draw(st.lists(TAINT_KEYS, max_size=2))
        ]
    }
    unschedulable = draw(st.sampled_from([None, False, True]))
    if unschedulable is not None:
        spec["unschedulable"] = unschedulable
    return {
        "metadata": {"name": "n1", "uid": "u1", "resourceVersion": "1"},
        "spec": spec,
        "status": {"conditions": conditions},
    }


def test_ready_is_exactly_the_status_true() -> None:
    assert is_ready(Condition("Ready", "True"))
    for status in ("False", "Unknown", "true", ""):
        assert not is_ready(Condition("Ready", status)), status
    assert not is_ready(None)


def test_a_node_takes_workloads_only_ready_uncordoned_and_in_service() -> None:
    ready = Condition("Ready", "True")
    assert takes_workloads(ready, unschedulable=False, out_of_service=False)
    assert not takes_workloads(ready, unschedulable=True, out_of_service=False)
    assert not takes_workloads(ready, unschedulable=False, out_of_service=True)
    assert not takes_workloads(
        Condition("Ready", "Unknown"), unschedulable=False, out_of_service=False
    )
    assert not takes_workloads(None, unschedulable=False, out_of_service=False)


@given(nodes())
def test_the_index_the_converter_and_the_oracle_agree(node: dict[str, Any]) -> None:
    facts = node_facts(node)
    summary = summarize(node)
    counted = cluster_facts([node])
    assert summary.ready == node_is_ready(facts) == json_is_ready(node)
    assert summary.ready == bool(counted.ready_nodes)
    assert summary.takes_workloads == node_takes_workloads(facts)
    assert summary.takes_workloads == bool(counted.schedulable_ready)
