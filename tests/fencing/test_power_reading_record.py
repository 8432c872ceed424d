"""The BMC's answer is a fact of the fence record: the power step writes it beside the node's
entry (stamped with the API server's time of that write) and the request decides on what the
record holds. A reading counts only for the request that asked: one another request left in the
entry, however convincing, is no proof, and the machine is asked again.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from tests.seeded_cluster import firing, oos_taints

from nodefence.commands import status
from nodefence.engine import record as fence_record
from nodefence.engine.identity import Reported
from nodefence.engine.record import FenceEntry, FenceRecord, Phase, RecordedReading
from nodefence.engine.wording import instant
from nodefence_sim.controllers.kubelet import system_uuid
from nodefence_sim.redfish import bmcs_of
from nodefence_sim.resources import CONFIGMAPS, NODES
from nodefence_sim.testing import SimulatorHandle

from .identity_support import NODE, POLICY, inventory, kill, reasons, receiver, record_entries

VERIFY = {
    **POLICY,
    "rules": [
        {"name": "default", "fencing": {"driver": "redfish", "action": "verify"}},
    ],
}
OTHER_REQUEST = "another-replica-0001"


async def test_the_fence_stands_on_the_reading_its_entry_holds(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    await kill(cluster, NODE)
    async with receiver(cluster, inventory(tmp_path, cluster)) as nodefence:
        [decision] = await nodefence.alert(firing(NODE))
    assert decision["verdict"] == "fence", reasons(decision)
    assert bmcs_of(cluster.sim).resets, "no ForceOff went out"
    [entry] = record_entries(cluster)
    [reading] = record_readings(cluster)
    assert (reading.node, reading.uid) == (NODE, entry.uid)
    assert (reading.operation, reading.state) == ("off", "off")
    assert reading.action_sent
    assert reading.reset_sent
    assert reading.identity is not None
    assert reading.identity.value == system_uuid(NODE)
    assert reading.by, "the reading names no request"
    # Stamped by the API server when it was written: after the claim, before the taint.
    assert entry.fenced_at is not None
    assert entry.claimed_at <= reading.at <= entry.fenced_at
    # The decision's power-off reason is the reading the entry holds, with its time.
    assert f"Off (read back after nodefence powered it off at {instant(reading.at)})" in reasons(
        decision
    )
    assert f"identity matched ({system_uuid(NODE)})" in entry.proof
    # ``nodefence status`` shows what the machine answered, and when.
    held = cluster.sim.store.peek(CONFIGMAPS, "nodefence", fence_record.CONFIGMAP)
    assert held is not None
    [shown] = status.report(fence_record.decode(held["data"], "1"), [])["powerReadings"]
    assert shown["node"] == NODE
    assert (shown["operation"], shown["state"], shown["at"]) == ("off", "off", instant(reading.at))
    assert shown["identity"] == system_uuid(NODE)


def record_readings(cluster: SimulatorHandle) -> tuple[RecordedReading, ...]:
    held = cluster.sim.store.peek(CONFIGMAPS, "nodefence", fence_record.CONFIGMAP)
    return () if held is None else fence_record.decode(held.get("data"), "1").readings


def plant(cluster: SimulatorHandle, entry: FenceEntry, reading: RecordedReading) -> None:
    """The fence record as another replica left it mid-fence: its claim, and an Off reading
    from its own request, naming this node's machine."""
    data = fence_record.encode(FenceRecord(entries=(entry,), readings=(reading,)))
    cluster.sim.store.create(
        CONFIGMAPS, "nodefence", {"metadata": {"name": fence_record.CONFIGMAP}, "data": data}
    )


async def test_a_reading_another_request_wrote_is_no_proof(
    cluster: SimulatorHandle, tmp_path: Path
) -> None:
    """Another replica's claim, with an Off reading of its own for this node's very machine:
    the request completing the claim asks the machine itself, which runs, and taints nothing."""
    await kill(cluster, NODE)
    node = cluster.sim.store.get(NODES, "", NODE)
    now = datetime.now(UTC).replace(microsecond=0)
    off = RecordedReading(
        node=NODE,
        uid=node["metadata"]["uid"],
        by=OTHER_REQUEST,
        operation="status",
        state="off",
        source="redfish BMC",
        at=now,
        identity=Reported(system_uuid(NODE), "redfish BMC"),
    )
    claimed = FenceEntry(
        node=NODE,
        uid=node["metadata"]["uid"],
        phase=Phase.CLAIMED,
        claimed_at=now,
        rule="default",
        alertname="KubeNodeNotReady",
        fingerprint="fp-other",
        boot_id=node["status"]["nodeInfo"]["bootID"],
        effect="NoExecute",
        claimed_by=OTHER_REQUEST,
    )
    plant(cluster, claimed, off)
    async with receiver(cluster, inventory(tmp_path, cluster), VERIFY) as nodefence:
        [decision] = await nodefence.alert(firing(NODE))
    assert decision["verdict"] != "fence", reasons(decision)
    assert "answered on" in reasons(decision), reasons(decision)
    assert oos_taints(cluster, NODE) == []
    assert bmcs_of(cluster.sim).resets == []
    readings = record_readings(cluster)
    mine = [r for r in readings if r.by != OTHER_REQUEST]
    assert [(r.operation, r.state) for r in mine] == [("status", "on")], readings
    assert off in readings, "another request's reading was overwritten"
