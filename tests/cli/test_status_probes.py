"""``nodefence status`` shows each inventory node's last power-state probe, as the serving replicas
recorded it in the ConfigMap ``nodefence-fencing-probes``: driver, state, age on the API server's
clock, error; a probe older than twice its interval is flagged stale; an absent ConfigMap or a
garbled entry is "no probe recorded", never a failure. The record is written here with the real
kubectl, as any writer's would be read."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from .operator_support import KUBECTL, NAMESPACE, Cluster

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed"),
]

PROBES = "nodefence-fencing-probes"
REDFISH_POLICY = "rules:\n  - name: default\n    fencing:\n      driver: redfish\n"


def _env(cluster: Cluster) -> dict[str, str]:
    return {
        "NODEFENCE_AUTH_DISABLED": "true",
        "NODEFENCE_POLICY_FILE": str(cluster.policy(REDFISH_POLICY)),
        "NODEFENCE_BMC_INVENTORY": str(cluster.bmc_inventory),
    }


def _status(cluster: Cluster, output: str) -> str:
    result = cluster.nodefence("status", "-o", output, env=_env(cluster))
    assert result.returncode == 0, result.stderr
    return result.stdout


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _entry(state: str, at: datetime, error: str = "", interval: float = 900) -> str:
    return json.dumps(
        {
            "driver": "redfish",
            "target": "http://127.0.0.1/redfish/v1/Systems/x",
            "state": state,
            "error": error,
            "seconds": 0.2,
            "at": _stamp(at),
            "intervalSeconds": interval,
            "by": "nodefence-abc12",
        }
    )


def _apply(cluster: Cluster, data: dict[str, str]) -> None:
    manifest = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": PROBES, "namespace": NAMESPACE},
        "data": data,
    }
    path = cluster.workdir / "probes.yaml"
    path.write_text(yaml.safe_dump(manifest))
    result = cluster.kubectl("apply", "-f", str(path))
    assert result.returncode == 0, result.stderr


def test_status_shows_each_nodes_last_probe_and_flags_a_stale_one(cluster: Cluster) -> None:
    now = datetime.now(UTC)
    _apply(
        cluster,
        {
            "compute01": _entry("on", now - timedelta(seconds=30)),
            "compute02": _entry(
                "unknown", now - timedelta(seconds=40), error="HTTP 401 from the BMC"
            ),
            # Three hours old with a 15-minute interval: the probe stopped.
            "compute03": _entry("off", now - timedelta(hours=3)),
            "compute04": "{not json",
        },
    )

    probes: dict[str, Any] = json.loads(_status(cluster, "json"))["fencingProbes"]
    text = _status(cluster, "text")

    assert probes["configMap"] == f"{NAMESPACE}/{PROBES}"
    nodes = {n["node"]: n for n in probes["nodes"]}
    assert set(nodes) == {"compute01", "compute02", "compute03"}
    assert nodes["compute01"]["driver"] == "redfish"
    assert nodes["compute01"]["state"] == "on"
    assert nodes["compute01"]["stale"] is False
    assert nodes["compute01"]["error"] is None
    assert nodes["compute02"]["answered"] is False
    assert nodes["compute02"]["error"] == "HTTP 401 from the BMC"
    assert nodes["compute03"]["stale"] is True
    assert nodes["compute03"]["ageSeconds"] > 2 * 900
    assert probes["unreadable"] == ["compute04"]
    # The simulator's inventory lists every node; the ones with no entry at all are named.
    assert "compute01" not in probes["notRecorded"]
    assert "compute04" not in probes["notRecorded"]
    assert probes["notRecorded"], probes

    assert (
        f"Power-state probes (ConfigMap {NAMESPACE}/{PROBES}): 3 recorded, 1 NOT ANSWERING, "
        "1 STALE" in text
    )
    lines = text.splitlines()
    compute03 = next(line for line in lines if line.strip().startswith("compute03"))
    assert "off" in compute03
    assert "STALE: older than 2x its 900s interval" in compute03
    compute02 = lines.index(next(line for line in lines if line.strip().startswith("compute02")))
    assert lines[compute02 + 1].strip() == "error: HTTP 401 from the BMC"
    assert "compute04  no probe recorded (its entry could not be read)" in text


def test_status_without_any_probe_recorded_says_so(cluster: Cluster) -> None:
    probes: dict[str, Any] = json.loads(_status(cluster, "json"))["fencingProbes"]
    text = _status(cluster, "text")

    assert probes["nodes"] == []
    assert probes["note"] == f"ConfigMap {NAMESPACE}/{PROBES} is absent"
    assert f"Power-state probes: no probe recorded (ConfigMap {NAMESPACE}/{PROBES} is absent;" in (
        text
    )

    # A ConfigMap with nothing a probe writes reads the same way.
    _apply(cluster, {"compute01": "[]"})
    text = _status(cluster, "text")
    assert "compute01  no probe recorded (its entry could not be read)" in text
