"""The real-backend recovery benchmark's settings and its split of the time into waits: a
setting that drifted from the shipped files, or waits that do not add up, would report a
different install than the one measured."""

from __future__ import annotations

import pytest
import yaml
from bench.recovery import (
    TRIGGER,
    Measured,
    case_policy,
    deliveries,
    parse_duration,
    pods_deleted,
    scaled_rules,
    shipped_delays,
)
from bench.recovery_real import FASTEST_GRACE_SECONDS, rows, settings, waits

from bench import recovery
from nodefence.policy import parse_policy

SETTING = {s.case.key: s for s in settings()}


def test_shipped_setting_is_the_shipped_files_on_kubernetes_default_grace() -> None:
    shipped = SETTING["shipped"]
    assert shipped.delays.node_monitor_grace == 50
    assert shipped.delays.rule_for == shipped_delays().rule_for
    rule = case_policy(shipped.case, shipped.delays)["rules"][0]
    assert (rule["min_not_ready_seconds"], rule["lease_staleness_seconds"]) == (300, 120)
    assert rule["fencing"]["driver"] == "redfish"


def test_fastest_setting_never_calls_a_lease_stale_before_kubernetes_does() -> None:
    fastest = SETTING["fastest"]
    policy = parse_policy(case_policy(fastest.case, fastest.delays))
    rule = policy.rules[0]
    assert rule.fencing is not None
    assert rule.fencing.driver == "redfish"
    assert rule.min_not_ready_seconds == 0
    assert rule.lease_staleness_seconds >= fastest.delays.node_monitor_grace
    assert fastest.delays.node_monitor_grace == FASTEST_GRACE_SECONDS == 20
    assert policy.cluster.storm_cooldown_seconds == 0


def test_the_trigger_for_is_set_and_every_other_rule_scaled() -> None:
    shipped = yaml.safe_load(recovery.RULES.read_text())
    rules = scaled_rules(shipped, 1, trigger_for=0)
    fors = {r["alert"]: r.get("for") for g in rules["groups"] for r in g["rules"]}
    assert fors[TRIGGER] == "0s"
    assert parse_duration(fors["KubeNodeNotReady"]) == 900


def _run(key: str, **moments: float) -> Measured:
    setting = SETTING[key]
    run = Measured(setting.case, setting.delays, death=100.0, last_renewal=95.0, backend="real")
    for name, value in moments.items():
        setattr(run, name, value)
    run.pods = ("mariadb-server-1", "rabbitmq-rabbitmq-2")
    return run


@pytest.mark.parametrize(
    ("key", "trigger"), [("shipped", 95 + 52 + 330.0), ("fastest", 95 + 22 + 31.0)]
)
def test_the_waits_on_the_path_add_up_to_the_whole(key: str, trigger: float) -> None:
    run = _run(
        key,
        not_ready=95 + (52 if key == "shipped" else 22),
        firing=95 + (52 + 75 if key == "shipped" else 22 + 31),
        first_delivery=95 + (52 + 75 if key == "shipped" else 22 + 31),
        trigger=trigger,
        power_off=trigger + 1,
        taint=trigger + 1.1,
        pods_gone=trigger + 20,
        pods_running=trigger + 21,
        fenced_by="reconcile-005" if key == "shipped" else "webhook",
    )
    on_path = [w.seconds for w in waits(run) if w.on_path]
    assert all(s is not None for s in on_path)
    assert sum(s for s in on_path if s is not None) == pytest.approx(run.pods_running - 95)
    refused = [w for w in waits(run) if not w.on_path]
    assert bool(refused) == (key == "shipped")


def test_a_row_compares_the_real_run_with_the_simulators() -> None:
    real = _run("fastest", pods_running=160.0)
    sim = _run("fastest", pods_running=180.0)
    sim.backend = "sim"
    (row,) = rows([real, sim])
    assert row.value == "60.0 s"
    assert row.ratio == "0.75x the simulator"


def test_deliveries_are_dated_by_their_arrival() -> None:
    records = [
        {
            "event": "http_request",
            "path": "/alerts",
            "group_key": '{}:{node="control02"}',
            "timestamp": "2026-01-01T00:00:10Z",
            "duration_ms": 500,
        },
        {"event": "http_request", "path": "/readyz", "timestamp": "2026-01-01T00:00:11Z"},
    ]
    (arrived,) = deliveries(records)
    assert arrived % 60 == pytest.approx(9.5)


def test_pods_deleted_counts_each_pod_once_and_only_successes() -> None:
    path = "/api/v1/namespaces/openstack/pods/"
    records = [
        {"method": "DELETE", "path": path + "a", "status": 200},
        {"method": "DELETE", "path": path + "a", "status": 200},
        {"method": "DELETE", "path": path + "b", "status": 404},
        {"method": "GET", "path": path + "c", "status": 200},
    ]
    assert pods_deleted(records, ["a", "b", "c"]) == 1
