"""The pause switch is followed by a watch: an absent ConfigMap costs no 404 every few seconds,
a pause set or lifted with real kubectl reaches the receiver through the watch, and the pause
and its start show in the receiver's metrics."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.seeded_cluster import start_receiver

from nodefence.background.runner import Runner
from nodefence.kube.client import KubeClient, load_api_client
from nodefence.kube.facts import FactsReader
from nodefence.kube.pause_watch import CONTROL_CONFIGMAP, PAUSED_AT
from nodefence.runtime import serving_reader
from nodefence_sim.testing import SimulatorHandle
from pipeline.api_calls_support import PATH, granted, named

SWITCH = f"/api/v1/namespaces/nodefence/configmaps/{CONTROL_CONFIGMAP}"


@pytest.fixture
async def reader(cluster: SimulatorHandle) -> AsyncIterator[FactsReader]:
    """A serving receiver's reader (``runtime.serving_reader``); its watches start when a test
    calls ``follow``, so the tests of the plain GET use it as it is."""
    kube = KubeClient(await load_api_client(str(cluster.kubeconfig)))
    facts = serving_reader(kube, "nodefence")
    try:
        yield facts
    finally:
        await followers(facts).stop()
        await kube.close()


def followers(reader: FactsReader) -> Runner:
    return Runner([w for w in (reader.nodes, reader.pause_watch) if w is not None])


def follow(reader: FactsReader) -> None:
    """What ``serve`` starts in the background (``runtime.background_for``)."""
    followers(reader).start()


async def kubectl(cluster: SimulatorHandle, *args: str) -> str:
    """Real kubectl, without blocking the loop that serves the simulator."""
    proc = await asyncio.create_subprocess_exec(
        "kubectl",
        "--kubeconfig",
        str(cluster.kubeconfig),
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "HOME": str(cluster.kubeconfig.parent)},
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, out.decode()
    return out.decode()


async def until(check: Callable[[], object], within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while True:
        value = check()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {within}s")
        await asyncio.sleep(0.05)


def switch_requests(cluster: SimulatorHandle, since: int = 0) -> list[str]:
    """Requests that concern the pause ConfigMap: by its path, or by field selector."""
    found = []
    for r in cluster.faults.requests(since):
        if r.path == SWITCH or (r.path.endswith("/configmaps") and CONTROL_CONFIGMAP in r.query):
            found.append(f"{r.verb} {r.status}")
    return found


async def test_an_absent_switch_costs_no_404_while_watched(
    cluster: SimulatorHandle, reader: FactsReader
) -> None:
    follow(reader)
    watch = reader.pause_watch
    assert watch is not None
    await until(lambda: watch.fresh() is not None)
    cursor = cluster.faults.cursor
    # What the background refresh does every few seconds, and what every alert asks.
    for _ in range(20):
        assert await reader.refresh_pause() is None
        assert await reader.paused_reason() is None
    assert switch_requests(cluster, cursor) == []
    assert not [r for r in cluster.faults.requests(0) if r.status == 404 and "configmaps" in r.path]
    for request in cluster.faults.requests(0):
        if CONTROL_CONFIGMAP in request.path + request.query:
            match = PATH.match(request.path)
            assert match, request.path
            assert granted(request.verb, "", "configmaps", "nodefence", named(request)), request


async def test_a_pause_set_and_lifted_with_kubectl_reaches_the_reader(
    cluster: SimulatorHandle, reader: FactsReader
) -> None:
    follow(reader)
    watch = reader.pause_watch
    assert watch is not None
    await until(lambda: watch.fresh() is not None)
    await kubectl(cluster, "-n", "nodefence", "create", "configmap", CONTROL_CONFIGMAP)
    await kubectl(
        cluster,
        "-n",
        "nodefence",
        "annotate",
        "configmap",
        CONTROL_CONFIGMAP,
        "nodefence.io/paused=true",
        "nodefence.io/paused-reason=storage maintenance",
    )

    async def paused() -> bool:
        return await reader.paused_reason() is not None

    await until(paused)
    reason = await reader.paused_reason()
    assert reason is not None
    assert "storage maintenance" in reason
    # Dated by the API server's stamp on the write that set the annotation.
    assert reader.pause.since is not None
    assert abs(reader.pause.since - datetime.now(UTC)) < timedelta(minutes=5)

    await kubectl(cluster, "-n", "nodefence", "delete", "configmap", CONTROL_CONFIGMAP)

    async def resumed() -> bool:
        return await reader.paused_reason() is None

    await until(resumed)
    assert reader.pause.since is None


async def test_paused_at_written_by_the_pause_command_dates_the_pause(
    cluster: SimulatorHandle, reader: FactsReader
) -> None:
    follow(reader)
    at = "2026-11-30T22:10:00Z"
    await kubectl(cluster, "-n", "nodefence", "create", "configmap", CONTROL_CONFIGMAP)
    await kubectl(
        cluster,
        "-n",
        "nodefence",
        "annotate",
        "configmap",
        CONTROL_CONFIGMAP,
        "nodefence.io/paused=true",
        f"{PAUSED_AT}={at}",
    )

    async def paused() -> bool:
        return await reader.paused_reason() is not None

    await until(paused)
    assert reader.pause.since == datetime(2026, 11, 30, 22, 10, tzinfo=UTC)


def scraped(text: str) -> dict[str, float]:
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if not sample.labels
    }


async def test_the_receiver_exports_the_pause_and_its_start(cluster: SimulatorHandle) -> None:
    async with start_receiver(cluster) as receiver:
        async with receiver.session.get(receiver.url + "/readyz") as response:
            assert response.status == 200

        async def metrics() -> dict[str, float]:
            async with receiver.session.get(receiver.url + "/metrics") as response:
                return scraped(await response.text())

        assert (await metrics())["nodefence_paused"] == 0
        await kubectl(cluster, "-n", "nodefence", "create", "configmap", CONTROL_CONFIGMAP)
        await kubectl(
            cluster,
            "-n",
            "nodefence",
            "annotate",
            "configmap",
            CONTROL_CONFIGMAP,
            "nodefence.io/paused=true",
            f"{PAUSED_AT}=2026-11-30T22:10:00Z",
        )

        async def paused() -> bool:
            return (await metrics())["nodefence_paused"] == 1

        await until(paused)
        since = (await metrics())["nodefence_paused_timestamp_seconds"]
        assert since == datetime(2026, 11, 30, 22, 10, tzinfo=UTC).timestamp()
        await kubectl(cluster, "-n", "nodefence", "delete", "configmap", CONTROL_CONFIGMAP)

        async def resumed() -> bool:
            return (await metrics())["nodefence_paused"] == 0

        await until(resumed)
        assert (await metrics())["nodefence_paused_timestamp_seconds"] == 0


async def test_a_role_without_list_and_watch_falls_back_to_reading_the_switch(
    cluster: SimulatorHandle, reader: FactsReader
) -> None:
    """An install whose Role predates the watch (403 on the list): the switch is read with a
    GET as before, and a pause still takes effect."""
    cluster.faults.fail(
        None, status=403, verbs=("list", "watch"), path="/api/v1/namespaces/nodefence/configmaps"
    )
    follow(reader)
    await kubectl(cluster, "-n", "nodefence", "create", "configmap", CONTROL_CONFIGMAP)
    await kubectl(
        cluster,
        "-n",
        "nodefence",
        "annotate",
        "configmap",
        CONTROL_CONFIGMAP,
        "nodefence.io/paused=true",
    )
    cursor = cluster.faults.cursor
    assert await reader.refresh_pause() is not None
    assert reader.pause_watch is not None
    assert reader.pause_watch.fresh() is None
    assert "get 200" in switch_requests(cluster, cursor)
