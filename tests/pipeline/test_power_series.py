"""Every power series a configured rule can produce is exported from 0 at start, so the first
failed power action after a restart is an increase ``NodefencePowerActionFailed`` sees."""

from __future__ import annotations

from tests.seeded_cluster import start_receiver

from nodefence_sim.simulation import Simulation
from nodefence_sim.testing import running_simulator

OUTCOMES = ("off", "on", "unknown", "not-sent")


def rule(name: str, driver: str, action: str) -> dict[str, object]:
    return {
        "name": name,
        "match": {"node_selector": f"pool={name}"},
        "fencing": {"driver": driver, "action": action},
    }


async def test_power_series_start_at_zero_for_each_configured_driver_and_action() -> None:
    policy = {
        "rules": [
            rule("reboots", "redfish", "reboot"),
            rule("reads", "ipmi", "verify"),
            {"name": "inference", "fencing": {"driver": "none"}},
        ]
    }
    async with (
        running_simulator(Simulation.from_scenario("seed")) as cluster,
        start_receiver(cluster, policy=policy) as receiver,
    ):
        registry = receiver.metrics.registry

        def value(driver: str, action: str, outcome: str) -> float | None:
            labels = {"driver": driver, "action": action, "outcome": outcome}
            return registry.get_sample_value("nodefence_power_actions_total", labels)

        for action in ("status", "off", "on"):
            assert [value("redfish", action, o) for o in OUTCOMES] == [0.0] * 4, action
        assert [value("ipmi", "status", o) for o in OUTCOMES] == [0.0] * 4
        # What the configuration cannot produce is not invented.
        assert value("ipmi", "off", "unknown") is None
        assert value("none", "status", "unknown") is None
