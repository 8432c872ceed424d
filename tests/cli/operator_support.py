"""A simulated cluster in its own process, the ``nodefence`` command line and the real kubectl
against it, and a real fence done by ``nodefence serve`` on a posted alert: what the operator
command tests drive. Every process is started with ``bench.processes`` (output to files, every
wait with a deadline, everything stopped however a test ends)."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from bench.processes import Processes, eventually, free_port, get_json, http, processes, tail

from nodefence_sim.demo.payloads import node_alert, webhook

OOS = "node.kubernetes.io/out-of-service"
LISTENING = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")
TOKEN = "operator-commands-test-token"
NAMESPACE = "nodefence"
# Fences on inference alone: the simulated machines of these tests have no BMC.
INFERENCE_POLICY = "rules:\n  - name: default\n    fencing:\n      driver: none\n"
KUBECTL = shutil.which("kubectl")


@dataclass
class Cluster:
    url: str
    kubeconfig: Path
    workdir: Path
    procs: Processes
    bmc_inventory: Path

    def env(self, **extra: str) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("NODEFENCE_")}
        return {
            **base,
            "KUBECONFIG": str(self.kubeconfig),
            "NODEFENCE_NAMESPACE": NAMESPACE,
            "NODEFENCE_LOG_FORMAT": "json",
            **extra,
        }

    def policy(self, text: str, name: str = "policy.yaml") -> Path:
        path = self.workdir / name
        path.write_text(text)
        return path

    def nodefence(
        self, *args: str, env: dict[str, str] | None = None, timeout: float = 90
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "nodefence", *args],
            env=self.env(**(env or {})),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def kubectl(self, *args: str) -> subprocess.CompletedProcess[str]:
        assert KUBECTL is not None
        return subprocess.run(
            [KUBECTL, "--kubeconfig", str(self.kubeconfig), *args],
            env={**os.environ, "HOME": str(self.workdir)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def kubectl_json(self, *args: str) -> Any:
        result = self.kubectl(*args, "-o", "json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def node(self, name: str) -> dict[str, Any]:
        node: dict[str, Any] = self.kubectl_json("get", "node", name)
        return node

    def oos_taints(self, name: str) -> list[dict[str, Any]]:
        return [t for t in self.node(name)["spec"].get("taints") or [] if t["key"] == OOS]

    def annotations(self, name: str) -> dict[str, str]:
        notes: dict[str, str] = self.node(name)["metadata"].get("annotations") or {}
        return notes

    def configmap(self, name: str) -> dict[str, Any] | None:
        result = self.kubectl("get", "configmap", "-n", NAMESPACE, name, "-o", "json")
        if result.returncode != 0:
            assert "NotFound" in result.stderr, result.stderr
            return None
        found: dict[str, Any] = json.loads(result.stdout)
        return found

    def node_events(self, node: str) -> list[dict[str, Any]]:
        items = self.kubectl_json("get", "events", "-n", "default")["items"]
        return [
            e
            for e in items
            if e["involvedObject"].get("kind") == "Node"
            and e["involvedObject"].get("name") == node
            and (e.get("source") or {}).get("component") == "nodefence"
        ]

    def power_state(self, node: str) -> str:
        """The machine's PowerState as its simulated BMC reports it (with the inventory's
        credentials, as nodefence would ask)."""
        entry = yaml.safe_load(self.bmc_inventory.read_text())["nodes"][node]
        basic = base64.b64encode(f"{entry['username']}:{entry['password']}".encode()).decode()
        status, body = http(
            "GET", entry["address"] + entry["system"], headers={"Authorization": f"Basic {basic}"}
        )
        assert status == 200, body
        state: str = json.loads(body)["PowerState"]
        return state

    def down(self, node: str, since_seconds: int = 1200) -> None:
        status, body = http(
            "POST", f"{self.url}/sim/v1/nodes/{node}/down", {"sinceSeconds": since_seconds}
        )
        assert status == 200, body

    def up(self, node: str, since_seconds: int = 600) -> None:
        status, body = http(
            "POST", f"{self.url}/sim/v1/nodes/{node}/up", {"sinceSeconds": since_seconds}
        )
        assert status == 200, body

    def cursor(self) -> int:
        value: int = get_json(f"{self.url}/sim/v1/requests?since=999999999")["cursor"]
        return value

    def requests(self, since: int) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = get_json(f"{self.url}/sim/v1/requests?since={since}")[
            "requests"
        ]
        return records

    def fence(self, node: str, policy: Path) -> dict[str, Any]:
        """Fence ``node`` the way production does: ``nodefence serve`` receives a firing
        alert; returns the decision from its reply once the taint is on the node."""
        port = free_port()
        env = self.env(
            PORT=str(port),
            NODEFENCE_HOST="127.0.0.1",
            NODEFENCE_ALERT_TOKEN=TOKEN,
            NODEFENCE_POLICY_FILE=str(policy),
            NODEFENCE_IDENTITY="nodefence-test",
            NODEFENCE_RECONCILE_INTERVAL="0",
        )
        serve = self.procs.start(
            f"serve-{node}", [sys.executable, "-m", "nodefence", "serve"], env=env
        )
        try:
            self.procs.wait_ready(serve, f"http://127.0.0.1:{port}/readyz")
            status, body = http(
                "POST",
                f"http://127.0.0.1:{port}/alerts",
                webhook([node_alert(node)]),
                headers={"Authorization": f"Bearer {TOKEN}"},
                timeout=60,
            )
            assert status == 200, (status, body, tail(serve.output()))
            reply: dict[str, Any] = json.loads(body)
            decisions = reply["decisions"]
            assert decisions[0]["verdict"] == "fence", json.dumps(decisions, indent=2)
            eventually(lambda: self.oos_taints(node), within=30, what=f"taint on {node}")
            return reply
        finally:
            serve.stop()


def start_cluster(procs: Processes, workdir: Path, *, within: float = 60.0) -> Cluster:
    kubeconfig = workdir / "kubeconfig"
    inventory = workdir / "bmc-inventory.yaml"
    argv = [
        sys.executable,
        "-m",
        "nodefence",
        "simulate",
        "--port",
        "0",
        "--scenario",
        "seed",
        "--kubeconfig-out",
        str(kubeconfig),
        "--bmc-inventory-out",
        str(inventory),
    ]
    process = procs.start("simulator", argv)

    def listening() -> str:
        if not process.alive():
            raise AssertionError(f"simulator exited during startup:\n{tail(process.output())}")
        found = LISTENING.search(process.output())
        return found.group(1) if found and kubeconfig.exists() else ""

    url = eventually(listening, within=within, what="simulator listening")
    procs.wait_ready(process, f"{url}/api/v1/nodes", within=within)
    return Cluster(url, kubeconfig, workdir, procs, inventory)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """The seed cluster in a process of its own (``nodefence simulate``) with a Redfish BMC per
    node, on loopback, as an operator's commands and kubectl reach a cluster; every process
    stopped however the test ends. The CLI tests' ``cluster`` (their conftest) and the image's."""
    with processes(tmp_path) as procs:
        yield start_cluster(procs, tmp_path)
