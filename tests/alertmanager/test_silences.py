"""Silences hold the fallback where Alertmanager holds no alert, on a real Alertmanager: the
on-call person's "leave this node alone" stops the power-off and the taint whether or not the
alert still exists, names itself in the decision, holds through Alertmanager's outage (also for
a replica started during it), and a shared Alertmanager's other clusters' alerts and silences
count for nothing here when this cluster's matchers are set."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from bench.processes import Processes
from tests.seeded_cluster import node_events, oos_taints, start_receiver

from nodefence.engine.matchers import Matcher
from nodefence.engine.silences import Silence
from nodefence.kube.client import Deadline
from nodefence_sim.redfish import write_bmc_inventory
from nodefence_sim.resources import CONFIGMAPS
from nodefence_sim.simulation import Simulation
from nodefence_sim.testing import running_simulator

from .conftest import Starter, alert
from .test_fallback import DOWN_SECONDS, NODE, force_offs, reconcile, redfish_policy

OTHER = "compute01"


def eq(name: str, value: str) -> dict[str, Any]:
    return {"name": name, "value": value, "isRegex": False, "isEqual": True}


def policy_after_an_alert_rule(tmp_path: Path, rule: dict[str, Any]) -> Path:
    """A policy file whose first rule names an alert (so the fallback never uses it), then
    ``rule``."""
    policy = tmp_path / "policy.yaml"
    first = {
        "name": "unreachable-only",
        "match": {"alertnames": ["KubeNodeUnreachable"]},
        "fencing": {"driver": "none"},
    }
    policy.write_text(yaml.safe_dump({"rules": [first, rule]}))
    return policy


def assert_held_by(decision: dict[str, Any], silence_id: str) -> None:
    assert decision["verdict"] == "skip", decision
    [held] = [r for r in decision["reasons"] if r["guard"] == "silence"]
    assert not held["passed"]
    assert silence_id in held["message"], held
    assert "on-call" in held["message"], held
    assert "disk replacement" in held["message"], held
    assert "until " in held["message"], held
    # It was the fallback that was held: the decision says no alert arrived.
    guards = [r["guard"] for r in decision["reasons"] if r["guard"] != "dry-run"]
    assert guards[0] == "no-alert", decision


async def test_a_silence_holds_a_node_no_alert_is_held_for(
    tmp_path: Path, start_alertmanager: Starter
) -> None:
    """Prometheus is dead, so Alertmanager holds no alert; the node was silenced for a repair."""
    am = start_alertmanager()
    silence_id = await am.silence_matching(
        [eq("node", NODE)], comment="disk replacement", created_by="on-call"
    )
    async with running_simulator(Simulation.from_scenario("seed")) as cluster:
        inventory = write_bmc_inventory(tmp_path / "bmcs.yaml", cluster.url, cluster.sim)
        cluster.sim.node_down(NODE, since_seconds=DOWN_SECONDS)
        async with start_receiver(
            cluster, policy=redfish_policy(), alertmanager_url=am.url, bmc_inventory=inventory
        ) as receiver:
            [decision] = await reconcile(receiver)
            assert_held_by(decision, silence_id)
            [again] = await reconcile(receiver)
            assert_held_by(again, silence_id)
        assert oos_taints(cluster, NODE) == []
        assert force_offs(cluster) == 0
        [event] = [e for e in node_events(cluster, NODE) if silence_id in e["message"]]
        assert event["type"] == "Normal", event


async def test_a_regex_silence_holds_and_a_narrower_one_does_not(
    tmp_path: Path, start_alertmanager: Starter
) -> None:
    """Alertmanager's semantics: anchored regular expressions, and a label the alert would not
    carry (a silence for warning-severity alerts only) has the empty value, so it holds nothing
    here."""
    am = start_alertmanager()
    await am.silence_matching(
        [eq("node", NODE), eq("severity", "warning")], comment="disk replacement"
    )
    # "compute0" alone would not match compute02: the expression is anchored.
    await am.silence_matching(
        [{"name": "node", "value": "compute0", "isRegex": True, "isEqual": True}]
    )
    async with running_simulator(Simulation.from_scenario("seed")) as cluster:
        inventory = write_bmc_inventory(tmp_path / "bmcs.yaml", cluster.url, cluster.sim)
        cluster.sim.node_down(NODE, since_seconds=DOWN_SECONDS)
        async with start_receiver(
            cluster, policy=redfish_policy(), alertmanager_url=am.url, bmc_inventory=inventory
        ) as receiver:
            [decision] = await reconcile(receiver)
            assert decision["verdict"] == "fence", decision
            # Now one that matches: ``compute0.`` and ``alertname`` as the alert would carry it.
            held = await am.silence_matching(
                [
                    {"name": "node", "value": "compute0.", "isRegex": True, "isEqual": True},
                    eq("alertname", "KubeNodeNotReady"),
                ],
                comment="disk replacement",
                created_by="on-call",
            )
            assert len(oos_taints(cluster, NODE)) == 1
        # Another node's outage, with the matching silence in force: held by it.
        cluster.sim.node_down(OTHER, since_seconds=DOWN_SECONDS)
        async with start_receiver(
            cluster, policy=redfish_policy(), alertmanager_url=am.url, bmc_inventory=inventory
        ) as receiver:
            status, body = await receiver.post("/reconcile", {})
            assert status == 200, body
            [other] = [d for d in body["decisions"] if d["node"] == OTHER]
            assert_held_by(other, held)
        assert oos_taints(cluster, OTHER) == []


async def test_silences_hold_while_alertmanager_is_down_for_every_replica(
    tmp_path: Path, procs: Processes, start_alertmanager: Starter
) -> None:
    """Read while Alertmanager answered, the silence still holds once it is down: for the
    replica that read it, and for one started during the outage, which finds it in the
    cluster."""
    am = start_alertmanager()
    silence_id = await am.silence_matching(
        [eq("node", NODE)], comment="disk replacement", created_by="on-call"
    )
    async with running_simulator(Simulation.from_scenario("seed")) as cluster:
        inventory = write_bmc_inventory(tmp_path / "bmcs.yaml", cluster.url, cluster.sim)
        async with start_receiver(
            cluster, policy=redfish_policy(), alertmanager_url=am.url, bmc_inventory=inventory
        ) as receiver:
            # A pass while every node is up reads and keeps the silences.
            assert await reconcile(receiver) == []
            kept = await receiver.pipeline.kube.get_configmap("nodefence", "nodefence-silences")
            assert silence_id in kept["data"]["silences.json"]
            procs.stop_all()
            cluster.sim.node_down(NODE, since_seconds=DOWN_SECONDS)
            [decision] = await reconcile(receiver)
            assert_held_by(decision, silence_id)
            assert "cannot be asked now" in decision["reasons"][1]["message"], decision
        async with start_receiver(
            cluster,
            policy=redfish_policy(),
            alertmanager_url=am.url,
            bmc_inventory=inventory,
            identity="replica-2",
        ) as started_during_outage:
            [decision] = await reconcile(started_during_outage)
            assert_held_by(decision, silence_id)
        # status shows them, as last read, while Alertmanager cannot be asked.
        env = {
            **os.environ,
            "KUBECONFIG": str(cluster.kubeconfig),
            "NODEFENCE_ALERTMANAGER_URL": am.url,
            "NODEFENCE_NAMESPACE": "nodefence",
        }
        command = [sys.executable, "-m", "nodefence", "status"]
        as_json, as_text = [
            await asyncio.to_thread(
                subprocess.run, argv, env=env, capture_output=True, text=True, timeout=120
            )
            for argv in ([*command, "-o", "json"], command)
        ]
        assert as_json.returncode == 0, as_json.stderr
        view = json.loads(as_json.stdout)["alertmanager"]
        assert [s["id"] for s in view["silences"]] == [silence_id], view
        assert view["silencesLive"] is False, view
        assert as_text.returncode == 0, as_text.stderr
        assert "Silences that hold nodes without an alert (as last read at" in as_text.stdout
        assert silence_id in as_text.stdout
        assert oos_taints(cluster, NODE) == []
        assert force_offs(cluster) == 0


async def test_another_clusters_alerts_and_silences_count_for_nothing(
    tmp_path: Path, start_alertmanager: Starter
) -> None:
    """One Alertmanager for prod-a and prod-b, whose node names repeat. This is prod-a.
    compute01 is dead here and silenced by prod-a's on-call; prod-b's compute01 alert fires.
    compute02 is dead here, unsilenced; prod-b's alert for its own compute02 is silenced."""
    am = start_alertmanager()
    await am.post_alerts(
        alert("KubeNodeNotReady", node=OTHER, cluster="prod-b"),
        alert("KubeNodeNotReady", node=NODE, cluster="prod-b"),
    )
    ours = await am.silence_matching(
        [eq("cluster", "prod-a"), eq("node", OTHER)],
        comment="disk replacement",
        created_by="on-call",
    )
    await am.silence_matching([eq("cluster", "prod-b"), eq("node", NODE)])
    async with running_simulator(Simulation.from_scenario("seed")) as cluster:
        inventory = write_bmc_inventory(tmp_path / "bmcs.yaml", cluster.url, cluster.sim)
        cluster.sim.node_down(OTHER, since_seconds=DOWN_SECONDS)
        cluster.sim.node_down(NODE, since_seconds=DOWN_SECONDS)
        async with start_receiver(
            cluster,
            policy=redfish_policy(),
            alertmanager_url=am.url,
            alertmanager_matchers='cluster="prod-a"',
            bmc_inventory=inventory,
        ) as receiver:
            status, body = await receiver.post("/reconcile", {})
            assert status == 200, body
        by_node = {d["node"]: d for d in body["decisions"]}
        assert_held_by(by_node[OTHER], ours)
        assert by_node[NODE]["verdict"] == "fence", by_node[NODE]
        assert by_node[NODE]["reasons"][0]["guard"] == "no-alert", by_node[NODE]
        assert oos_taints(cluster, OTHER) == []
        assert len(oos_taints(cluster, NODE)) == 1


