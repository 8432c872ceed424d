"""Each incident's recovery time, measured by nodefence itself, through the real receiver on the
seed cluster: the node dies, an alert fences it, the simulator's StatefulSet and Deployment
controllers run its pods elsewhere, and the reconcile pass counts the incident once
(``nodefence_recovery_seconds``), with a Normal Event on the Node and the value in ``nodefence
status``. Every time compared is one the simulated API server stamped; its clock is moved on past
the steady time instead of waiting for it."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from tests.seeded_cluster import (
    NODE,
    Receiver,
    eventually,
    firing,
    inference,
    node_events,
    start_receiver,
    writes_since,
)

from nodefence.engine import record as fence_record
from nodefence.engine.held_pods import DEPLOYMENT, STATEFULSET
from nodefence.engine.record import FenceEntry
from nodefence.engine.recovery import STEADY_SECONDS, deployment_of
from nodefence.engine.wording import parse_instant
from nodefence.kube.convert import pod_facts, server_stamped
from nodefence_sim.resources import CONFIGMAPS, LEASES, PODS
from nodefence_sim.simulation import Simulation
from nodefence_sim.testing import SimulatorHandle, running_simulator


class MovableClock:
    """The wall clock, moved on by ``advance``: the simulated API server's clock runs as usual and
    can be made to pass the steady time at once."""

    def __init__(self) -> None:
        self.offset = timedelta()

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += timedelta(seconds=seconds)


def entry_of(cluster: SimulatorHandle) -> FenceEntry | None:
    configmap = cluster.sim.store.peek(CONFIGMAPS, "nodefence", fence_record.CONFIGMAP)
    if configmap is None:
        return None
    return fence_record.from_configmap(configmap)[0].entry(NODE)


def replacements(cluster: SimulatorHandle, held: FenceEntry) -> list[dict[str, Any]] | None:
    """The pods that stand for every pod ``held`` remembers, Running elsewhere (the earliest
    changed of each Deployment's, as nodefence takes them); None while any is missing."""
    since = held.silent_since
    assert since is not None
    pods = [
        p
        for p in cluster.sim.store.items(PODS)
        if p["spec"].get("nodeName") not in (None, "", NODE)
        and (p.get("status") or {}).get("phase") == "Running"
        and not p["metadata"].get("deletionTimestamp")
        and pod_facts(p).created is not None
        and pod_facts(p).created >= since.replace(microsecond=0)  # type: ignore[operator]
    ]
    chosen: list[dict[str, Any]] = []
    for held_pod in held.held.statefulset_pods():
        name = f"{held_pod.owner}-{held_pod.ordinal}"
        match = [
            p
            for p in pods
            if (p["metadata"]["namespace"], p["metadata"]["name"]) == (held_pod.namespace, name)
        ]
        if not match:
            return None
        chosen.append(match[0])
    for (namespace, deployment), count in held.held.deployments().items():
        mine = sorted(
            (
                p
                for p in pods
                if p["metadata"]["namespace"] == namespace
                and deployment_of(pod_facts(p)) == deployment
            ),
            key=lambda p: server_stamped(p) or datetime.max.replace(tzinfo=UTC),
        )
        if len(mine) < count:
            return None
        chosen.extend(mine[:count])
    return chosen


async def metric(receiver: Receiver, sample: str) -> float:
    async with receiver.session.get(receiver.url + "/metrics") as reply:
        text = await reply.text()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == sample:
                return float(s.value)
    raise AssertionError(f"no sample {sample}")


async def reconcile(receiver: Receiver) -> list[dict[str, Any]]:
    status, body = await receiver.post("/reconcile", {})
    assert status == 200, body
    return list(body["decisions"])


async def status(cluster: SimulatorHandle, *output: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "nodefence",
        "status",
        *output,
        "--kubeconfig",
        str(cluster.kubeconfig),
        "-n",
        "nodefence",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "HOME": str(cluster.kubeconfig.parent)},
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def test_the_reconcile_pass_measures_the_incident_once_on_server_stamps() -> None:
    clock = MovableClock()
    sim = Simulation.from_scenario("seed", clock=clock)
    # As the seed's operator ran it: the out-of-service node's volumes are detached, so the
    # StatefulSet pods' claims can attach elsewhere.
    sim.settings.feature_gates["NodeOutOfServiceVolumeDetach"] = True
    async with running_simulator(sim) as cluster:
        cluster.sim.node_down(NODE, since_seconds=1200)
        lease = cluster.sim.store.get(LEASES, "kube-node-lease", NODE)
        silent = server_stamped(lease)
        assert silent is not None
        async with (
            start_receiver(cluster, identity="replica-1") as receiver,
            start_receiver(cluster, identity="replica-2") as other,
            start_receiver(
                cluster, identity="dry-run", policy=inference({"dry_run": True})
            ) as dry_run,
        ):
            [decision] = await receiver.alert(firing())
            assert decision["verdict"] == "fence", decision
            held = entry_of(cluster)
            assert held is not None
            assert held.fenced_at is not None
            # The Lease's renewal as the API server stamped it, before the node went down.
            assert held.silent_since == silent
            kinds = {p.kind for p in held.held.pods}
            assert kinds == {STATEFULSET, DEPLOYMENT}, held.held
            assert ("openstack", STATEFULSET, "mariadb-server", 1) in {
                (p.namespace, p.kind, p.owner, p.ordinal) for p in held.held.pods
            }

            back = await eventually(lambda: replacements(cluster, held), within=60)
            assert all(p["spec"]["nodeName"] != NODE for p in back)
            # Past the steady time on the API server's clock: the replacements have held still.
            clock.advance(STEADY_SECONDS + 1)

            # S8: a dry run's pass measures nothing and writes nothing, not even the Event.
            cursor = cluster.faults.cursor
            assert not [
                a
                for d in await reconcile(dry_run)
                for a in d["actions"]
                if a["type"] == "record-recovery"
            ]
            assert writes_since(cluster, cursor) == []
            assert await metric(dry_run, "nodefence_recovery_seconds_count") == 0

            decisions = await reconcile(receiver)
            measured = [
                a for d in decisions for a in d["actions"] if a["type"] == "record-recovery"
            ]
            assert len(measured) == 1, decisions
            after = entry_of(cluster)
            assert after is not None
            assert after.recovered_at is not None
            # The last replacement's latest change, as the API server stamped it: no pod of
            # them changed later, so the measure is exactly the stamped interval.
            last = max(server_stamped(p) for p in back if server_stamped(p) is not None)  # type: ignore[type-var]
            assert after.recovered_at == last
            seconds = (after.recovered_at - silent).total_seconds()
            assert seconds >= 1200
            assert measured[0]["seconds"] == seconds
            assert await metric(receiver, "nodefence_recovery_seconds_count") == 1
            assert await metric(receiver, "nodefence_recovery_seconds_sum") == seconds

            [event] = [e for e in node_events(cluster, NODE) if e["reason"] == "NodeRecovered"]
            assert event["type"] == "Normal"
            assert event["message"].startswith(
                f"StatefulSet and Deployment pods running elsewhere {seconds:.0f} s after the "
                "node went silent; fenced at "
            )
            fenced_after = (held.fenced_at - silent).total_seconds()
            assert f"fenced at {fenced_after:.0f} s without power-off proof" in event["message"]

            # Counted once: again on this replica, and on another one.
            await reconcile(receiver)
            await reconcile(other)
            assert await metric(receiver, "nodefence_recovery_seconds_count") == 1
            assert await metric(other, "nodefence_recovery_seconds_count") == 0
            assert (
                len([e for e in node_events(cluster, NODE) if e["reason"] == "NodeRecovered"]) == 1
            )

            shown = json.loads(await status(cluster, "-o", "json"))
            [fenced] = [f for f in shown["fenced"] if f["node"] == NODE]
            recovery = fenced["recovery"]
            assert recovery["seconds"] == round(seconds)
            assert parse_instant(recovery["silentSince"]) == silent
            assert parse_instant(recovery["runningElsewhereSince"]) == after.recovered_at
            assert recovery["pods"] == held.held.count
            assert (
                f"recovery: StatefulSet and Deployment pods running elsewhere {round(seconds)} s "
                "after the node went silent"
            ) in await status(cluster)
