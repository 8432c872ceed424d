"""The time-to-recovery benchmark's arithmetic and config scaling: a wrong factor or a missed
route would make it measure a different install than the one it reports on."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from bench.recovery import (
    CASES,
    Delays,
    Measured,
    case_policy,
    case_waits,
    cron_period,
    estimate,
    format_duration,
    parse_duration,
    rows,
    scale_duration,
    scaled_alertmanager,
    scaled_rules,
    seed_scenario,
    shipped_delays,
)

from bench import recovery
from nodefence_sim.simulation import SimSettings

CASE = {case.key: case for case in CASES}


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0s", 0), ("0", 0), ("30s", 30), ("1m", 60), ("15m", 900), ("1h30m", 5400), ("500ms", 0.5)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "1.5s", "5 m", "m", "1x"])
def test_parse_duration_rejects_what_prometheus_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_format_duration_writes_integers_only() -> None:
    assert format_duration(12) == "12s"
    assert format_duration(1.5) == "1500ms"
    assert format_duration(0) == "0s"
    assert scale_duration("1m", 5) == "12s"
    assert scale_duration("15m", 4) == "225s"
    assert scale_duration("30s", 4) == "7500ms"


def test_cron_period() -> None:
    assert cron_period("* * * * *") == 60
    assert cron_period("*/5 * * * *") == 300
    with pytest.raises(ValueError, match="schedule"):
        cron_period("0 * * * *")


def test_shipped_delays_come_from_the_shipped_files() -> None:
    delays = shipped_delays()
    assert delays.rule_for == 60
    assert (delays.group_wait, delays.group_interval, delays.repeat_interval) == (0, 60, 120)
    assert (delays.min_not_ready, delays.lease_staleness) == (300, 50)
    assert delays.reconcile_period == 60
    assert delays.node_monitor_grace == SimSettings().node_monitor_grace_seconds


def test_every_delay_is_divided_by_the_factor() -> None:
    delays = shipped_delays()
    scaled = delays.scaled(5)
    for name in Delays.__dataclass_fields__:
        assert getattr(scaled, name) == pytest.approx(getattr(delays, name) / 5), name


def test_fence_allowed_after_death_is_the_longer_wait() -> None:
    delays = shipped_delays()
    assert delays.fence_allowed_after_death() == 40 + 300
    longer_lease = replace(delays, lease_staleness=400)
    assert longer_lease.fence_allowed_after_death() == 400


def test_scaled_rules_only_shorten_every_for() -> None:
    shipped = yaml.safe_load(recovery.RULES.read_text())
    scaled = scaled_rules(shipped, 5)
    assert shipped == yaml.safe_load(recovery.RULES.read_text()), "the shipped copy changed"
    seen = 0
    for group, copy in zip(shipped["groups"], scaled["groups"], strict=True):
        for rule, new in zip(group["rules"], copy["rules"], strict=True):
            if "for" in rule:
                seen += 1
                assert parse_duration(new["for"]) == parse_duration(rule["for"]) / 5
            assert {k: v for k, v in new.items() if k != "for"} == {
                k: v for k, v in rule.items() if k != "for"
            }
    assert seen >= 3


def test_scaled_alertmanager_scales_every_route_and_points_at_the_run() -> None:
    shipped = yaml.safe_load(recovery.AM_EXAMPLE.read_text())
    token = Path("/tmp/token")
    config = scaled_alertmanager(
        shipped, 5, receiver_url="http://127.0.0.1:1/alerts", token_file=token
    )
    routes = [config["route"], *config["route"]["routes"]]
    originals = [shipped["route"], *shipped["route"]["routes"]]
    for route, original in zip(routes, originals, strict=True):
        for key in ("group_wait", "group_interval", "repeat_interval"):
            if key in original:
                assert parse_duration(route[key]) == parse_duration(original[key]) / 5
        assert route.get("matchers") == original.get("matchers")
    assert config["global"]["resolve_timeout"] == "60s"
    (receiver,) = (r for r in config["receivers"] if r["name"] == "nodefence")
    hook = receiver["webhook_configs"][0]
    assert hook["url"] == "http://127.0.0.1:1/alerts"
    assert hook["http_config"]["authorization"]["credentials_file"] == str(token)
    assert hook["send_resolved"] is True


def test_first_delivery_waits_fit_inside_what_the_alert_guarantees() -> None:
    delays = shipped_delays().scaled(5)
    min_not_ready, lease = case_waits(CASE["webhook"], delays)
    assert min_not_ready <= delays.rule_for
    assert lease <= delays.node_monitor_grace + delays.rule_for
    # The shipped waits, scaled: the first delivery comes before them.
    assert case_waits(CASE["reconcile"], delays) == (60, 10)
    assert delays.node_monitor_grace + delays.rule_for < delays.fence_allowed_after_death()


def test_case_policies_keep_the_shipped_policy_but_the_fencing_and_waits() -> None:
    delays = shipped_delays().scaled(5)
    shipped = yaml.safe_load(recovery.POLICY.read_text())["rules"][0]
    redfish = case_policy(CASE["redfish"], delays)["rules"][0]
    assert redfish["fencing"] == shipped["fencing"]
    inference = case_policy(CASE["reconcile"], delays)["rules"][0]
    assert inference["fencing"] == {"driver": "none"}
    assert (inference["min_not_ready_seconds"], inference["lease_staleness_seconds"]) == (60, 10)


def test_seed_scenario_scales_the_cluster_and_stays_loadable() -> None:
    delays = shipped_delays().scaled(5)
    scenario = seed_scenario(delays, 5)
    settings = SimSettings.from_mapping(scenario["simulation"])
    assert settings.node_monitor_grace_seconds == 8
    assert settings.pod_eviction_toleration_seconds == 60
    assert settings.lease_renew_seconds == 2
    assert settings.gate_enabled("NodeOutOfServiceVolumeDetach")
    assert any(o["kind"] == "StatefulSet" for o in scenario["objects"])


def test_estimate_adds_the_steps_of_the_reconcile_path() -> None:
    steps = estimate(shipped_delays(), pass_seconds=2.0, power=(5.0, 15.0))
    typical = sum(s.typical for s in steps)
    worst = sum(s.worst for s in steps)
    expected = 40 + 300 + 30 + recovery.JOB_START_SECONDS + 2 + 5 + recovery.POD_START_SECONDS
    assert typical == expected
    assert worst == expected - 40 + 50 - 30 + 60 - 5 + 15


def test_lateness_is_counted_from_when_the_policy_allows_the_fence() -> None:
    delays = shipped_delays().scaled(5)
    run = Measured(CASE["reconcile"], delays, death=1000.0, last_renewal=999.0)
    allowed = 999.0 + delays.fence_allowed_after_death()
    run.trigger, run.taint, run.pods_gone, run.pods_running = (
        allowed + 4,
        allowed + 5,
        allowed + 5.5,
        allowed + 6,
    )
    run.fenced_by = "reconcile-007"
    lateness = next(r for r in rows([run]) if "later than" in r.name)
    assert lateness.value == "5.0 s"
    assert lateness.met == "yes"
    own = next(r for r in rows([run]) if "overhead" in r.name)
    assert own.value == "2.00 s"
