"""The real-backend recovery benchmark's settings and its split of the time into waits: a
setting that drifted from the shipped files, or waits that do not add up, would report a
different install than the one measured."""

from __future__ import annotations

import pytest
import yaml
from bench.recovery import (
    NAMESPACE,
    NODE,
    POLICY,
    TRIGGER,
    WATCH,
    Measured,
    case_policy,
    deliveries,
    fenced_by_receiver,
    parse_duration,
    pods_deleted,
    real_statefulset,
    receiver_source,
    running_ready,
    scaled_rules,
    shipped_delays,
    watch_budget,
)
from bench.recovery_real import (
    FASTEST_GRACE_SECONDS,
    OFF_TARGET_SECONDS,
    breakdown,
    rows,
    settings,
    waits,
)

from bench import recovery
from nodefence.policy import parse_policy

SETTING = {s.case.key: s for s in settings()}


def test_shipped_setting_is_the_shipped_files_on_kubernetes_default_grace() -> None:
    shipped = SETTING["shipped"]
    assert shipped.delays.node_monitor_grace == 50
    assert shipped.delays.rule_for == shipped_delays().rule_for
    rule = case_policy(shipped.case, shipped.delays)["rules"][0]
    default = parse_policy(yaml.safe_load(POLICY.read_text())).rules[0]
    assert (rule["min_not_ready_seconds"], rule["lease_staleness_seconds"]) == (
        default.min_not_ready_seconds,
        default.lease_staleness_seconds,
    )
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


def _run(
    key: str, failure: str = "hung", alertmanager: str = "reachable", **moments: float
) -> Measured:
    setting = {s.case.key: s for s in settings(failure, alertmanager)}[key]
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
    )
    run.fenced_by = "reconcile-005" if key == "shipped" else "webhook"
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
    (arrived,) = deliveries(records, NODE)
    assert arrived % 60 == pytest.approx(9.5)


def test_pods_deleted_counts_each_pod_once_and_only_successes() -> None:
    path = "/api/v1/namespaces/openstack/pods/"
    records = [
        {"method": "DELETE", "path": path + "a", "status": 200},
        {"method": "DELETE", "path": path + "a", "status": 200},
        {"method": "DELETE", "path": path + "b", "status": 404},
        {"method": "GET", "path": path + "c", "status": 200},
    ]
    assert pods_deleted(records, ["a", "b", "c"], NAMESPACE) == 1


@pytest.mark.parametrize("alertmanager", ["reachable", "unreachable"])
def test_a_fence_the_receiver_set_off_by_itself_still_adds_up(alertmanager: str) -> None:
    """The Node watch or a wake-up fenced: the log does not date what set it off, so NotReady
    to the Off is one wait, and the path still adds up."""
    run = _run(
        "shipped",
        "off",
        alertmanager,
        not_ready=148.0,
        power_read=148.6,
        power_off=150.0,
        taint=150.1,
        pods_gone=151.0,
        pods_running=152.5,
    )
    run.fenced_by, run.power_read_state = WATCH, "off"
    if alertmanager == "reachable":
        run.firing, run.first_delivery = 230.0, 230.0
    found = waits(run)
    on_path = [w.seconds for w in found if w.on_path]
    assert sum(s for s in on_path if s is not None) == pytest.approx(152.5 - 95)
    assert any("BMC read off 0.6 s after NotReady" in w.detail for w in found)
    assert any("alert" in w.what for w in found) == (alertmanager == "reachable")
    assert not any("alert" in w.what and w.on_path for w in found)


def test_the_median_of_several_runs_is_held_to_the_goal() -> None:
    moments = [60.0, 100.0, 80.0]
    runs = [_run("shipped", "off", pods_running=100.0 + m) for m in moments]
    *each, middle = rows(runs)
    assert len(each) == 3
    assert middle.value == "80.0 s"
    assert middle.target == f"≤ {OFF_TARGET_SECONDS:g} s"
    assert middle.met == "yes"
    assert "| real, run 1 | real, run 2 | real, run 3 |" in breakdown(runs)


def test_a_hung_machine_is_held_to_the_grace_the_minimum_and_thirty_seconds() -> None:
    (row,) = rows([_run("shipped", "hung", pods_running=100.0 + 390)])
    assert row.target == "≤ 380 s"
    assert row.met == "NO"


def test_without_alertmanager_the_run_waits_for_the_fallback() -> None:
    setting = {s.case.key: s for s in settings("hung", "unreachable")}["shipped"]
    assert not setting.case.alertmanager
    fallback = parse_policy(case_policy(setting.case, setting.delays)).cluster
    assert watch_budget(setting.case, setting.delays) >= (
        setting.delays.node_monitor_grace + fallback.fallback_after_seconds
    )


def test_a_fence_is_the_deliverys_only_while_its_answer_is_being_written() -> None:
    spans = [(10.0, 10.5), (100.0, 103.0)]
    assert fenced_by_receiver(spans, 102.0) == ("webhook", 100.0)
    assert fenced_by_receiver(spans, 60.0) == (WATCH, None)


def test_unknown_failures_are_refused() -> None:
    with pytest.raises(ValueError, match="failure"):
        settings("melted")


def test_the_real_settings_run_the_receiver_as_the_deployment_does() -> None:
    """The Deployment overlay and the Helm chart's default: the receiver's own passes, its Node
    watch and wake-ups, and no CronJob."""
    assert {s.case.passes for s in settings("off", "unreachable")} == {"receiver"}


def test_the_receivers_own_fence_is_named_by_its_decision_log() -> None:
    fence = {"action": "fence", "outcome": "done"}
    entries = [
        {"node": "control02", "source": "reconcile-loop", "results": [fence]},
        {
            "node": "control02",
            "source": "wake-up",
            "decided_at": "2026-01-01T00:00:10Z",
            "results": [fence],
        },
        {"node": "control02", "source": "wake-up", "results": []},
    ]
    source, decided = receiver_source(entries, NODE)
    assert source.startswith("receiver's wake-up")
    assert decided is not None
    assert decided % 60 == 10
    assert receiver_source(entries[2:], NODE) == (WATCH, None)


def test_real_kubelets_move_the_benchmarks_statefulset_from_real01_to_real02() -> None:
    """With real kubelets the dying node is real01 and the pod counted is the benchmark's own
    StatefulSet's, placed on the real nodes from the image each of them holds."""
    (shipped, _) = settings("off", "unreachable", "real")
    assert (shipped.case.node, shipped.case.namespace) == ("real01", "default")
    assert "real kubelets" in shipped.case.title
    assert (SETTING["shipped"].case.node, SETTING["shipped"].case.namespace) == (NODE, NAMESPACE)
    template = real_statefulset()["spec"]["template"]["spec"]
    assert template["nodeSelector"] == {"sim.nodefence.io/kubelet": "real"}
    assert template["containers"][0]["imagePullPolicy"] == "Never"
    with pytest.raises(ValueError, match="nodes"):
        settings("off", "reachable", "metal")


def test_a_replacement_counts_once_every_container_is_ready() -> None:
    """A real kubelet reports Running before its containers are ready; the run counts ready."""
    pod = {
        "metadata": {"name": "db-0"},
        "status": {"phase": "Running", "containerStatuses": [{"ready": False, "state": {}}]},
    }
    assert not running_ready(pod)
    pod["status"]["containerStatuses"][0]["ready"] = True
    assert running_ready(pod)
    assert not running_ready({"metadata": {}, "status": {"phase": "Running"}})
