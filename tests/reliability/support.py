"""Shared checks for the reliability tests: the final state every fault must leave behind, and
a listener that watches every node write in the simulator for a broken invariant."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp
from bench.processes import free_port
from tests.seeded_cluster import OOS, Receiver, eventually, oos_taints, pods_on, terminating_on

from nodefence.engine import mirror
from nodefence_sim.demo.payloads import node_alert, webhook
from nodefence_sim.resources import NODES, PODS
from nodefence_sim.store import WatchEvent
from nodefence_sim.testing import SimulatorHandle

NODE_PATH = "/api/v1/nodes/{}"


def alert(name: str, status: str = "firing") -> dict[str, Any]:
    if status == "firing":
        return node_alert(name, starts_at=datetime.now(UTC) - timedelta(minutes=20))
    return node_alert(name, status="resolved", ends_at=datetime.now(UTC))


def firing(*names: str) -> dict[str, Any]:
    return webhook([alert(n) for n in names])


def resolved(*names: str) -> dict[str, Any]:
    return webhook([alert(n, "resolved") for n in names])


def ours(node: dict[str, Any]) -> bool:
    """The node carries nodefence's fence: its taint and mirror annotations written for this
    node."""
    notes = node["metadata"].get("annotations") or {}
    has_taint = any(t.get("key") == OOS for t in node["spec"].get("taints") or [])
    return has_taint and notes.get(mirror.FENCED_BY) == mirror.FENCED_BY_VALUE


def orphans(nodes: list[dict[str, Any]]) -> list[str]:
    """Nodes whose taint and mirror annotations disagree: a mirror without the taint, or
    nodefence's mirror beside a taint of another effect. Either would make a later decision
    wrong."""
    found = []
    for node in nodes:
        notes = node["metadata"].get("annotations") or {}
        taints = [t for t in node["spec"].get("taints") or [] if t.get("key") == OOS]
        fenced = mirror.FENCED_BY in notes
        if fenced and len(taints) != 1:
            found.append(f"{node['metadata']['name']}: mirror with {len(taints)} taints")
        elif fenced and taints[0].get("effect") != notes.get(mirror.TAINT_EFFECT):
            found.append(f"{node['metadata']['name']}: taint effect differs from the mirror")
    return found


@dataclass
class NodeWriteWatch:
    """Checks the fence budget and taint/mirror agreement on every node write the simulator
    stores, so a violation that lasts a single write is still caught."""

    limit: int
    max_fenced: int = 0
    violations: list[str] = field(default_factory=list)
    writes: int = 0

    def attach(self, cluster: SimulatorHandle) -> NodeWriteWatch:
        store = cluster.sim.store

        def listener(event: WatchEvent) -> None:
            if event.resource.key != NODES.key:
                return
            self.writes += 1
            nodes = store.items(NODES)
            fenced = sorted(n["metadata"]["name"] for n in nodes if ours(n))
            self.max_fenced = max(self.max_fenced, len(fenced))
            if len(fenced) > self.limit:
                self.violations.append(f"{len(fenced)} nodes fenced at once: {fenced}")
            self.violations.extend(orphans(nodes))

        store.add_listener(listener)
        return self


def pod_uids_off(cluster: SimulatorHandle, name: str) -> dict[str, tuple[str, str]]:
    """UID -> (namespace, name) of every pod bound to another node (or to none)."""
    return {
        p["metadata"]["uid"]: (p["metadata"]["namespace"], p["metadata"]["name"])
        for p in cluster.sim.store.items(PODS)
        if p["spec"].get("nodeName") != name
    }


def successful(cluster: SimulatorHandle, method: str, path: str, since: int = 0) -> int:
    return sum(
        1
        for r in cluster.faults.requests(since)
        if r.method == method and r.path == path and 200 <= r.status < 300
    )


def attempts(cluster: SimulatorHandle, method: str, path: str, since: int = 0) -> int:
    return sum(1 for r in cluster.faults.requests(since) if r.method == method and r.path == path)


def assert_fenced(
    cluster: SimulatorHandle,
    name: str,
    *,
    others_before: dict[str, tuple[str, str]],
    on_node_before: set[tuple[str, str]],
    since: int = 0,
) -> None:
    """The state a fence must end in, whatever went wrong on the way: one taint, mirror
    annotations for this very node, no pod left Terminating on it, exactly one successful fence
    write, and no pod of another node touched (S6)."""
    node = cluster.sim.store.get(NODES, None, name)
    [taint] = oos_taints(cluster, name)
    notes = node["metadata"]["annotations"]
    assert notes[mirror.FENCED_BY] == mirror.FENCED_BY_VALUE, notes
    assert notes[mirror.NODE_UID] == node["metadata"]["uid"], notes
    assert notes[mirror.TAINT_EFFECT] == taint["effect"], (notes, taint)
    assert notes[mirror.BOOT_ID] == node["status"]["nodeInfo"]["bootID"], notes
    assert orphans(cluster.sim.store.items(NODES)) == []
    assert terminating_on(cluster, name) == []
    assert successful(cluster, "PUT", NODE_PATH.format(name), since) == 1
    alive = {p["metadata"]["uid"] for p in cluster.sim.store.items(PODS)}
    lost = {uid: ref for uid, ref in others_before.items() if uid not in alive}
    assert lost == {}, f"pods of other nodes were deleted: {sorted(lost.values())}"
    deleted = {
        tuple(r.path.split("/")[4:7:2])
        for r in cluster.faults.requests(since)
        if r.method == "DELETE" and "/pods/" in r.path and r.status == 200
    }
    assert deleted <= on_node_before, sorted(deleted - on_node_before)


def names_on(cluster: SimulatorHandle, name: str) -> set[tuple[str, str]]:
    return {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in pods_on(cluster, name)}


async def kill_node(cluster: SimulatorHandle, name: str) -> None:
    """Take the node down twenty minutes ago and wait for its pods to hang Terminating."""
    cluster.sim.node_down(name, since_seconds=1200)
    await eventually(lambda: terminating_on(cluster, name))


async def until(
    probe: Callable[[], Awaitable[object]], *, within: float = 30.0, interval: float = 0.05
) -> None:
    """Poll an asynchronous probe until it returns something truthy; fail at the deadline."""
    deadline = time.monotonic() + within
    while True:
        value = await probe()
        if value:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {within}s (last value {value!r})")
        await asyncio.sleep(interval)


# Both are answered 503 with Retry-After, and Alertmanager delivers again: a pass that ran out of
# its request deadline (a busy machine), and one whose API calls the deadline cut short.
RETRIED_PROBLEMS = ("deadline-exceeded", "cluster-unavailable")


def retried_problem(status: int, body: dict[str, Any]) -> bool:
    """The answer is a 503 that Alertmanager (or the next reconcile pass) would retry."""
    kind = str(body.get("type", "")).rsplit(":", 1)[-1]
    return status == 503 and kind in RETRIED_PROBLEMS


async def redelivered(receiver: Receiver, payload: Any) -> tuple[list[dict[str, Any]], int]:
    """Alertmanager's redelivery once the API is back: the same webhook again until it is
    answered 200, each other answer a 503 it would retry (a pass that ran out of its short
    deadline on a busy machine carries on in the next). The decisions, and how many deliveries
    were answered 503 first."""
    retried = 0
    deadline = time.monotonic() + 60
    while True:
        status, body = await receiver.post("/alerts", payload)
        if status == 200:
            return list(body["decisions"]), retried
        assert retried_problem(status, body), (status, body)
        assert time.monotonic() < deadline, f"no delivery answered 200 within 60s: {body}"
        retried += 1


# The simulated machines have no BMC in these tests: the rule fences on inference alone.
INFERENCE_POLICY = Path(__file__).with_name("inference-policy.yaml")


class ServeProcess:
    """``python -m nodefence serve`` against the simulator, killed with SIGKILL when asked."""

    def __init__(
        self,
        kubeconfig: Path,
        token: str,
        identity: str,
        *,
        clock_offset: str | None = None,
        policy: Path = INFERENCE_POLICY,
        env: dict[str, str] | None = None,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "PORT": str(self.port),
            "NODEFENCE_HOST": "127.0.0.1",
            "NODEFENCE_ALERT_TOKEN": token,
            "NODEFENCE_IDENTITY": identity,
            "NODEFENCE_NAMESPACE": "nodefence",
            "NODEFENCE_LOG_LEVEL": "warning",
            "NODEFENCE_POLICY_FILE": str(policy),
            **(env or {}),
        }
        command = [sys.executable, "-m", "nodefence", "serve"]
        if clock_offset is not None:
            # libfaketime: this process's wall clock is off by ``clock_offset`` (e.g. "+600s");
            # its monotonic clock stays true, as NTP trouble leaves it.
            faketime = shutil.which("faketime")
            assert faketime is not None, "faketime is required (Debian package faketime)"
            command = [faketime, "-f", clock_offset, *command]
            env["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
        # A process group of its own: faketime runs nodefence as its child, and a kill must
        # reach both.
        self.process = subprocess.Popen(
            command,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    async def wait_healthy(self, http: aiohttp.ClientSession) -> ServeProcess:
        async def healthy() -> bool:
            assert self.process.poll() is None, "nodefence serve exited during startup"
            with contextlib.suppress(aiohttp.ClientError):
                async with http.get(self.url + "/healthz") as response:
                    return response.status == 200
            return False

        # Generous: the process imports the whole service first, on a machine that may be busy.
        await until(healthy, within=60, interval=0.05)
        return self

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def __enter__(self) -> ServeProcess:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.kill()
