"""Processes and HTTP plumbing shared by the benchmarks: a simulated cluster and a receiver,
each in its own process so that clients, servers and the load generator never share a core's
event loop, as in a real cluster."""

from __future__ import annotations

import base64
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

from bench.processes import eventually, free_port
from nodefence_sim.demo.payloads import node_alert, webhook
from nodefence_sim.testing import SimulatorProcess

DEAD_NODE = "dead01"
FINALIZER = "bench.nodefence.io/protect"
NAMESPACE = "workload"
TOKEN = "bench-token"  # noqa: S105 - a loopback-only receiver started by the benchmark
LATENCY_SECONDS = 0.002


@dataclass(frozen=True)
class Row:
    """One line of the results table. ``ratio`` is how many times better than the baseline."""

    name: str
    value: str
    baseline: str = ""
    ratio: str = ""
    target: str = ""
    met: str = ""
    note: str = ""


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def median(values: list[float]) -> float:
    return statistics.median(values)


def request(
    url: str,
    *,
    method: str = "GET",
    body: Any = None,
    token: str | None = None,
    timeout: float = 120,
) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"} if data is not None else {}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=data, method=method, headers=headers)  # noqa: S310
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:  # noqa: S310
            text = response.read()
            status = response.status
    except urllib.error.HTTPError as exc:
        text = exc.read()
        status = exc.code
    try:
        return status, json.loads(text) if text else None
    except ValueError:
        return status, text.decode(errors="replace")


def scenario(pods: int, finalizer_every: int = 10) -> dict[str, Any]:
    """Four healthy nodes (three control-plane) and ``dead01`` running ``pods`` bare pods, every
    ``finalizer_every``-th of them holding a finalizer that only a person would remove."""
    nodes = [("control01", True), ("control02", True), ("control03", True), ("worker01", False)]
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "nodefence"}},
    ]
    for name, control in [*nodes, (DEAD_NODE, False)]:
        labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
        if control:
            labels["node-role.kubernetes.io/control-plane"] = ""
        objects.append(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
        )
    for index in range(pods):
        metadata: dict[str, Any] = {
            "name": f"app-{index:04d}",
            "namespace": NAMESPACE,
            "labels": {"app": "bench"},
        }
        if index % finalizer_every == 0:
            metadata["finalizers"] = [FINALIZER]
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": metadata,
                "spec": {
                    "nodeName": DEAD_NODE,
                    "containers": [{"name": "app", "image": "registry.local/app:1"}],
                },
            }
        )
    # The seed cluster's version, before NodeOutOfServiceVolumeDetach: nothing but the runbook
    # (or nodefence) deletes the stuck pods, as the seed's operators found.
    return {"simulation": {"k8s_version": "1.24.8", "feature_gates": {}}, "objects": objects}


# The benchmark's machines have no BMC: it measures the fence path on inference alone.
POLICY = {
    "rules": [
        {
            "name": "default",
            "fencing": {"driver": "none"},
            "purge": {"strip_finalizers": [FINALIZER]},
        }
    ]
}


class Cluster:
    """A simulator subprocess with a generated scenario, a dead node and API latency."""

    def __init__(self, process: SimulatorProcess) -> None:
        self.process = process
        self.url = process.url
        self.kubeconfig = process.kubeconfig

    def pods_on_dead_node(self) -> list[dict[str, Any]]:
        _, body = request(
            f"{self.url}/api/v1/pods?fieldSelector=spec.nodeName%3D{DEAD_NODE}", timeout=60
        )
        return list(body["items"])

    def kill_dead_node(self, pods: int) -> None:
        status, body = request(
            f"{self.url}/sim/v1/nodes/{DEAD_NODE}/down", method="POST", body={"sinceSeconds": 1200}
        )
        assert status < 300, body

        def all_terminating() -> bool:
            items = self.pods_on_dead_node()
            stuck = [p for p in items if p["metadata"].get("deletionTimestamp")]
            return len(stuck) == pods

        eventually(all_terminating, within=120, interval=0.2, what="eviction of every pod")

    def set_latency(self, seconds: float) -> None:
        request(f"{self.url}/sim/v1/faults", method="POST", body={"latencySeconds": seconds})

    def cursor(self) -> int:
        _, body = request(f"{self.url}/sim/v1/requests?since=999999999999")
        return int(body["cursor"])

    def requests_since(self, cursor: int) -> list[dict[str, Any]]:
        _, body = request(f"{self.url}/sim/v1/requests?since={cursor}")
        return list(body["requests"])


@contextmanager
def cluster(pods: int) -> Iterator[Cluster]:
    with tempfile.TemporaryDirectory(prefix="nodefence-bench-") as tmp:
        path = Path(tmp) / "scenario.yaml"
        path.write_text(yaml.safe_dump(scenario(pods), sort_keys=False), encoding="utf-8")
        with SimulatorProcess(str(path), startup_timeout=120) as process:
            yield Cluster(process)