async def test_check_config_warns_of_a_shared_alertmanager_and_names_the_fallbacks_rules(
    tmp_path: Path, start_alertmanager: Starter
) -> None:
    am = start_alertmanager()
    await am.post_alerts(
        alert("KubeNodeNotReady", node=OTHER, cluster="prod-a"),
        alert("KubeNodeNotReady", node=NODE, cluster="prod-b"),
    )
    policy = policy_after_an_alert_rule(
        tmp_path, {"name": "workers", "match": {"node_selector": "role=worker"}}
    )
    async with running_simulator(Simulation.from_scenario("seed")) as cluster:
        env = {
            **os.environ,
            "KUBECONFIG": str(cluster.kubeconfig),
            "NODEFENCE_ALERTMANAGER_URL": am.url,
            "NODEFENCE_POLICY_FILE": str(policy),
            "NODEFENCE_ALERT_TOKEN": "check-config-token",
        }
        command = [sys.executable, "-m", "nodefence", "check-config"]
        shared = await asyncio.to_thread(
            subprocess.run, command, env=env, capture_output=True, text=True, timeout=120
        )
        scoped = await asyncio.to_thread(
            subprocess.run,
            command,
            env={**env, "NODEFENCE_ALERTMANAGER_MATCHERS": 'cluster="prod-a"'},
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert shared.returncode == 0, shared.stderr
    assert "warning: the node alerts Alertmanager holds come from several clusters" in (
        shared.stderr
    )
    assert "cluster: prod-a, prod-b" in shared.stderr
    report = json.loads(shared.stdout)
    assert "rule 'workers' (role=worker)" in report["fallback"], report["fallback"]
    assert "never by 'unreachable-only'" in report["fallback"], report["fallback"]
    assert scoped.returncode == 0, scoped.stderr
    assert "warning" not in scoped.stderr
    assert 'cluster="prod-a"' in json.loads(scoped.stdout)["alertmanager"]


async def test_explain_previews_the_fallbacks_decision(
    tmp_path: Path, start_alertmanager: Starter
) -> None:
    """``explain --no-alert``: the rule the fallback would choose (never one that names an
    alert) and the silence that would hold the node, with nothing written."""
    am = start_alertmanager()
    silence_id = await am.silence_matching(
        [eq("node", OTHER)], comment="disk replacement", created_by="on-call"
    )
    policy = policy_after_an_alert_rule(
        tmp_path, {"name": "default", "fencing": {"driver": "none"}}
    )
    async with running_simulator(Simulation.from_scenario("seed")) as cluster:
        cluster.sim.node_down(NODE, since_seconds=DOWN_SECONDS)
        cluster.sim.node_down(OTHER, since_seconds=DOWN_SECONDS)
        env = {
            **os.environ,
            "KUBECONFIG": str(cluster.kubeconfig),
            "NODEFENCE_ALERTMANAGER_URL": am.url,
            "NODEFENCE_POLICY_FILE": str(policy),
            "NODEFENCE_ALERT_TOKEN": "explain-token",
        }

        async def explain(node: str) -> dict[str, Any]:
            command = [sys.executable, "-m", "nodefence", "explain", node, "--no-alert"]
            done = await asyncio.to_thread(
                subprocess.run,
                [*command, "-o", "json"],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, done.stderr
            report: dict[str, Any] = json.loads(done.stdout)
            return report

        dead = await explain(NODE)
        silenced = await explain(OTHER)
        assert oos_taints(cluster, NODE) == []
    assert dead["decision"]["rule"] == "default", dead
    assert dead["outcome"] == "would fence it", dead
    assert "the fallback judges it from" in dead["alert"]["source"], dead
    assert silenced["heldBackBy"] == ["silence"], silenced
    [held] = [r for r in silenced["decision"]["reasons"] if r["guard"] == "silence"]
    assert silence_id in held["message"], held


@pytest.mark.invariant("S8")
async def test_a_dry_run_keeps_the_silences_it_reads_to_itself(
    tmp_path: Path, start_alertmanager: Starter
) -> None:
    """S8: the silences read in a dry run hold its decisions but are written nowhere."""
    am = start_alertmanager()
    silence_id = await am.silence_matching(
        [eq("node", NODE)], comment="disk replacement", created_by="on-call"
    )
    async with running_simulator(Simulation.from_scenario("seed")) as cluster:
        inventory = write_bmc_inventory(tmp_path / "bmcs.yaml", cluster.url, cluster.sim)
        cluster.sim.node_down(NODE, since_seconds=DOWN_SECONDS)
        async with start_receiver(
            cluster,
            policy={**redfish_policy(), "dry_run": True},
            alertmanager_url=am.url,
            bmc_inventory=inventory,
        ) as receiver:
            [decision] = await reconcile(receiver)
            assert_held_by(decision, silence_id)
            assert cluster.sim.store.peek(CONFIGMAPS, "nodefence", "nodefence-silences") is None


async def test_unchanged_silences_are_written_once_whatever_the_replicas(
    tmp_path: Path, start_alertmanager: Starter
) -> None:
    """The record of silences is written when they change (or when its reading time grows
    old), not on every pass of every replica."""
    am = start_alertmanager()
    await am.silence_matching([eq("node", NODE)])
    async with running_simulator(Simulation.from_scenario("seed")) as cluster:
        inventory = write_bmc_inventory(tmp_path / "bmcs.yaml", cluster.url, cluster.sim)

        def version() -> str:
            kept = cluster.sim.store.peek(CONFIGMAPS, "nodefence", "nodefence-silences")
            assert kept is not None
            return str(kept["metadata"]["resourceVersion"])

        written = ""
        for identity in ("replica-1", "replica-2"):
            async with start_receiver(
                cluster,
                policy=redfish_policy(),
                alertmanager_url=am.url,
                bmc_inventory=inventory,
                identity=identity,
            ) as receiver:
                for _ in range(3):
                    assert await reconcile(receiver) == []
                    written = written or version()
                    assert version() == written
        await am.silence_matching([eq("node", OTHER)])
        async with start_receiver(
            cluster, policy=redfish_policy(), alertmanager_url=am.url, bmc_inventory=inventory
        ) as receiver:
            assert await reconcile(receiver) == []
        assert version() != written
        kept = cluster.sim.store.peek(CONFIGMAPS, "nodefence", "nodefence-silences")
        assert kept is not None
        assert len(json.loads(kept["data"]["silences.json"])["silences"]) == 2


async def test_a_silence_in_force_when_read_holds_from_that_reading_once_alertmanager_is_down(
    tmp_path: Path,
) -> None:
    """Alertmanager stamps a new silence's start on its own clock, to the millisecond; the API
    server's ``Date`` has whole seconds, so a pass a moment later can read a ``now`` before that
    start. A silence Alertmanager said was in force when read had started by then: recalled
    during the outage, it holds from that reading, also for a replica whose estimate of the
    clock reads a moment before it."""
    async with (
        running_simulator(Simulation.from_scenario("seed")) as cluster,
        start_receiver(
            cluster, policy=redfish_policy(), alertmanager_url="http://127.0.0.1:9"
        ) as receiver,
    ):
        store = receiver.pipeline.silences
        assert store is not None
        read_at = datetime.now(UTC).replace(microsecond=0)
        just_set = Silence(
            "just-set",
            (Matcher("node", NODE),),
            starts_at=read_at + timedelta(milliseconds=700),
            ends_at=read_at + timedelta(hours=1),
            in_force=True,
        )
        deadline = Deadline(20)
        await store.keep((just_set,), read_at, deadline)
        now = read_at + timedelta(milliseconds=300)
        recalled = await store.recalled(now, deadline)
        [held] = recalled.silences
        assert held.active(now)
        assert held.starts_at == read_at
        # Another replica's estimate of the API server's clock, from whole-second Dates, may
        # read a moment before this reading, though it recalls after it.
        behind = read_at - timedelta(milliseconds=400)
        [also_held] = (await store.recalled(behind, deadline)).silences
        assert also_held.active(behind)
        # Not in force when read (pending): its own start stands.
        pending = dataclasses.replace(just_set, id="pending", in_force=False)
        await store.keep((pending,), read_at, deadline)
        [later] = (await store.recalled(now, deadline)).silences
        assert not later.active(now)
