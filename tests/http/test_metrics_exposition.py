"""``GET /metrics`` of a live receiver (the real pipeline against the simulator) by Prometheus'
conventions: which build it is, the process's own metrics, the Kubernetes API's latency beside
its request count, no ``_created`` series, and the server-error series an alert watches
exported from 0."""

from __future__ import annotations

from collections import Counter

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from nodefence import __version__
from nodefence_sim.simulation import Simulation
from nodefence_sim.testing import running_simulator
from reliability.serving import serving
from reliability.support import firing


async def exposition() -> list[Sample]:
    async with (
        running_simulator(Simulation.from_scenario("seed")) as cluster,
        serving(cluster, interval=3600) as receiver,
    ):
        # Refused (the node is Ready), on facts read from the Kubernetes API.
        [decision] = await receiver.alert(firing("compute01"))
        assert decision["verdict"] == "noop", decision
        async with receiver.http.get(receiver.url + "/metrics") as response:
            text = await response.text()
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


async def test_metrics_follow_prometheus_conventions() -> None:
    samples = await exposition()
    names = {s.name for s in samples}

    [build] = [s for s in samples if s.name == "nodefence_build_info"]
    assert build.labels == {"version": __version__}
    assert build.value == 1
    assert {"process_cpu_seconds_total", "process_resident_memory_bytes", "python_info"} <= names

    assert not [n for n in names if n.endswith("_created")]

    errors = {
        s.labels["code"]: s.value
        for s in samples
        if s.name == "nodefence_http_requests_total" and s.labels["path"] == "/alerts"
    }
    assert errors["500"] == errors["503"] == 0

    # Every request sent to the Kubernetes API is timed; one the rate limit held back was
    # never sent and has no latency.
    sent: Counter[str] = Counter()
    for s in samples:
        if s.name == "nodefence_kube_api_requests_total" and s.labels["code"] != "rate-limited":
            sent[s.labels["verb"]] += int(s.value)
    timed = {
        s.labels["verb"]: int(s.value)
        for s in samples
        if s.name == "nodefence_kube_api_request_duration_seconds_count"
    }
    assert sent["get"] > 0
    assert timed == dict(sent)
