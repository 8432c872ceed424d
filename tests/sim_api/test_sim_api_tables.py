"""The STATUS column rules of the real pod and node printers."""

from __future__ import annotations

from nodefence_sim.api.tables import human_duration, node_roles, node_status, pod_status


def test_pod_status_terminating_init_and_waiting_reason() -> None:
    base = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}]}}
    init = {
        **base,
        "spec": {"containers": [{"name": "a"}], "initContainers": [{"name": "i1"}, {"name": "i2"}]},
        "status": {"phase": "Pending", "initContainerStatuses": [{"name": "i1", "state": {}}]},
    }
    assert pod_status(init)[0] == "Init:0/2"
    waiting = {
        **base,
        "status": {
            "phase": "Pending",
            "containerStatuses": [
                {
                    "name": "a",
                    "restartCount": 4,
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                }
            ],
        },
    }
    assert pod_status(waiting) == ("CrashLoopBackOff", 0, 4)
    running = {
        **base,
        "status": {
            "phase": "Running",
            "containerStatuses": [{"name": "a", "ready": True, "state": {"running": {}}}],
        },
    }
    assert pod_status(running) == ("Running", 1, 0)
    deleting = {**running, "metadata": {"name": "p", "deletionTimestamp": "2024-01-01T00:00:00Z"}}
    assert pod_status(deleting)[0] == "Terminating"


def test_node_status_and_roles() -> None:
    node = {
        "metadata": {
            "labels": {"node-role.kubernetes.io/control-plane": "", "kubernetes.io/role": "master"}
        },
        "spec": {"unschedulable": True},
        "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]},
    }
    assert node_status(node) == "NotReady,SchedulingDisabled"
    assert node_roles(node) == "control-plane,master"
    assert node_status({"metadata": {}, "status": {}}) == "Unknown"


def test_human_duration_matches_kubectl() -> None:
    assert [human_duration(s) for s in (5, 150, 3600 * 5 + 60 * 7, 3600 * 30, 86400 * 3)] == [
        "5s",
        "2m30s",
        "5h7m",
        "30h",
        "3d",
    ]
