"""A real Alertmanager on loopback per test, optionally behind its own basic auth and TLS
(``--web.config.file``), and helpers to post alerts and silences to its API v2.

Processes are started and stopped by the end-to-end harness (its own process group, output in
a file, deadlines on every wait), so the two suites start Alertmanager the same way.
"""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web
from bench.processes import Processes, eventually, free_port, processes, tail

BINARY = "prometheus-alertmanager"
USER = "nodefence"
PASSWORD = "correct horse battery"
# bcrypt of PASSWORD (cost 4: the test needs the format, not the strength).
PASSWORD_HASH = "$2b$04$ynFmdgyhlFSDjV9f8gF4KeZvjQHGX6cVblPkkSQNv1bpsvvMvcCdC"
# Only alerts named NodefenceTestInhibitor mute the node alerts of the same node.
INHIBITOR = "NodefenceTestInhibitor"


@dataclass
class TLSFiles:
    cert: Path
    key: Path


@dataclass
class RealAlertmanager:
    url: str
    basic_auth: bool
    tls: TLSFiles | None

    def _headers(self) -> dict[str, str]:
        if not self.basic_auth:
            return {}
        token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        return {"Authorization": f"Basic {token}"}

    def _ssl(self) -> ssl.SSLContext | None:
        if self.tls is None:
            return None
        return ssl.create_default_context(cafile=str(self.tls.cert))

    async def _post(self, path: str, body: Any) -> Any:
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                f"{self.url}{path}",
                json=body,
                headers=self._headers(),
                ssl=self._ssl() or True,
            ) as response,
        ):
            text = await response.text()
            assert response.status == 200, f"POST {path} -> {response.status}: {text}"
            return await response.json(content_type=None) if text else None

    async def post_alerts(self, *alerts: Mapping[str, Any]) -> None:
        await self._post("/api/v2/alerts", [dict(a) for a in alerts])

    async def silence(self, **labels: str) -> str:
        return await self.silence_matching(
            [{"name": k, "value": v, "isRegex": False, "isEqual": True} for k, v in labels.items()]
        )

    async def silence_matching(
        self,
        matchers: list[dict[str, Any]],
        *,
        comment: str = "node under maintenance",
        created_by: str = "tests",
        ends_in: timedelta = timedelta(hours=1),
    ) -> str:
        """A silence as a person sets it in Alertmanager's UI or amtool: matchers in the API's
        shape (``isRegex``, ``isEqual``), in force from a minute ago."""
        now = datetime.now(UTC)
        body = {
            "matchers": matchers,
            "startsAt": iso(now - timedelta(minutes=1)),
            "endsAt": iso(now + ends_in),
            "createdBy": created_by,
            "comment": comment,
        }
        answer = await self._post("/api/v2/silences", body)
        silence_id: str = answer["silenceID"]
        return silence_id

    def ready(self) -> bool:
        request = urllib.request.Request(f"{self.url}/-/ready", headers=self._headers())  # noqa: S310
        try:
            with urllib.request.urlopen(request, timeout=2, context=self._ssl()) as response:  # noqa: S310
                return bool(response.status == 200)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def alert(
    alertname: str,
    *,
    ends_in: timedelta = timedelta(hours=1),
    started: timedelta = timedelta(minutes=5),
    **labels: str,
) -> dict[str, Any]:
    """An alert as Prometheus posts it: endsAt in the future while it fires."""
    now = datetime.now(UTC)
    return {
        "labels": {"alertname": alertname, **labels},
        "annotations": {"summary": f"{alertname} for the tests"},
        "startsAt": iso(now - started),
        "endsAt": iso(now + ends_in),
        "generatorURL": "http://prometheus.invalid/graph",
    }


def _config() -> dict[str, Any]:
    return {
        "route": {"receiver": "null", "group_by": ["alertname", "node"]},
        "receivers": [{"name": "null"}],
        "inhibit_rules": [
            {
                "source_matchers": [f"alertname={INHIBITOR}"],
                "target_matchers": ['alertname=~"KubeNode.*"'],
                "equal": ["node"],
            }
        ],
    }


def _self_signed(folder: Path) -> TLSFiles:
    """A certificate for 127.0.0.1 that is its own CA, from the openssl command line."""
    files = TLSFiles(folder / "tls.crt", folder / "tls.key")
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("openssl is required to make the test certificate")
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(files.key),
            "-out",
            str(files.cert),
        ],
        check=True,
        capture_output=True,
    )
    return files


Starter = Callable[..., RealAlertmanager]


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Processes]:
    if shutil.which(BINARY) is None:
        reason = f"{BINARY} not on PATH (Debian package prometheus-alertmanager)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    with processes(tmp_path) as group:
        yield group


@pytest.fixture
def start_alertmanager(procs: Processes) -> Starter:
    """Start a real Alertmanager; ``basic_auth`` and ``tls`` turn on its web config file."""
    count = 0

    def start(*, basic_auth: bool = False, tls: bool = False) -> RealAlertmanager:
        nonlocal count
        count += 1
        workdir = procs.workdir / f"alertmanager-{count}"
        workdir.mkdir()
        config = workdir / "alertmanager.yml"
        config.write_text(yaml.safe_dump(_config()))
        argv = [
            BINARY,
            f"--config.file={config}",
            f"--storage.path={workdir / 'data'}",
            "--cluster.listen-address=",
        ]
        web_config: dict[str, Any] = {}
        if basic_auth:
            web_config["basic_auth_users"] = {USER: PASSWORD_HASH}
        tls_files = _self_signed(workdir) if tls else None
        if tls_files is not None:
            web_config["tls_server_config"] = {
                "cert_file": str(tls_files.cert),
                "key_file": str(tls_files.key),
            }
        if web_config:
            (workdir / "web.yml").write_text(yaml.safe_dump(web_config))
            argv.append(f"--web.config.file={workdir / 'web.yml'}")
        port = free_port()
        argv.append(f"--web.listen-address=127.0.0.1:{port}")
        process = procs.start(f"alertmanager-{count}", argv, cwd=workdir)
        scheme = "https" if tls else "http"
        am = RealAlertmanager(f"{scheme}://127.0.0.1:{port}", basic_auth, tls_files)

        def up() -> bool:
            if not process.alive():
                raise AssertionError(f"alertmanager exited:\n{tail(process.output())}")
            return am.ready()

        eventually(up, within=60, what=f"alertmanager ready at {am.url}")
        return am

    return start


@dataclass
class Served:
    """An aiohttp application on a loopback port, for what Alertmanager itself cannot do."""

    url: str


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[web.Application], Any]]:
    runners: list[web.AppRunner] = []

    async def start(app: web.Application) -> Served:
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = runner.addresses[0][1]
        return Served(f"http://127.0.0.1:{port}")

    yield start
    for runner in runners:
        await runner.cleanup()


async def poll(probe: Callable[[], Any], *, within: float, what: str) -> Any:
    """Await ``probe()`` until it is truthy; fail at the deadline with its last value."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        value = await probe()
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"{what}: not met within {within:.0f}s (last value {value!r})")
        await asyncio.sleep(0.1)
