"""How a written proof is dated: by the API server's stamp on the write of the annotation
itself. A later change by someone else must not make an old "off" look new, and what the
writer says about the time is never read."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from nodefence.kube.convert import node_facts, power_proof

KEY = "nodefence.io/power-state"
SOURCE = "ConfigMap nodefence/nodefence-power.n1"


def entry(manager: str, time: str, *fields: str, subresource: str = "") -> dict[str, Any]:
    """A managedFields entry owning ``fields`` (each a space-separated path)."""
    owned: dict[str, Any] = {}
    for path in fields:
        level = owned
        for step in path.split(" "):
            level = level.setdefault(step, {})
    found = {"manager": manager, "operation": "Update", "time": time, "fieldsV1": owned}
    if subresource:
        found["subresource"] = subresource
    return found


def configmap(value: str | None, *managed: dict[str, Any]) -> dict[str, Any]:
    notes = {KEY: value, "proof-written-at": "2099-01-01T00:00:00Z"} if value is not None else {}
    return {
        "metadata": {
            "name": "nodefence-power.n1",
            "creationTimestamp": "2026-12-01T08:00:00Z",
            "annotations": notes,
            "managedFields": list(managed),
        }
    }


def test_dated_by_the_entry_that_owns_the_annotation() -> None:
    written = entry("fencer", "2026-12-01T08:05:00Z", f"f:metadata f:annotations f:{KEY}")
    later = entry("kubectl-label", "2026-12-01T09:00:00Z", "f:metadata f:labels f:team")
    proof = power_proof(configmap("off", written, later), KEY, SOURCE)
    assert (proof.state, proof.at) == ("off", datetime(2026, 12, 1, 8, 5, tzinfo=UTC))
    assert proof.detail == f"{KEY}=off"


def test_without_managed_fields_the_creation_dates_it() -> None:
    """Never later than the write, so an unstamped proof can only look older than it is."""
    proof = power_proof(configmap("true"), KEY, SOURCE)
    assert (proof.state, proof.at) == ("off", datetime(2026, 12, 1, 8, 0, tzinfo=UTC))


def test_anything_but_off_or_true_is_not_off() -> None:
    assert power_proof(configmap("on"), KEY, SOURCE).state == "on"
    assert power_proof(configmap("maybe"), KEY, SOURCE).state == "unknown"
    missing = power_proof(configmap(None), KEY, SOURCE)
    assert (missing.state, missing.detail) == ("unknown", f"no annotation {KEY}")


def test_a_nodes_last_status_write_is_the_latest_status_entry() -> None:
    node = {
        "metadata": {
            "name": "n1",
            "managedFields": [
                entry(
                    "kubelet", "2026-12-01T08:01:00Z", "f:status f:conditions", subresource="status"
                ),
                entry(
                    "kube-controller-manager",
                    "2026-12-01T08:02:00Z",
                    "f:status f:conditions",
                    subresource="status",
                ),
                entry("nodefence", "2026-12-01T09:00:00Z", "f:metadata f:annotations f:x"),
            ],
        }
    }
    assert node_facts(node).status_written == datetime(2026, 12, 1, 8, 2, tzinfo=UTC)