def stop(process: subprocess.Popen[bytes] | subprocess.Popen[str]) -> None:
    """SIGTERM, then SIGKILL after 30 s: a process under measurement is never left behind."""
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class ReceiverProcess:
    """``nodefence serve`` as a subprocess, as it runs in a pod."""

    def __init__(
        self,
        kubeconfig: Path,
        *,
        policy: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.policy = policy
        # Settings of this run (e.g. the API limit and cached refusals off, for a baseline).
        self.env = dict(env or {})
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._tmp = tempfile.TemporaryDirectory(prefix="nodefence-bench-rx-")
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> ReceiverProcess:
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "PORT": str(self.port),
            "NODEFENCE_HOST": "127.0.0.1",
            "NODEFENCE_ALERT_TOKEN": TOKEN,
            "NODEFENCE_NAMESPACE": "nodefence",
            "NODEFENCE_IDENTITY": "bench",
            **self.env,
        }
        if self.policy is not None:
            policy_file = Path(self._tmp.name) / "policy.yaml"
            policy_file.write_text(yaml.safe_dump(self.policy), encoding="utf-8")
            env["NODEFENCE_POLICY_FILE"] = str(policy_file)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "nodefence", "serve"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

        def ready() -> bool:
            try:
                return request(self.url + "/healthz", timeout=2)[0] == 200
            except OSError:
                return False

        eventually(ready, within=60, interval=0.05, what="receiver start")
        return self

    def __exit__(self, *_: object) -> None:
        if self.process is not None:
            stop(self.process)
        self._tmp.cleanup()

    def status_kib(self, field: str) -> int:
        """A ``/proc/<pid>/status`` memory figure (VmHWM: peak resident set) in KiB."""
        assert self.process is not None
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        raise KeyError(field)

    def alert(self, payload: dict[str, Any]) -> tuple[int, Any]:
        return request(self.url + "/alerts", method="POST", body=payload, token=TOKEN)

    def cpu_seconds(self) -> float:
        """User and system CPU time the receiver has used (``/proc/<pid>/stat``)."""
        assert self.process is not None
        stat = Path(f"/proc/{self.process.pid}/stat").read_text()
        fields = stat.rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# The same receiver with the API rate limit and the cached refusals off: every alert read live,
# nothing held back, as before either existed. The baseline of the before-and-after rows.
UNLIMITED = {"NODEFENCE_API_QPS": "0", "NODEFENCE_CACHED_REFUSALS": "false"}


class RequestLog(Protocol):
    """A simulator whose request log can be read from a cursor (``/sim/v1/requests``)."""

    def cursor(self) -> int: ...

    def requests_since(self, cursor: int) -> list[dict[str, Any]]: ...


def wait_for_node_index(receiver: ReceiverProcess, sim: RequestLog) -> None:
    """Probe ``/readyz`` as a kubelet would (which starts the node index), then wait until the
    index has listed every node and opened its watch of them."""
    cursor = sim.cursor()
    eventually(
        lambda: request(receiver.url + "/readyz")[0] == 200,
        within=60,
        interval=0.05,
        what="ready",
    )
    eventually(
        lambda: any(
            r["verb"] == "watch" and r["path"] == "/api/v1/nodes"
            for r in sim.requests_since(cursor)
        ),
        within=300,
        interval=0.2,
        what="the node index's watch",
    )


# The User-Agent of the benchmark's own reads of the cluster, so that a request log read from the
# real API server's audit log can leave them out of what the receiver sent.
BENCH_AGENT = "nodefence-bench"
# The kubeconfig user ``nodefence simulate --backend real`` writes, which the receiver runs as.
RECEIVER_USER = "admin"


def sent_by_receiver(record: dict[str, Any]) -> bool:
    """Whether a request-log record is the receiver's: on the real backend the audit log names
    the user (every client but the control plane's components; the benchmark's own reads carry
    ``BENCH_AGENT``); the simulator logs only its clients and names none."""
    return (
        record.get("user", RECEIVER_USER) == RECEIVER_USER
        and record.get("userAgent") != BENCH_AGENT
    )


def kube_get(kubeconfig: Path, path: str) -> tuple[int, bytes]:
    """GET ``path`` from the cluster a kubeconfig names, with its token and CA where it has
    them (the real backend's; the simulator's has neither): the status and the raw reply."""
    config = yaml.safe_load(kubeconfig.read_text(encoding="utf-8"))
    cluster = config["clusters"][0]["cluster"]
    user = config["users"][0].get("user") or {}
    headers = {"Accept": "application/json", "User-Agent": BENCH_AGENT}
    if user.get("token"):
        headers["Authorization"] = f"Bearer {user['token']}"
    context = None
    if cluster.get("certificate-authority-data"):
        ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
        context = ssl.create_default_context(cadata=ca)
    req = urllib.request.Request(cluster["server"] + path, headers=headers)  # noqa: S310
    try:
        with urllib.request.urlopen(req, timeout=120, context=context) as reply:  # noqa: S310
            return int(reply.status), reply.read()
    except urllib.error.HTTPError as exc:  # a 404 (no such object) is a reply too
        return exc.code, exc.read()


def kube_list(kubeconfig: Path, path: str) -> list[dict[str, Any]]:
    """Every object of a collection, 500 a page."""
    items: list[dict[str, Any]] = []
    token = ""
    while True:
        status, raw = kube_get(kubeconfig, f"{path}?limit=500&continue={token}")
        if status != 200:
            raise RuntimeError(f"GET {path} -> {status}: {raw[:300]!r}")
        page = json.loads(raw)
        items += page.get("items") or []
        token = (page.get("metadata") or {}).get("continue") or ""
        if not token:
            return items


def firing(node: str, alertname: str = "KubeNodeNotReady") -> dict[str, Any]:
    return webhook([node_alert(node, alertname=alertname)])
